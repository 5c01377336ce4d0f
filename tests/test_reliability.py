"""Hostile input, overload, client faults and model faults: each answered with its status and a message
naming the problem, and the worker goes on serving. (Bad inputs already covered by test_rest_errors.py and
test_grpc.py are not repeated here.)"""
import gzip
import json
import socket
import struct
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from helpers import assert_error_answer, binary_body, eventually, exchange, json_of, request, v2_fp32_doc
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

LIMIT = 65536          # --max_body_size of the guarded server
CONCURRENCY = 4        # --max_concurrent_requests
TIMEOUT = 1.5          # --request_timeout_seconds
INFER = "/v2/models/echo/infer"


@pytest.fixture(scope="module")
def guarded(start_server):
    """The zoo with the faulty model and tight limits (per worker)."""
    return start_server("tests/models/zoo.py", "--max_body_size", str(LIMIT),
                        "--max_concurrent_requests", str(CONCURRENCY), "--request_timeout_seconds", str(TIMEOUT),
                        "--body_timeout_seconds", "1", "--timeout-keep-alive", "2",
                        env={"ZOO_MODELS": "echo,failing,faulty,sleepy"})


def fp32(**overrides):
    return json.dumps(v2_fp32_doc(**overrides)).encode()


def binary(entry_overrides, payload, header_len=None):
    entry = {"name": "INPUT0", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": len(payload)}}
    entry.update(entry_overrides)
    body, headers = binary_body({"inputs": [entry]}, payload)
    if header_len is not None:
        headers["Inference-Header-Content-Length"] = header_len
    return body, headers


def bytes_input(payload: bytes, shape=(1,), model="echo"):
    return (f"/v2/models/{model}/infer",) + binary({"shape": list(shape), "datatype": "BYTES"}, payload)


# (id, path, body, headers, status, message) -- each a kind of hostile input
BAD_REST = [
    ("json-size-bomb", INFER, b"[" * 60000 + b"]" * 60000, {}, 413, "--max_body_size"),
    ("json-depth-bomb-small", INFER, b"[" * 5000 + b"]" * 5000, {}, 400, "depth limit exceeded"),
    ("shape-product-overflows-int64", INFER, fp32(shape=[2 ** 62, 2 ** 62]), {}, 400,
     "has more elements than an int64 can count"),
    ("shape-product-overflows-binary", *((INFER,) + binary({"shape": [2 ** 62, 4]}, b"\0" * 8)), 400,
     "has more elements than an int64 can count"),
    ("shape-dimension-past-uint64", INFER, fp32(shape=[2 ** 70]), {}, 400, "shape must be a list of integers"),
    ("shape-too-many-dimensions", INFER, fp32(shape=[1] * 65, data=[1.0]), {}, 400,
     "shape has 65 dimensions; at most 64 are supported"),
    ("shape-vs-data", INFER, fp32(shape=[1099511627776]), {}, 400, "2 values given but shape [1099511627776]"),
    ("header-length-overflows", *((INFER,) + binary({}, b"\0" * 8, header_len="9" * 40)), 400,
     "Inference-Header-Content-Length 9999999999999999999999999999999999999999 is outside the request body"),
    ("binary-size-past-uint64", *((INFER,) + binary({"parameters": {"binary_data_size": 2 ** 70}}, b"\0" * 8)),
     400, "binary_data_size must be a non-negative integer"),
    ("binary-size-uint64-max", *((INFER,) + binary({"parameters": {"binary_data_size": 2 ** 64 - 1}}, b"\0" * 8)),
     400, "binary_data_size 18446744073709551615 runs past the end of the body"),
    ("binary-size-float", *((INFER,) + binary({"parameters": {"binary_data_size": 8.0}}, b"\0" * 8)), 400,
     "binary_data_size must be a non-negative integer, got 8.0"),
    ("datatype-not-a-string", INFER, fp32(datatype=5), {}, 400, "unsupported datatype 5"),
    ("datatype-unknown-binary", *((INFER,) + binary({"datatype": "FP8"}, b"\0" * 2)), 400,
     "unsupported datatype 'FP8'"),
    ("bytes-json-object-element", INFER, fp32(datatype="BYTES", shape=[1], data=[{"a": 1}]), {}, 400,
     "a BYTES element is a JSON object, not text"),
    ("bytes-prefix-4gib", *bytes_input(b"\xff\xff\xff\xff"), 400,
     "BYTES element length 4294967295 at offset 0 runs past the end of the data"),
    ("bytes-prefix-too-short", *bytes_input(struct.pack("<I", 1) + b"ab"), 400,
     "BYTES element at offset 5 has a truncated length prefix"),
    ("bytes-fewer-than-shape", *bytes_input(struct.pack("<I", 1) + b"a", shape=(3,)), 400,
     "1 BYTES elements given but the shape needs 3"),
    ("non-utf8-json-body", INFER, b'{"inputs": [{"name": "\xff", "shape": [1], "datatype": "FP32", "data": [1]}]}',
     {}, 400, "Unrecognized request format: str is not valid UTF-8"),
    ("non-utf8-text-for-model", *bytes_input(struct.pack("<I", 2) + b"\xff\xfe", model="failing"), 400,
     "input 'INPUT0': element 0 is not UTF-8 text"),
    ("non-utf8-url", "/v2/models/%ff/infer", fp32(), {}, 400, "Invalid unicode in url"),
    ("v1-inputs-not-list", "/v1/models/echo:predict", b'{"inputs": {"a": 1}}', {}, 400,
     'Expected "inputs" to be a list'),
    ("generate-body-not-object", "/v2/models/echo/generate", b"[1, 2]", {}, 400,
     "the request body must be a JSON object, got list"),
    ("generate-stream-body-not-object", "/v2/models/echo/generate_stream", b'"text"', {}, 400,
     "the request body must be a JSON object, got str"),
    ("timeout-parameter-not-int", INFER, json.dumps({"inputs": json.loads(fp32())["inputs"],
                                                     "parameters": {"timeout": "soon"}}).encode(), {}, 400,
     "the 'timeout' parameter must be a non-negative integer (microseconds)"),
    ("model-dot-dot", "/v2/models/../infer", fp32(), {}, 400, "'..' is not a model name"),
    ("model-encoded-dot-dot", "/v2/models/%2e%2e/infer", fp32(), {}, 400, "'..' is not a model name"),
    ("model-encoded-slash", "/v2/models/..%2Fecho/infer", fp32(), {}, 400,
     "the model name '../echo' contains a path separator"),
    ("model-encoded-backslash", "/v1/models/..%5Cecho:predict", b'{"instances": [1]}', {}, 400,
     "contains a path separator"),
    ("model-nul", "/v2/models/ec%00ho/ready", None, {}, 400, "contains a control character"),
    ("model-very-long", "/v2/models/" + "m" * 5000 + "/infer", fp32(), {}, 400,
     "the model name is 5000 characters long; at most 256 are allowed"),
    ("model-load-path-trick", "/v2/repository/models/..%2F..%2Fetc/load", b"", {}, 400,
     "the model name '../../etc' contains a path separator"),
    ("deflate-bomb", INFER, zlib.compress(b"[" * (LIMIT * 4)), {"Content-Encoding": "deflate"}, 413,
     f"the request body inflates to more than {LIMIT} bytes"),
    ("gzip-bomb", INFER, gzip.compress(b"[" * (LIMIT * 4)), {"Content-Encoding": "gzip"}, 413,
     f"the request body inflates to more than {LIMIT} bytes"),  # Tornado inflates gzip: once a bare 400
]


@pytest.mark.parametrize("path,body,headers,status,message", [c[1:] for c in BAD_REST], ids=[c[0] for c in BAD_REST])
def test_bad_rest_input(guarded, path, body, headers, status, message):
    method = "GET" if path.endswith("/ready") else "POST"
    assert_error_answer(guarded.http_port, request(guarded.http_port, method, path, body, headers), status, message)


# --- the body limit --------------------------------------------------------------------------------------
def test_body_over_the_limit_is_413_after_it_is_read(guarded):
    body = b"x" * (LIMIT + 1000)
    got = request(guarded.http_port, "POST", INFER, body)
    assert_error_answer(guarded.http_port, got, 413,
                        f"the request body of {LIMIT + 1000} bytes is larger than the {LIMIT} bytes this server "
                        "accepts (--max_body_size)")


def test_body_far_over_the_limit_is_413_at_once(guarded):
    start = time.monotonic()
    raw = exchange(guarded.http_port, f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {10 ** 12}\r\n\r\n"
                                      "only a few bytes".encode())
    assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
    assert b"Connection: close" in raw
    assert "larger than the 65536 bytes" in json_of(raw)["error"]
    assert time.monotonic() - start < 2


def test_chunked_body_over_the_limit_is_413(guarded):
    chunk = b"y" * 16384
    data = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    data += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(6))
    raw = exchange(guarded.http_port, data)
    assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
    assert "the chunked request body passed the 65536 bytes" in json_of(raw)["error"]
    assert request(guarded.http_port, "GET", "/v2/health/live")[0] == 200


