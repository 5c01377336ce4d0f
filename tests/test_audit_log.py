"""What the server logs about its clients, read from a real server's log: one audit line (logger kserve.audit)
per management call over REST and gRPC (load, unload, log and trace settings changes, shared-memory register
and unregister), with its request id, peer, route and outcome, a refusal of a restricted group included, and
never silenced by /v2/logging; an x-request-id over 256 characters is replaced by a minted one, logged once
without its value."""
import json
import re
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import post_json_raw, request, triton_error, triton_input
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

ADMIN = {"admin-key": "adm1n"}
AUDIT = re.compile(r'kserve\.audit INFO .* audit request_id="([^"]*)" peer=(\S+) route="([^"]*)" outcome=(\S+)$',
                   re.M)


@pytest.fixture(scope="module")
def server(start_server):
    """The zoo's echo and raw models; the model-repository group restricted, shared memory allowed."""
    return start_server("tests/models/zoo.py", "--allow_client_shm", "true",
                        "--http_restricted_api", "model-repository:admin-key=adm1n",
                        "--grpc_restricted_protocol", "model-repository:admin-key=adm1n",
                        env={"ZOO_MODELS": "echo,raw"})


def _audit_line(server, request_id):
    """(peer, route, outcome) of the one audit line naming ``request_id``."""
    server.log_with(f'request_id="{request_id}"')
    found = [(peer, route, outcome) for rid, peer, route, outcome in AUDIT.findall(server.log()) if rid == request_id]
    assert len(found) == 1, found
    return found[0]


def _rid(what):
    return f"{what}-{uuid.uuid4().hex[:8]}"


# --- REST ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,body,headers", [
    ("/v2/repository/models/raw/unload", b"{}", ADMIN),
    ("/v2/repository/models/raw/load", b"{}", ADMIN),  # the zoo cannot load it again: 404
    ("/v2/repository/models/echo/unload", b"{}", {}),  # restricted: 403
    ("/v2/logging", b'{"log_verbose_level": 0}', {}),
    ("/v2/logging", b'{"log_info": "yes"}', {}),  # refused: 400
    ("/v2/trace/setting", b'{"trace_rate": "1"}', {}),
    ("/v2/models/echo/trace/setting", b'{"trace_count": "-1"}', {}),
    ("/v2/systemsharedmemory/region/r1/register", b'{"key": "no-such-object", "offset": 0, "byte_size": 8}', {}),
    ("/v2/systemsharedmemory/region/r1/unregister", b"", {}),
    ("/v2/systemsharedmemory/unregister", b"", {}),
    ("/v2/cudasharedmemory/region/c1/register", b'{"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8}', {}),
    ("/v2/cudasharedmemory/unregister", b"", {}),
])
def test_each_rest_management_call_writes_one_audit_line(server, path, body, headers):
    request_id = _rid("rest")
    status, answer_headers, _ = post_json_raw(server.http_port, path, body, {"x-request-id": request_id, **headers})
    assert answer_headers["x-request-id"] == request_id
    assert _audit_line(server, request_id) == ("127.0.0.1", f"POST {path}", str(status))


def test_reading_is_not_audited(server):
    request_id = _rid("read")
    for method, path in (("GET", "/v2/logging"), ("GET", "/v2/trace/setting"), ("GET", "/v2/systemsharedmemory/status"),
                         ("POST", "/v2/repository/index")):
        status, _, _ = request(server.http_port, method, path, b"{}" if method == "POST" else None,
                               {"x-request-id": request_id, **ADMIN})
        assert status == 200, path
    marker = _rid("after-reads")
    post_json_raw(server.http_port, "/v2/systemsharedmemory/unregister", b"", {"x-request-id": marker})
    _audit_line(server, marker)  # written after the reads, which wrote none
    assert request_id not in "".join(rid for rid, *_ in AUDIT.findall(server.log()))


def test_turning_the_logs_off_does_not_silence_the_audit_log(server):
    off = b'{"log_info": false, "log_warning": false, "log_error": false, "log_verbose_level": 0}'
    assert post_json_raw(server.http_port, "/v2/logging", off)[0] == 200
    try:
        request_id = _rid("silenced")
        status, _, _ = post_json_raw(server.http_port, "/v2/repository/models/nope/load", b"{}",
                                     {"x-request-id": request_id, **ADMIN})
        assert status == 404
        assert _audit_line(server, request_id) == ("127.0.0.1", "POST /v2/repository/models/nope/load", "404")
        assert f"(x-request-id {request_id})" not in server.log()  # the server's own failure line is off
    finally:
        back = b'{"log_info": null, "log_warning": null, "log_error": null, "log_verbose_level": null}'
        assert post_json_raw(server.http_port, "/v2/logging", back)[0] == 200


