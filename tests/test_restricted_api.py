"""Restricted API groups (--http_restricted_api, --grpc_restricted_protocol), Triton's way, against real servers:
a request to a restricted group without its header (or metadata) is answered 403 / PERMISSION_DENIED naming
the header, counted and access-logged like any answer; with it, served. Inference takes a key that the openai
client's api_key and tritonclient's headers send. A bad value stops the server at start-up naming it."""
import json
import os

import grpc
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import ROOT, Server, answers_ok, post_json, request, scrape, triton_error, triton_input, value
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

ZOO = os.path.join(ROOT, "tests", "models", "zoo.py")
TOKEN = "Bearer s3cret"
INFERENCE = {"authorization": TOKEN}
ADMIN = {"admin-key": "adm1n"}
RESTRICTIONS = ["inference:authorization=" + TOKEN,
                "model-repository,logging,trace,shared-memory,model-config,statistics:admin-key=adm1n"]
INFERENCE_REFUSED = "This API is restricted, expecting header 'authorization'"
ADMIN_REFUSED = "This API is restricted, expecting header 'admin-key'"
GRPC_INFERENCE_REFUSED = ("This protocol is restricted, expecting header 'authorization' "
                          "(or 'triton-grpc-protocol-authorization')")
ACCESS = "ACCESS %(request_id)s %(endpoint)s %(status)s"


@pytest.fixture(scope="module")
def restricted(start_server):
    """The zoo's echo model, inference and the management groups restricted on REST and gRPC."""
    flags = []
    for restriction in RESTRICTIONS:
        flags += ["--http_restricted_api", restriction, "--grpc_restricted_protocol", restriction]
    return start_server("tests/models/zoo.py", *flags, "--allow_client_shm", "true", "--access_log_format", ACCESS,
                        env={"ZOO_MODELS": "echo"})


def _refused(got, message):
    status, headers, body = got
    assert status == 403, body
    assert json.loads(body) == {"error": message}
    assert headers["content-type"].startswith("application/json") and headers["x-request-id"]


def _echo_doc():
    return {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}


# --- REST ------------------------------------------------------------------------------------------------------
def test_rest_inference_needs_its_header_and_the_refusal_is_counted_and_logged(restricted):
    port = restricted.http_port
    before = value(scrape(restricted), "kserve_requests_total", model_name="echo", protocol="rest_v2",
                   endpoint="infer", status="403")
    for headers in ({}, {"authorization": "Bearer wrong"}, {"x-request-id": "no-key-1"}):
        _refused(request(port, "POST", "/v2/models/echo/infer", json.dumps(_echo_doc()).encode(), headers),
                 INFERENCE_REFUSED)
    _refused(request(port, "POST", "/v1/models/echo:predict", b'{"instances": [[1, 2, 3, 4]]}'), INFERENCE_REFUSED)
    _refused(request(port, "POST", "/v2/models/echo/infer_stream", json.dumps(_echo_doc()).encode()),
             INFERENCE_REFUSED)
    after = value(scrape(restricted), "kserve_requests_total", model_name="echo", protocol="rest_v2",
                  endpoint="infer", status="403")
    assert after - before == 3
    restricted.log_with("ACCESS no-key-1 infer 403")
    status, _, body = post_json(port, "/v2/models/echo/infer", _echo_doc(), {"Authorization": TOKEN})
    assert status == 200 and body["outputs"][0]["data"] == [1, 2, 3, 4]
    status, _, body = post_json(port, "/v1/models/echo:predict", {"instances": [[1, 2]]}, INFERENCE)
    assert (status, body) == (200, {"predictions": [[1, 2]]})