def test_chunked_body_under_the_limit_is_served(guarded):
    body = fp32()
    data = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
    data += b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    raw = exchange(guarded.http_port, data)
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]


# --- gRPC ------------------------------------------------------------------------------------------------
def _raw_call(server, payload: bytes, method="ModelInfer"):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                   request_serializer=lambda x: x, response_deserializer=lambda x: x)
        try:
            call(payload, timeout=10)
        except grpc.RpcError as e:
            return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _infer_error(server, message):
    with grpc.insecure_channel(server.grpc_url) as channel:
        try:
            GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
        except grpc.RpcError as e:
            return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _tensor(name="INPUT0", datatype="FP32", shape=(2,)):
    return pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=list(shape))


def _bytes_request(model, *values):
    tensor = _tensor(datatype="BYTES", shape=(len(values),))
    tensor.contents.bytes_contents.extend(values)
    return pb.ModelInferRequest(model_name=model, inputs=[tensor])


def test_grpc_undecodable_messages_are_invalid_argument(guarded):
    good = pb.ModelInferRequest(model_name="echoX").SerializeToString()
    code, details = _raw_call(guarded, good.replace(b"echoX", b"echo\xff"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "the request is not a valid ModelInferRequest message" in details  # protobuf may add "bad UTF-8"
    code, details = _raw_call(guarded, b"\xff\xff\xff\xff garbage")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid ModelInferRequest message" in details
    code, details = _raw_call(guarded, b"\x0a\xff", "ModelReady")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid ModelReadyRequest message" in details


def test_grpc_undecodable_stream_message_gets_an_error_and_the_stream_goes_on(guarded):
    good = pb.ModelInferRequest(model_name="echo", inputs=[_tensor()], raw_input_contents=[b"\0" * 8])
    with grpc.insecure_channel(guarded.grpc_url) as channel:
        call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                     request_serializer=lambda x: x,
                                     response_deserializer=pb.ModelStreamInferResponse.FromString)
        answers = list(call(iter([b"\xff\xff garbage", good.SerializeToString()]), timeout=10))
    assert "not a valid ModelInferRequest message" in answers[0].error_message
    assert answers[1].error_message == "" and answers[1].infer_response.raw_output_contents == [b"\0" * 8]


@pytest.mark.parametrize("message,code,text", [
    (pb.ModelInferRequest(model_name="echo", inputs=[_tensor(shape=(2 ** 62, 2 ** 62))], raw_input_contents=[b""]),
     grpc.StatusCode.INVALID_ARGUMENT, "has more elements than an int64 can count"),
    (pb.ModelInferRequest(model_name="echo", inputs=[_tensor(shape=[1] * 65)], raw_input_contents=[b""]),
     grpc.StatusCode.INVALID_ARGUMENT, "shape has 65 dimensions"),
    (pb.ModelInferRequest(model_name="../echo"), grpc.StatusCode.INVALID_ARGUMENT,
     "the model name '../echo' contains a path separator"),
    (pb.ModelInferRequest(model_name="m" * 300), grpc.StatusCode.INVALID_ARGUMENT,
     "the model name is 300 characters long"),
    (pb.ModelInferRequest(model_name=""), grpc.StatusCode.INVALID_ARGUMENT, "the model name is empty"),
    (_bytes_request("failing", b"\xff\xfe"), grpc.StatusCode.INVALID_ARGUMENT,
     "input 'INPUT0': element 0 is not UTF-8 text"),
], ids=["shape-overflow", "too-many-dims", "path-trick", "long-name", "empty-name", "non-utf8-text"])
def test_grpc_bad_input(guarded, message, code, text):
    got_code, details = _infer_error(guarded, message)
    assert got_code == code and text in details, details


# --- overload ----------------------------------------------------------------------------------------------
def _sleepy_v1(server, seconds):
    start = time.monotonic()
    status, headers, body = request(server.http_port, "POST", "/v1/models/sleepy:predict",
                                    json.dumps({"instances": [seconds]}).encode())
    return status, headers, body, time.monotonic() - start


def test_twice_the_concurrency_limit_refuses_the_excess_at_once(guarded):
    with ThreadPoolExecutor(2 * CONCURRENCY) as pool:
        answers = list(pool.map(lambda _: _sleepy_v1(guarded, 1.0), range(2 * CONCURRENCY)))
    ok = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] == 503]
    assert len(ok) == CONCURRENCY and len(refused) == CONCURRENCY, [a[0] for a in answers]
    for _, headers, body, elapsed in refused:
        assert headers["retry-after"] == "1"
        assert f"{CONCURRENCY} requests are in flight in this worker (--max_concurrent_requests)" in \
            json.loads(body)["error"]
        assert elapsed < 0.5  # at once, not after queueing
    assert all(elapsed >= 0.9 for *_, elapsed in ok)
    assert _sleepy_v1(guarded, 0)[0] == 200  # and the worker serves again


