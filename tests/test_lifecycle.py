"""One call lifecycle under every protocol (kserve_sdk/lifecycle.py): every answer, errors included, carries
the request id, is counted once in kserve_requests_total with its status, is access-logged once (HTTP) and
is in flight while it runs; the same exception is logged the same way on REST and gRPC."""
import json
import re
import threading
import time
import zlib

import grpc
import httpx
import numpy as np
import pytest

from helpers import request, scrape, value
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

LIMIT = 4096  # --max_body_size
TIMEOUT = 1.0  # --request_timeout_seconds
ACCESS = "ACCESS %(request_id)s %(status)s %(protocol)s %(endpoint)s %(model)s"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/lifecycle.py", "--max_body_size", str(LIMIT), "--max_concurrent_requests", "1",
                        "--request_timeout_seconds", str(TIMEOUT), "--access_log_format", ACCESS)


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield GRPCInferenceServiceStub(channel)
    channel.close()


def access_lines(server, request_id: str):
    server.log_with(f"ACCESS {request_id} ")
    time.sleep(0.05)  # a second line, if one were (wrongly) written, comes in the same or the next round
    return [line for line in server.log().splitlines() if f"ACCESS {request_id} " in line]


def in_flight(server, protocol: str) -> float:
    """Calls in flight, besides the /metrics request that asks (itself in flight, as rest_v2)."""
    return value(scrape(server), "kserve_requests_in_flight", protocol=protocol) - (protocol == "rest_v2")


def eventually(read, expected, timeout: float = 10.0):
    """``read()`` once it equals ``expected`` (bounded): a stream's call closes just after its last message is
    sent, so the client can ask before the server has counted it."""
    deadline = time.monotonic() + timeout
    got = read()
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        got = read()
    return got


def counted(server, **labels) -> float:
    return value(scrape(server), "kserve_requests_total", **labels)


def bytes_input(text: str) -> pb.ModelInferRequest.InferInputTensor:
    return pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[1],
                                                 contents=pb.InferTensorContents(bytes_contents=[text.encode()]))


def fp32_request(model: str, value_: float = 1.0) -> pb.ModelInferRequest:
    raw = np.array([value_], np.float32).tobytes()
    return pb.ModelInferRequest(model_name=model, inputs=[pb.ModelInferRequest.InferInputTensor(
        name="INPUT0", datatype="FP32", shape=[1])], raw_input_contents=[raw])


V2 = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]}]}).encode()
# (case, method, path, body, extra headers, status, error text, protocol, endpoint, model label)
REST_ERRORS = [
    ("400-fast", "POST", "/v2/models/echo/infer", b'{"inputs": [', {}, 400, "Unrecognized request format",
     "rest_v2", "infer", "echo"),
    ("400-handler", "POST", "/v2/models/echo/infer", zlib.compress(b'{"inputs": ['), {"Content-Encoding": "deflate"},
     400, "Unrecognized request format", "rest_v2", "infer", "echo"),
    ("404-model", "POST", "/v1/models/nosuch:predict", b'{"instances": [1]}', {}, 404,
     "Model with name nosuch does not exist.", "rest_v1", "predict", ""),
    ("404-route", "GET", "/nope", None, {}, 404, "no route for GET /nope", "rest_v2", "other", ""),
    ("413", "POST", "/v2/models/echo/infer", b"x" * (LIMIT + 10), {}, 413,
     f"larger than the {LIMIT} bytes this server accepts (--max_body_size)", "rest_v2", "infer", "echo"),
    ("413-chunked", "POST", "/v1/models/echo:predict", [b"x" * 3000, b"x" * 3000], {}, 413,
     "chunked request body passed the", "rest_v1", "predict", "echo"),
    ("500", "POST", "/v1/models/failing:predict", b'{"instances": ["boom"]}', {}, 500, "RuntimeError : kaboom",
     "rest_v1", "predict", "failing"),
    ("501", "POST", "/v1/models/echo:explain", b'{"instances": [1]}', {}, 501, "explainer",
     "rest_v1", "explain", "echo"),
    ("504", "POST", "/v1/models/faulty:predict", b'{"instances": ["sleep:3"]}', {}, 504,
     "did not answer within 1 s", "rest_v1", "predict", "faulty"),
]


def _send(server, method, path, body, headers):
    if isinstance(body, list):  # its pieces sent chunked, through httpx
        r = httpx.request(method, server.url + path, content=iter(body), headers=headers, timeout=10)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content
    return request(server.http_port, method, path, body, headers)