# --- gRPC ------------------------------------------------------------------------------------------------------
def test_each_grpc_management_call_writes_one_audit_line(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    calls = [
        ("RepositoryModelUnload nope", "NOT_FOUND", lambda h: client.unload_model("nope", headers={**h, **ADMIN})),
        ("RepositoryModelLoad nope", "PERMISSION_DENIED", lambda h: client.load_model("nope", headers=h)),
        ("LogSettings", "OK", lambda h: client.update_log_settings({"log_verbose_level": 0}, headers=h)),
        ("LogSettings", "INVALID_ARGUMENT", lambda h: client.update_log_settings({"log_nope": True}, headers=h)),
        ("TraceSetting", "OK", lambda h: client.update_trace_settings(settings={"trace_rate": "1"}, headers=h)),
        ("SystemSharedMemoryRegister r2", None,
         lambda h: client.register_system_shared_memory("r2", "no-such-object", 8, headers=h)),
        ("SystemSharedMemoryUnregister", "OK", lambda h: client.unregister_system_shared_memory(headers=h)),
        ("CudaSharedMemoryUnregister", "OK", lambda h: client.unregister_cuda_shared_memory(headers=h)),
    ]
    for route, outcome, call in calls:
        request_id = _rid("grpc")
        try:
            call({"x-request-id": request_id})
            answered = "OK"
        except InferenceServerException as e:  # the failure's status is what the audit line must say
            answered = e.status().removeprefix("StatusCode.")
        assert outcome in (None, answered), (route, answered)
        peer, logged_route, logged = _audit_line(server, request_id)
        assert peer.startswith(("ipv4:127.0.0.1:", "ipv6:")) and (logged_route, logged) == (f"gRPC {route}",
                                                                                         answered)
    # reading the settings is not a change
    request_id = _rid("grpc-read")
    client.get_log_settings(headers={"x-request-id": request_id})
    client.get_trace_settings(headers={"x-request-id": request_id})
    assert request_id not in server.log()
    client.close()


def test_a_grpc_management_call_without_an_id_gets_one_minted_and_returned(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = GRPCInferenceServiceStub(channel)
        _, call = stub.SystemSharedMemoryUnregister.with_call(pb.SystemSharedMemoryUnregisterRequest(), timeout=10)
        request_id = dict(call.trailing_metadata())["x-request-id"]
        assert re.fullmatch(r"[0-9a-f-]{36}", request_id)
        assert _audit_line(server, request_id)[1:] == ("gRPC SystemSharedMemoryUnregister", "OK")


# --- x-request-id over 256 characters --------------------------------------------------------------------------
def test_a_60_kb_rest_request_id_is_replaced_and_logged_once_without_its_value(server):
    long_id = "z" * 60_000
    status, headers, body = post_json_raw(server.http_port, "/v2/models/echo/infer", json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode(),
        {"x-request-id": long_id})
    assert status == 200, body
    minted = headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f-]{36}", minted)
    log = server.log_with(f"was replaced by {minted}")
    assert log.count(f"an x-request-id of 60000 characters (more than 256) was replaced by {minted}") == 1
    assert "z" * 100 not in log
    server.log_with(f"requestId: {minted}")  # the latency line names the minted id
    kept = "k" * 256
    assert post_json_raw(server.http_port, "/v1/models/echo:predict", b'{"instances": [1]}',
                         {"x-request-id": kept})[1]["x-request-id"] == kept


def test_a_long_grpc_request_id_is_replaced_and_logged_once_without_its_value(server):
    long_id = "g" * 4000  # gRPC's own metadata limit (8 KiB) refuses far longer ones before us
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = triton_input(grpcclient, "INPUT0", np.arange(4, dtype=np.float32).reshape(1, 4))
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = GRPCInferenceServiceStub(channel)
        message = pb.ModelInferRequest(model_name="echo", inputs=[pb.ModelInferRequest.InferInputTensor(
            name="INPUT0", datatype="FP32", shape=[1, 4], contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]))])
        _, call = stub.ModelInfer.with_call(message, metadata=(("x-request-id", long_id),), timeout=10)
        minted = dict(call.trailing_metadata())["x-request-id"]
    assert re.fullmatch(r"[0-9a-f-]{36}", minted)
    log = server.log_with(f"was replaced by {minted}")
    assert log.count(f"an x-request-id of 4000 characters (more than 256) was replaced by {minted}") == 1
    assert "g" * 100 not in log
    # a failing call answers with the minted id too
    status, message = triton_error(client.infer, "no-such-model", [tensor], headers={"x-request-id": long_id})
    assert status == "StatusCode.NOT_FOUND" and "g" * 100 not in server.log()
    client.close()