def test_grpc_over_the_limit_is_unavailable_with_retry_after(guarded):
    tensor = _tensor(shape=(1,))
    tensor.contents.fp32_contents.append(1.0)
    message = pb.ModelInferRequest(model_name="sleepy", inputs=[tensor])

    def call(_):
        with grpc.insecure_channel(guarded.grpc_url) as channel:
            try:
                GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
                return grpc.StatusCode.OK, "", ()
            except grpc.RpcError as e:
                return e.code(), e.details(), e.trailing_metadata()

    with ThreadPoolExecutor(2 * CONCURRENCY) as pool:
        answers = list(pool.map(call, range(2 * CONCURRENCY)))
    codes = [a[0] for a in answers]
    assert codes.count(grpc.StatusCode.OK) == CONCURRENCY, codes
    assert codes.count(grpc.StatusCode.UNAVAILABLE) == CONCURRENCY, codes
    for code, details, trailing in answers:
        if code == grpc.StatusCode.UNAVAILABLE:
            assert "--max_concurrent_requests" in details and ("retry-after", "1") in tuple(trailing)


# --- timeouts and cancellation -----------------------------------------------------------------------------
def _v1(server, model, instance, timeout=30.0):
    return request(server.http_port, "POST", f"/v1/models/{model}:predict",
                   json.dumps({"instances": [instance]}).encode(), timeout=timeout)