@pytest.mark.parametrize("case,method,path,body,headers,status,text,protocol,endpoint,model", REST_ERRORS,
                         ids=[c[0] for c in REST_ERRORS])
def test_rest_errors_carry_the_request_id_and_are_counted_and_logged_once(server, case, method, path, body,
                                                                          headers, status, text, protocol,
                                                                          endpoint, model):
    labels = dict(model_name=model, protocol=protocol, endpoint=endpoint, status=str(status))
    before = counted(server, **labels)
    got, answer_headers, answer = _send(server, method, path, body, {**headers, "x-request-id": f"rid-{case}"})
    assert got == status, answer
    assert text in json.loads(answer)["error"]
    assert answer_headers["x-request-id"] == f"rid-{case}"
    assert answer_headers["server"].startswith("kserve-sdk/")
    lines = access_lines(server, f"rid-{case}")
    assert len(lines) == 1 and f"ACCESS rid-{case} {status} {protocol} {endpoint} {model or '-'}" in lines[0], lines
    assert counted(server, **labels) == before + 1
    # without an id of the client's, one is minted, returned and logged
    got, answer_headers, _ = _send(server, method, path, body, headers)
    assert got == status and UUID.match(answer_headers["x-request-id"]), answer_headers
    assert len(access_lines(server, answer_headers["x-request-id"])) == 1


def test_overload_503_carries_the_request_id_and_is_counted(server):
    before = counted(server, model_name="echo", protocol="rest_v1", endpoint="predict", status="503")
    # the first call, a stream of four words a second apart, holds the only slot for 3 s (a stream has no
    # deadline; a unary call would be cut at the 1 s --request_timeout_seconds and free it): long enough
    # for the second to arrive while it is in flight, however slowly a loaded machine answers the scrape
    # that finds it there
    holder = threading.Thread(target=request, args=(server.http_port, "POST", "/v2/models/tokens/generate_stream",
                                                    b'{"text_input": "a b c d", "parameters": {"delay_ms": 1000}}'))
    holder.start()
    try:
        deadline = time.monotonic() + 5
        while in_flight(server, "rest_v2") < 1:  # until the first call is in flight
            assert time.monotonic() < deadline, "the first call was never in flight"
            time.sleep(0.02)
        status, headers, body = request(server.http_port, "POST", "/v1/models/echo:predict", b'{"instances": [1]}',
                                        {"x-request-id": "rid-busy"})
    finally:
        holder.join(10)
    assert status == 503 and headers["retry-after"] == "1" and headers["x-request-id"] == "rid-busy"
    assert "--max_concurrent_requests" in json.loads(body)["error"]
    assert len(access_lines(server, "rid-busy")) == 1
    assert counted(server, model_name="echo", protocol="rest_v1", endpoint="predict", status="503") == before + 1


GRPC_ERRORS = [
    ("not-found", fp32_request("nosuch"), grpc.StatusCode.NOT_FOUND, "Model with name nosuch does not exist.", ""),
    ("invalid", pb.ModelInferRequest(model_name="failing", inputs=[bytes_input("invalid")]),
     grpc.StatusCode.INVALID_ARGUMENT, "instance 0 must be a number", "failing"),
    ("internal", pb.ModelInferRequest(model_name="failing", inputs=[bytes_input("boom")]),
     grpc.StatusCode.INTERNAL, "RuntimeError : kaboom", "failing"),
    ("deadline", pb.ModelInferRequest(model_name="faulty", inputs=[bytes_input("sleep:3")]),
     grpc.StatusCode.DEADLINE_EXCEEDED, "did not answer within 1 s", "faulty"),
]


@pytest.mark.parametrize("case,message,code,text,model", GRPC_ERRORS, ids=[c[0] for c in GRPC_ERRORS])
def test_grpc_errors_carry_the_request_id_in_trailing_metadata(server, stub, case, message, code, text, model):
    labels = dict(model_name=model, protocol="grpc", endpoint="ModelInfer", status=code.name)
    before = counted(server, **labels)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(message, metadata=(("x-request-id", f"g-{case}"),), timeout=10)
    assert err.value.code() == code and text in err.value.details()
    assert dict(err.value.trailing_metadata())["x-request-id"] == f"g-{case}"
    assert counted(server, **labels) == before + 1
    with pytest.raises(grpc.RpcError) as err:  # no id of the client's: a minted one
        stub.ModelInfer(message, timeout=10)
    assert UUID.match(dict(err.value.trailing_metadata())["x-request-id"])