def test_tritonclient_http_sends_the_key_as_a_header(restricted):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{restricted.http_port}")
    tensor = triton_input(httpclient, "INPUT0", np.arange(4, dtype=np.float32).reshape(1, 4))
    assert triton_error(client.infer, "echo", [tensor]) == ("403", INFERENCE_REFUSED)
    result = client.infer("echo", [tensor], headers={"Authorization": TOKEN})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0, 1, 2, 3]])
    assert client.is_server_live()  # health is not restricted here
    assert triton_error(client.load_model, "echo") == ("403", ADMIN_REFUSED)
    assert triton_error(client.get_model_config, "echo") == ("403", ADMIN_REFUSED)
    assert triton_error(client.get_inference_statistics, "echo") == ("403", ADMIN_REFUSED)
    assert triton_error(client.get_log_settings) == ("403", ADMIN_REFUSED)
    assert client.get_log_settings(headers=ADMIN)["log_info"] is True
    client.close()


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v2/repository/models/echo/load", b"{}"), ("POST", "/v2/repository/models/echo/unload", b"{}"),
    ("POST", "/v2/repository/index", b"{}"), ("GET", "/v2/logging", None),
    ("POST", "/v2/logging", b'{"log_info": false}'), ("POST", "/v2/trace/setting", b'{"trace_rate": "2"}'),
    ("GET", "/v2/models/echo/trace/setting", None), ("GET", "/v2/systemsharedmemory/status", None),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key": "/k", "offset": 0, "byte_size": 8}'),
    ("POST", "/v2/systemsharedmemory/unregister", b""), ("GET", "/v2/cudasharedmemory/status", None),
    ("POST", "/v2/cudasharedmemory/unregister", b""), ("GET", "/v2/models/echo/config", None),
    ("GET", "/v2/models/stats", None),
])
def test_rest_management_calls_need_the_admin_header(restricted, method, path, body):
    _refused(request(restricted.http_port, method, path, body), ADMIN_REFUSED)
    _refused(request(restricted.http_port, method, path, body, {"admin-key": "ADM1N"}), ADMIN_REFUSED)


def test_rest_management_with_the_admin_header_is_served(restricted):
    status, _, body = post_json(restricted.http_port, "/v2/repository/index", {}, ADMIN)
    assert status == 200 and [entry["name"] for entry in body] == ["echo"]
    status, _, body = request(restricted.http_port, "GET", "/v2/models/echo/config", headers=ADMIN)
    assert status == 200 and json.loads(body)["name"] == "echo"


# --- gRPC ------------------------------------------------------------------------------------------------------
def _grpc_infer(client, headers=None):
    tensor = triton_input(grpcclient, "INPUT0", np.arange(4, dtype=np.float32).reshape(1, 4))
    return client.infer("echo", [tensor], headers=headers)


def test_grpc_inference_needs_its_metadata_plain_or_with_tritons_prefix(restricted):
    client = grpcclient.InferenceServerClient(restricted.grpc_url)
    before = value(scrape(restricted), "kserve_requests_total", model_name="echo", protocol="grpc",
                   endpoint="ModelInfer", status="PERMISSION_DENIED")
    assert triton_error(_grpc_infer, client) == ("StatusCode.PERMISSION_DENIED", GRPC_INFERENCE_REFUSED)
    assert triton_error(_grpc_infer, client, {"authorization": "Bearer wrong"})[0] == "StatusCode.PERMISSION_DENIED"
    for headers in (INFERENCE, {"triton-grpc-protocol-authorization": TOKEN}):
        np.testing.assert_array_equal(_grpc_infer(client, headers).as_numpy("OUTPUT0"), [[0, 1, 2, 3]])
    after = value(scrape(restricted), "kserve_requests_total", model_name="echo", protocol="grpc",
                  endpoint="ModelInfer", status="PERMISSION_DENIED")
    assert after - before == 2
    assert client.is_server_live() and client.is_model_ready("echo")  # health is not restricted
    status, message = triton_error(client.load_model, "echo")
    assert status == "StatusCode.PERMISSION_DENIED" and "expecting header 'admin-key'" in message
    assert triton_error(client.get_log_settings)[0] == "StatusCode.PERMISSION_DENIED"
    assert client.get_log_settings(headers=ADMIN, as_json=True)["settings"]["log_info"] == {"bool_param": True}
    client.close()