def _cancelled(server) -> int:
    return json.loads(_v1(server, "faulty", "stats")[2])["predictions"][0]


def test_model_that_hangs_is_cancelled_at_the_timeout(guarded):
    before = _cancelled(guarded)
    start = time.monotonic()
    got = _v1(guarded, "faulty", "hang")
    assert TIMEOUT <= time.monotonic() - start < TIMEOUT + 1
    assert_error_answer(guarded.http_port, got, 504,
                        "model 'faulty' did not answer within 1.5 s (--request_timeout_seconds); the call was "
                        "cancelled")
    assert _cancelled(guarded) == before + 1  # the model's coroutine saw CancelledError


def test_timeout_parameter_shortens_the_deadline(guarded):
    doc = {"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["sleep:5"]}],
           "parameters": {"timeout": 200000}}
    start = time.monotonic()
    got = request(guarded.http_port, "POST", "/v2/models/faulty/infer", json.dumps(doc).encode())
    assert time.monotonic() - start < 1.2
    assert_error_answer(guarded.http_port, got, 504,
                        "model 'faulty' did not answer within 0.2 s (the request's timeout parameter)")


def test_grpc_timeout_is_deadline_exceeded(guarded):
    code, details = _infer_error(guarded, _bytes_request("faulty", b"hang"))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "did not answer within 1.5 s" in details