def test_sse_stream_returns_the_request_id_and_is_in_flight_while_it_runs(server):
    body = {"text_input": " ".join(f"w{i}" for i in range(20)), "parameters": {"delay_ms": 100}}
    before = counted(server, model_name="tokens", protocol="rest_v2", endpoint="generate_stream", status="200")
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", f"{server.url}/v2/models/tokens/generate_stream", json=body,
                           headers={"x-request-id": "sse-1"}) as response:
            assert response.headers["x-request-id"] == "sse-1"
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            assert in_flight(server, "rest_v2") == 1
            rest = [line for line in lines if line.startswith("data: ")]
    assert len(rest) == 19
    assert eventually(lambda: in_flight(server, "rest_v2"), 0) == 0
    labels = dict(model_name="tokens", protocol="rest_v2", endpoint="generate_stream", status="200")
    assert eventually(lambda: counted(server, **labels), before + 1) == before + 1
    assert len(access_lines(server, "sse-1")) == 1


def _stream_requests(model: str, words: str):
    req = pb.ModelInferRequest(model_name=model, id="s1", inputs=[bytes_input(words)])
    req.parameters["delay_ms"].int64_param = 100
    return req


def test_grpc_stream_returns_the_request_id_and_each_request_is_in_flight_and_counted(server, stub):
    ok = dict(model_name="tokens", protocol="grpc", endpoint="ModelStreamInfer", status="OK")
    missing = dict(model_name="", protocol="grpc", endpoint="ModelStreamInfer", status="NOT_FOUND")
    before_ok, before_missing = counted(server, **ok), counted(server, **missing)
    words = " ".join(f"w{i}" for i in range(20))  # 2 s of tokens: time to look while the stream runs
    requests = iter([_stream_requests("tokens", words), fp32_request("nosuch")])
    call = stub.ModelStreamInfer(requests, metadata=(("x-request-id", "gs-1"),), timeout=20)
    assert dict(call.initial_metadata())["x-request-id"] == "gs-1"
    answers = iter(call)
    first = next(answers)
    assert not first.error_message and first.infer_response.id == "s1"
    assert in_flight(server, "grpc") == 1
    rest = list(answers)
    assert len(rest) == 20 and "nosuch does not exist" in rest[-1].error_message
    assert call.code() == grpc.StatusCode.OK
    assert eventually(lambda: in_flight(server, "grpc"), 0) == 0
    assert eventually(lambda: counted(server, **ok), before_ok + 1) == before_ok + 1
    assert eventually(lambda: counted(server, **missing), before_missing + 1) == before_missing + 1


def test_grpc_request_stream_is_one_counted_call(server, stub):
    labels = dict(model_name="summer", protocol="grpc", endpoint="ModelStreamInfer", status="OK")
    before = counted(server, **labels)
    requests = iter([pb.ModelInferRequest(model_name="summer", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="x", datatype="FP64", shape=[1], contents=pb.InferTensorContents(fp64_contents=[v]))]) for v in (1, 2, 3)])
    call = stub.ModelStreamInfer(requests, timeout=20)
    answers = list(call)
    assert UUID.match(dict(call.initial_metadata())["x-request-id"])
    assert len(answers) == 1 and answers[0].infer_response.outputs[0].name == "sum"
    assert eventually(lambda: counted(server, **labels), before + 1) == before + 1


# exception kind (the failing/faulty model's instance) -> (HTTP status, gRPC code, log level, traceback)
KINDS = {"invalid": (400, "INVALID_ARGUMENT", "INFO", False), "notimpl": (501, "UNIMPLEMENTED", "INFO", False),
         "inference": (500, "INTERNAL", "ERROR", True), "boom": (500, "INTERNAL", "ERROR", True),
         "sleep:3": (504, "DEADLINE_EXCEEDED", "WARNING", False)}
PROTOCOLS = ["rest-fast", "rest-handler", "grpc", "grpc-stream"]
# --request_timeout_seconds bounds unary calls; a stream has no deadline of the server's
LOG_CASES = [(kind, protocol) for kind in KINDS for protocol in PROTOCOLS
             if not (kind.startswith("sleep") and protocol == "grpc-stream")]


