"""kserve_sdk/security in process: every REST route and gRPC method has one group, the flags' values parse (or
fail naming the flag and the value, its secret hidden), the check compares the header, the fast path declines
a request that does not pass, the audited calls are the management ones, and a long x-request-id is replaced."""
import logging

import pytest
from tornado import httputil

from kserve_sdk import lifecycle
from kserve_sdk.dataplane import DataPlane
from kserve_sdk.errors import PermissionDenied, grpc_code_of, status_of
from kserve_sdk.handlers import http as http_app
from kserve_sdk.handlers.api import Options
from kserve_sdk.handlers.fast_path import FastInferenceDelegate
from kserve_sdk.handlers.grpc import InferenceServicer
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.model_server import REST_APIS
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.security import Security
from kserve_sdk.security.audit import changes_settings, is_audited_grpc, is_audited_rest
from kserve_sdk.security.grpc_guard import method_wrapper
from kserve_sdk.security.http_guard import AccessCheck, GuardedFastPath, group_of
from kserve_sdk.security.restricted import GROUPS, GRPC_PREFIX, grpc_group, parse, parse_one

SERVICE_METHODS = [method.name for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods]


def _server_routes():
    return [(pattern, handler) for api in REST_APIS for pattern, handler in api.routes(Options(enable_docs_url=True))]


# --- every route and method in one group ----------------------------------------------------------------------
def test_every_rest_route_of_the_server_is_in_one_group():
    routes = _server_routes()
    assert len(routes) > 40
    without = [(pattern, handler.__name__) for pattern, handler in routes if group_of(handler) not in GROUPS]
    assert without == [], "a REST route without a group: add its (protocol, endpoint) to restricted.REST_GROUPS"


@pytest.mark.parametrize("path_part,group", [
    ("/v2/health/live", "health"), ("/v2/models/([^/]+?)(?:/versions/([^/]+))?/ready", "health"),
    ("/v2/models/([^/]+?)(?:/versions/([^/]+))?/infer", "inference"), ("/v1/models/([^/]+?):predict", "inference"),
    ("/openai/v1/chat/completions", "inference"), ("/v1/timeseries/forecast", "inference"),
    ("/v2/repository/models/([^/]+?)/(load|unload)", "model-repository"), ("/v2/logging", "logging"),
    ("/v2/trace/setting", "trace"), ("/v2/systemsharedmemory/region/([^/]+)/register", "shared-memory"),
    ("/v2/models/([^/]+?)(?:/versions/([^/]+))?/config", "model-config"), ("/v2/models/stats", "statistics"),
    ("/v2/jobs", "jobs"), ("/metrics", "metrics"), ("/openapi\\.json", "docs"), ("/v2", "metadata"),
])
def test_a_route_is_in_tritons_group_or_ours(path_part, group):
    handlers = [handler for pattern, handler in _server_routes() if pattern == path_part]
    assert handlers and {group_of(handler) for handler in handlers} == {group}


def test_every_method_of_the_grpc_service_is_in_one_group():
    assert "ModelInfer" in SERVICE_METHODS and "CudaSharedMemoryRegister" in SERVICE_METHODS
    served = [name for name in dir(InferenceServicer) if name[0].isupper()]
    without = [name for name in {*SERVICE_METHODS, *served} if grpc_group(name) not in GROUPS]
    assert without == [], "a gRPC method without a group: add it to restricted.GRPC_GROUPS"
    assert {grpc_group(name) for name in SERVICE_METHODS} == set(GROUPS) - {"jobs", "metrics", "docs"}


# --- the flags' values -----------------------------------------------------------------------------------------
def test_a_value_names_groups_a_key_and_a_value_holding_colons_and_equals():
    restriction = parse_one("--http_restricted_api", "inference, model-repository:Authorization=Bearer a:b=c")
    assert restriction.groups == {"inference", "model-repository"}
    assert (restriction.key, restriction.value) == ("authorization", "Bearer a:b=c")
    by_group = parse("--http_restricted_api", ["inference:authorization=Bearer x", "logging,trace:admin-key=y"])
    assert set(by_group) == {"inference", "logging", "trace"} and by_group["logging"] is by_group["trace"]
    assert parse("--http_restricted_api", None) == {}