@pytest.mark.parametrize("path,body", [
    ("/v1/models/faulty:predict", b'{"instances": ["sleep:1.2"]}'),
    ("/v2/models/faulty/infer",
     b'{"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["sleep:1.2"]}]}'),
], ids=["v1", "v2"])
def test_client_that_disconnects_cancels_the_model(guarded, path, body):
    before = _cancelled(guarded)
    with socket.create_connection(("127.0.0.1", guarded.http_port)) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.3)
    # well before the model's 1.2 s sleep would end
    assert eventually(lambda: _cancelled(guarded) - before, timeout=0.6, interval=0.02) == 1
    guarded.log_with(f'"POST {path} HTTP/1.1" 499 ', timeout=5)  # the access line says the client went away


# --- slow clients ------------------------------------------------------------------------------------------
def test_slowloris_and_slow_bodies_do_not_block_others_and_are_dropped(guarded):
    port = guarded.http_port
    slow = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        if i % 2:
            s.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # headers never finished
        else:
            s.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".encode() + b"{" * 10)
        slow.append(s)
    start = time.monotonic()
    for _ in range(20):  # the others are served meanwhile, quickly
        assert request(port, "POST", INFER, fp32())[0] == 200
    assert time.monotonic() - start < 2
    for s in slow:  # header timeout (--timeout-keep-alive 2) and body timeout (--body_timeout_seconds 1)
        s.settimeout(5)
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
        s.close()


def test_slow_reader_of_a_large_response_does_not_block_others(guarded):
    body = b'{"instances": ["big:30000000"]}'
    with socket.create_connection(("127.0.0.1", guarded.http_port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(f"POST /v1/models/faulty:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
                  .encode() + body)
        time.sleep(0.3)  # the answer is written and stuck in buffers; this client does not read it
        start = time.monotonic()
        for _ in range(10):
            assert request(guarded.http_port, "POST", INFER, fp32())[0] == 200
        assert time.monotonic() - start < 2
        assert s.recv(12) == b"HTTP/1.1 200"  # and it can still read its answer


# --- model faults ------------------------------------------------------------------------------------------
NOT_V2 = "which is not a v2 inference response"  # the one rule of v2 REST and gRPC for what v2 cannot carry
MODEL_FAULTS = [
    ("raises", "raise", 500, "ValueError : bad weights (model 'faulty')"),
    ("wrong-type", "wrongtype", 500, f"model 'faulty' returned int, {NOT_V2}"),
    ("unencodable", "unencodable", 500, f"model 'faulty' returned a dict without an \"outputs\" list, {NOT_V2}"),
    ("shape-vs-data", "shape", 500,
     "model 'faulty' returned output 'out' that is malformed: shape [5] needs 5 values but the data has 3"),
    ("bad-datatype", "badtype", 500,
     "model 'faulty' returned output 'out' that is malformed: datatype 'FLOAT99' is not a v2 datatype"),
]


@pytest.mark.parametrize("what,status,message", [c[1:] for c in MODEL_FAULTS], ids=[c[0] for c in MODEL_FAULTS])
def test_model_fault_is_a_500_naming_the_model(guarded, what, status, message):
    doc = {"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": [what]}]}
    v2 = request(guarded.http_port, "POST", "/v2/models/faulty/infer", json.dumps(doc).encode())
    assert_error_answer(guarded.http_port, v2, status, message)
    code, details = _infer_error(guarded, _bytes_request("faulty", what.encode()))
    assert code == grpc.StatusCode.INTERNAL and message in details
    if what in ("raise", "wrongtype", "unencodable"):
        assert_error_answer(guarded.http_port, _v1(guarded, "faulty", what), status,
                            message if what == "raise" else "model 'faulty' returned a response that cannot be encoded")
    assert json.loads(_v1(guarded, "faulty", "fine")[2]) == {"predictions": ["fine"]}


def test_faults_do_not_disturb_concurrent_clients(guarded):
    """Valid calls interleaved with every fault above, from several threads: each valid answer is exact."""
    errors = []

    def client(i):
        for j in range(15):
            value = float(i * 100 + j)
            status, _, body = request(guarded.http_port, "POST", INFER, fp32(shape=[1], data=[value]))
            if status == 503:
                continue  # over the concurrency limit: refused, never wrong
            if status != 200 or json.loads(body)["outputs"][0]["data"] != [value]:
                errors.append((status, body[:200]))
            _v1(guarded, "faulty", MODEL_FAULTS[j % len(MODEL_FAULTS)][1])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