def test_a_grpc_stream_without_the_metadata_is_refused_with_the_request_id(restricted):
    request_message = pb.ModelInferRequest(model_name="echo", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="INPUT0", datatype="FP32", shape=[1, 4], contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]))])
    with grpc.insecure_channel(restricted.grpc_url) as channel:
        stub = GRPCInferenceServiceStub(channel)
        answers = stub.ModelStreamInfer(iter([request_message]), metadata=(("x-request-id", "stream-no-key"),),
                                        timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            list(answers)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.details() == GRPC_INFERENCE_REFUSED
        assert ("x-request-id", "stream-no-key") in tuple(refused.value.trailing_metadata())
        served = list(stub.ModelStreamInfer(iter([request_message]), metadata=tuple(INFERENCE.items()), timeout=10))
        assert [m.error_message for m in served] == [""] and served[0].infer_response.model_name == "echo"


# --- OpenAI ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def openai_server(start_server):
    return start_server("tests/models/openai_models.py", "--http_restricted_api", "inference:authorization=" + TOKEN,
                        grpc=False)


def test_the_openai_clients_api_key_opens_a_restricted_inference_group(openai_server):
    base = f"{openai_server.url}/openai/v1"
    with openai.OpenAI(base_url=base, api_key="s3cret", max_retries=0, timeout=30) as client:
        got = client.completions.create(model="parrot", prompt="one two three", max_tokens=2)
        assert got.choices[0].text == "one two"
        assert [m.id for m in client.models.list()]
    with openai.OpenAI(base_url=base, api_key="wrong", max_retries=0, timeout=30) as client:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client.chat.completions.create(model="parrot", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 403
        assert refused.value.body["message"] == INFERENCE_REFUSED  # OpenAI's error shape
        assert refused.value.body["code"] == "403"
        with pytest.raises(openai.PermissionDeniedError):
            client.models.list()
    assert answers_ok(f"{openai_server.url}/v2/health/live")  # health is not restricted


# --- groups of our own; the flags apart ------------------------------------------------------------------------
class ProbedServer(Server):
    """A server whose health group is restricted: it is probed with the key."""

    def _live(self) -> bool:
        try:
            return request(self.http_port, "GET", "/v2/health/live", headers={"probe-key": "p"}, timeout=1)[0] == 200
        except OSError:
            return False


def test_health_metrics_docs_and_jobs_can_be_restricted_and_grpc_apart(tmp_path):
    server = ProbedServer(ZOO, ["--http_restricted_api", "health,metadata,metrics,docs,jobs:probe-key=p",
                                "--enable_docs_url", "true", "--jobs_store", f"sqlite:///{tmp_path}/jobs.sqlite3"],
                          env={"ZOO_MODELS": "echo"})
    try:
        server.start()
        port = server.http_port
        for method, path, body in [("GET", "/", None), ("GET", "/v2/health/ready", None),
                                   ("GET", "/v2/models/echo/ready", None), ("GET", "/v1/models/echo", None),
                                   ("GET", "/v2", None), ("GET", "/v2/models/echo", None), ("GET", "/metrics", None),
                                   ("GET", "/openapi.json", None), ("GET", "/docs", None),
                                   ("GET", "/docs/static/swagger-ui-bundle.js", None), ("GET", "/v2/jobs", None),
                                   ("POST", "/v2/models/echo/jobs", json.dumps(_echo_doc()).encode())]:
            got = request(port, method, path, body)
            _refused(got, "This API is restricted, expecting header 'probe-key'")
            assert request(port, method, path, body, {"probe-key": "p"})[0] in (200, 202), path
        assert request(port, "GET", "/no/such/route")[0] == 404  # in no group
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert client.is_server_live() and client.get_server_metadata()  # REST's flag only
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("flags,message", [
    (["--http_restricted_api", "inference"], "--http_restricted_api 'inference': expected GROUPS:KEY=VALUE"),
    (["--grpc_restricted_protocol", "model-repo:admin-key=s3cret"],
     "--grpc_restricted_protocol 'model-repo:admin-key=<hidden>': unknown group 'model-repo'; the groups are "
     "health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging, "
     "jobs, metrics, docs"),
    (["--http_restricted_api", "inference,logging:a=s3cret", "--http_restricted_api", "logging:b=s3cret"],
     "--http_restricted_api: group 'logging' is in more than one restriction"),
])
def test_a_bad_restriction_stops_the_server_naming_the_flag(flags, message):
    server = Server(ZOO, flags, env={"ZOO_MODELS": "echo"})
    try:
        server.start(wait_ready=False)
        assert server.wait_exit(60) == 1
        log = server.log()
        assert message in log and "s3cret" not in log
        assert "Serving HTTP" not in log
    finally:
        server.stop()


# --- a transformer forwards the key and the trace headers ------------------------------------------------------
PREDICTOR = '''
import json
import numpy as np
import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferResponse


class Seer(kserve.Model):
    """Answers which of the forwarded headers it received."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        seen = {key: (headers or {}).get(key) for key in ("authorization", "traceparent", "tracestate")}
        if isinstance(payload, dict):
            return {"predictions": [seen]}
        out = InferOutput("seen", [1], "BYTES")
        out.set_data_from_numpy(np.array([json.dumps(seen).encode()], dtype=object), binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)


kserve.ModelServer().start([Seer("seer")])
'''
TRANSFORMER = '''
import kserve_sdk as kserve


class Passing(kserve.Model):
    """The default transformer: predict forwards to --predictor_host."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True


kserve.ModelServer().start([Passing("seer")])
'''
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=abc"}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forwarding")
    (folder / "predictor.py").write_text(PREDICTOR)
    (folder / "transformer.py").write_text(TRANSFORMER)
    return folder


@pytest.fixture(scope="module")
def keyed_predictor(start_server, scripts):
    """A predictor whose inference (REST and gRPC) needs the key."""
    return start_server(str(scripts / "predictor.py"), "--http_restricted_api", "inference:authorization=" + TOKEN,
                        "--grpc_restricted_protocol", "inference:authorization=" + TOKEN)


@pytest.mark.parametrize("protocol", ["v1", "v2", "grpc-v2"])
def test_a_transformer_forwards_authorization_and_the_trace_headers(start_server, scripts, keyed_predictor,
                                                                       protocol):
    host = keyed_predictor.grpc_url if protocol == "grpc-v2" else f"127.0.0.1:{keyed_predictor.http_port}"
    transformer = start_server(str(scripts / "transformer.py"), "--predictor_host", host, "--predictor_protocol",
                               protocol, grpc=False)
    headers = {"Authorization": TOKEN, **TRACE}
    if protocol == "v1":
        status, _, body = post_json(transformer.http_port, "/v1/models/seer:predict", {"instances": [1]}, headers)
        assert status == 200, body
        seen = body["predictions"][0]
    else:
        status, _, body = post_json(transformer.http_port, "/v2/models/seer/infer", _echo_doc(), headers)
        assert status == 200, body
        seen = json.loads(body["outputs"][0]["data"][0])
    assert seen == {"authorization": TOKEN, **TRACE}
    # without the key, the predictor refuses the forwarded call and the transformer says so
    path, doc = ("/v1/models/seer:predict", {"instances": [1]}) if protocol == "v1" else \
        ("/v2/models/seer/infer", _echo_doc())
    status, _, body = post_json(transformer.http_port, path, doc, TRACE)
    assert status == 403, body
    assert "restricted, expecting header 'authorization'" in body["error"]