@pytest.mark.parametrize("value,message", [
    ("inference", "--http_restricted_api 'inference': expected GROUPS:KEY=VALUE"),
    ("admin-key=s3cret", "--http_restricted_api 'admin-key=<hidden>': expected GROUPS:KEY=VALUE"),
    ("inference:authorization", "--http_restricted_api 'inference:authorization': expected GROUPS:KEY=VALUE"),
    ("inference:authorization=", "--http_restricted_api 'inference:authorization=': expected GROUPS:KEY=VALUE"),
    (":k=v", "--http_restricted_api ':k=<hidden>': expected GROUPS:KEY=VALUE"),
    ("inference,,logging:k=v", "--http_restricted_api 'inference,,logging:k=<hidden>': expected GROUPS:KEY=VALUE"),
    ("inferense:k=s3cret", "--http_restricted_api 'inferense:k=<hidden>': unknown group 'inferense'; the groups "
                           "are health, metadata, inference, shared-memory"),
    ("inference:bad key=v", "--http_restricted_api 'inference:bad key=<hidden>': 'bad key' is not a header name"),
    ("inference:k= v", "--http_restricted_api 'inference:k=<hidden>': the value must be printable, without spaces"),
])
def test_a_malformed_value_names_the_flag_and_the_value_without_its_secret(value, message):
    with pytest.raises(ValueError) as refused:
        parse("--http_restricted_api", [value])
    assert message in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_a_group_in_two_restrictions_is_refused_naming_it():
    with pytest.raises(ValueError, match="--grpc_restricted_protocol: group 'logging' is in more than one "
                                         "restriction"):
        Security(grpc=["inference,logging:a=1", "logging:b=2"])
    Security(http=["logging:a=1"], grpc=["logging:b=2"])  # each flag on its own


# --- the check -------------------------------------------------------------------------------------------------
def test_a_restriction_compares_the_header_and_grpc_takes_tritons_prefix_too():
    restriction = parse_one("--x", "inference:authorization=Bearer s3cret")
    headers = httputil.HTTPHeaders({"Authorization": "Bearer s3cret"})
    assert restriction.allows(headers.get)
    assert not restriction.allows(httputil.HTTPHeaders({"Authorization": "Bearer s3cre"}).get)
    assert not restriction.allows(httputil.HTTPHeaders().get)
    assert restriction.allows_grpc({"authorization": "Bearer s3cret"})
    assert restriction.allows_grpc({GRPC_PREFIX + "authorization": "Bearer s3cret"})
    assert not restriction.allows_grpc({"authorization": b"Bearer s3cret"})
    assert restriction.http_message() == "This API is restricted, expecting header 'authorization'"
    assert restriction.grpc_message() == ("This protocol is restricted, expecting header 'authorization' "
                                          "(or 'triton-grpc-protocol-authorization')")


def test_permission_denied_is_403_and_permission_denied():
    assert status_of(PermissionDenied("no")) == (403, "no") and grpc_code_of(PermissionDenied("no")) == \
        "PERMISSION_DENIED"


class _Handler:
    protocol, endpoint = "rest_v2", "logging"

    def __init__(self, headers):
        start = httputil.RequestStartLine("POST", "/v2/logging", "HTTP/1.1")
        self.request = httputil.HTTPServerRequest(start_line=start, headers=httputil.HTTPHeaders({"Host": "h",
                                                                                                  **headers}))


def test_the_access_check_refuses_a_restricted_handler_without_the_header():
    check = AccessCheck(parse("--http_restricted_api", ["logging:admin-key=s3cret"]))
    check(_Handler({"admin-key": "s3cret"}))
    with pytest.raises(PermissionDenied, match="This API is restricted, expecting header 'admin-key'"):
        check(_Handler({"admin-key": "wrong"}))

    class Metrics(_Handler):
        endpoint = "metrics"

    check(Metrics({}))  # a group not restricted