def _fail(server, stub, protocol: str, kind: str, request_id: str) -> str:
    """Send the failing call; what the client saw (HTTP status or gRPC code name)."""
    model = "faulty" if kind.startswith("sleep") else "failing"
    body = json.dumps({"instances": [kind]}).encode()
    if protocol == "rest-fast":
        return str(request(server.http_port, "POST", f"/v1/models/{model}:predict", body,
                           {"x-request-id": request_id})[0])
    if protocol == "rest-handler":
        return str(request(server.http_port, "POST", f"/v1/models/{model}:predict", zlib.compress(body),
                           {"x-request-id": request_id, "Content-Encoding": "deflate"})[0])
    message = pb.ModelInferRequest(model_name=model, inputs=[bytes_input(kind)])
    metadata = (("x-request-id", request_id),)
    if protocol == "grpc":
        try:
            stub.ModelInfer(message, metadata=metadata, timeout=10)
        except grpc.RpcError as e:
            return e.code().name
        return "OK"
    answers = list(stub.ModelStreamInfer(iter([message]), metadata=metadata, timeout=10))
    assert len(answers) == 1 and answers[0].error_message, answers
    return "error_message"


@pytest.mark.parametrize("kind,protocol", LOG_CASES, ids=[f"{k}-{p}" for k, p in LOG_CASES])
def test_the_same_exception_is_logged_the_same_way_on_every_protocol(server, stub, kind, protocol):
    status, code, level, traceback = KINDS[kind]
    request_id = f"log-{protocol}-{kind.replace(':', '')}"
    answered = _fail(server, stub, protocol, kind, request_id)
    assert answered in (str(status), code, "error_message")
    log = server.log_with(f"(x-request-id {request_id})")
    lines = log.splitlines()
    at = [i for i, line in enumerate(lines) if f"(x-request-id {request_id})" in line]
    assert len(at) == 1, [lines[i] for i in at]  # logged once
    line = lines[at[0]]
    assert f" {level} " in line, line
    following = lines[at[0] + 1] if at[0] + 1 < len(lines) else ""
    assert following.startswith("Traceback") == traceback, (line, following)


def test_a_model_that_is_not_ready_answers_503_with_the_request_id(server, stub):
    assert request(server.http_port, "POST", "/v1/models/toggle:predict", b'{"instances": ["off"]}')[0] == 200
    status, headers, body = request(server.http_port, "POST", "/v1/models/toggle:predict", b'{"instances": [1]}',
                                    {"x-request-id": "rid-unready"})
    assert status == 503 and headers["x-request-id"] == "rid-unready"
    assert "Model with name toggle is not ready." in json.loads(body)["error"]
    assert len(access_lines(server, "rid-unready")) == 1
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(fp32_request("toggle"), metadata=(("x-request-id", "g-unready"),), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dict(err.value.trailing_metadata())["x-request-id"] == "g-unready"


# What a model returns for a v2 call -> (status, text of the error, or the output data of a good answer)
RETURNS = {
    "v1dict": (500, "returned a dict without an \"outputs\" list, which is not a v2 inference response"),
    "none": (500, "returned NoneType, which is not a v2 inference response"),
    "wrongtype": (500, "returned int, which is not a v2 inference response"),
    "shape": (500, "returned output 'out' that is malformed"),
    "setshape": (500, "got unexpected numpy array shape"),
    "v2dict": (200, [1, 2]),
}


@pytest.mark.parametrize("what", list(RETURNS))
def test_a_wrong_return_is_answered_alike_on_v2_rest_and_grpc(server, stub, what):
    status, expected = RETURNS[what]
    doc = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": [what]}]}
    got, _, body = request(server.http_port, "POST", "/v2/models/faulty/infer", json.dumps(doc).encode())
    message = pb.ModelInferRequest(model_name="faulty", inputs=[bytes_input(what)])
    if status == 200:
        assert got == 200 and json.loads(body)["outputs"][0]["data"] == expected
        answer = stub.ModelInfer(message, timeout=10)
        out = answer.outputs[0]
        data = (np.frombuffer(answer.raw_output_contents[0], np.int32).tolist() if answer.raw_output_contents
                else list(out.contents.int_contents))
        assert out.name == "out" and data == expected
        return
    assert got == status and expected in json.loads(body)["error"], body
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(message, timeout=10)
    assert err.value.code() == grpc.StatusCode.INTERNAL and err.value.details() == json.loads(body)["error"]