def _infer_request(headers):
    start = httputil.RequestStartLine("POST", "/v2/models/m/infer", "HTTP/1.1")
    return httputil.HTTPServerRequest(start_line=start, headers=httputil.HTTPHeaders({"Host": "h", **headers}))


def test_the_fast_path_declines_a_request_without_the_inference_header():
    app = http_app.make_app(DataPlane(ModelRepository()), REST_APIS)
    plain = app.fast_path
    Security(http=["logging:admin-key=a"]).protect_app(app)
    assert app.fast_path is plain and "access_check" in app.settings  # no fast route in a restricted group
    Security(http=["inference:authorization=Bearer k"]).protect_app(app)
    assert isinstance(app.fast_path, GuardedFastPath) and app.fast_path.dataplane is plain.dataplane
    assert app.fast_path.delegate_for(_infer_request({})) is None
    assert app.fast_path.delegate_for(_infer_request({"Authorization": "Bearer no"})) is None
    assert isinstance(app.fast_path.delegate_for(_infer_request({"Authorization": "Bearer k"})),
                      FastInferenceDelegate)
    untouched = http_app.make_app(DataPlane(ModelRepository()), REST_APIS)
    Security().protect_app(untouched)
    assert "access_check" not in untouched.settings and type(untouched.fast_path) is type(plain)


def test_grpc_wraps_only_the_restricted_and_the_audited_methods():
    class Handler:
        unary_unary, stream_stream = object(), None

        def _replace(self, **changes):
            return ("wrapped", sorted(changes))

    table = {name: Handler() for name in SERVICE_METHODS}
    plain = method_wrapper(None, {})(table)
    assert sorted(name for name, handler in plain.items() if handler is not table[name]) == sorted(
        name for name in SERVICE_METHODS if is_audited_grpc(name))
    restricted = method_wrapper(None, parse("--grpc_restricted_protocol", ["health:k=v"]))(table)
    assert {name for name, handler in restricted.items() if handler is not table[name]} == {
        "ServerLive", "ServerReady", "ModelReady", *(name for name in SERVICE_METHODS if is_audited_grpc(name))}


# --- the audit log's calls -------------------------------------------------------------------------------------
def test_the_audited_rest_calls_are_the_management_posts():
    endpoints = {getattr(handler, "endpoint", "") for _, handler in _server_routes()}
    audited = {endpoint for endpoint in endpoints if is_audited_rest(endpoint, "POST")}
    assert audited == {"repository", "logging", "trace_setting", "shm_register", "shm_unregister",
                       "cuda_shm_register", "cuda_shm_unregister"}
    assert not any(is_audited_rest(endpoint, "GET") for endpoint in endpoints)


def test_the_audited_grpc_calls_are_the_management_methods():
    audited = {name for name in SERVICE_METHODS if is_audited_grpc(name)}
    assert audited == {"RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryRegister",
                       "SystemSharedMemoryUnregister", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
                       "LogSettings", "TraceSetting"}
    reading = pb.LogSettingsRequest()
    assert not changes_settings("LogSettings", reading) and not changes_settings("TraceSetting",
                                                                                  pb.TraceSettingRequest())
    reading.settings["log_info"].bool_param = False
    assert changes_settings("LogSettings", reading) and changes_settings("RepositoryModelLoad", None)


# --- a long x-request-id ---------------------------------------------------------------------------------------
def test_an_x_request_id_over_256_characters_is_replaced_and_logged_once_without_it(caplog):
    kept = {"x-request-id": "k" * 256}
    assert lifecycle.take_request_id(kept) == "k" * 256
    headers = {"x-request-id": "z" * 60_000}
    with caplog.at_level(logging.WARNING, logger="kserve"):
        minted = lifecycle.take_request_id(headers)
    assert len(minted) == 36 and headers["x-request-id"] == minted
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [f"an x-request-id of 60000 characters (more than 256) was replaced by {minted}"]
