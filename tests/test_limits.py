"""The limits a client meets instead of hurting the server (docs/security.md): an answer it does not read is
dropped after --send_timeout_seconds, headers over the limit are answered 431, a body in an encoding the
server does not undo 415, BYTES inputs past their element count 400 before any is read, and the client
errors that used to be the model's 500 (BYTES nested past any shape, a zero-sized shape numpy cannot hold)
are answered 400 / INVALID_ARGUMENT naming the problem. After each, the server answers inference as
before and its memory is what it was."""
import gzip
import json
import os
import re
import socket
import struct
import time
import zlib

import grpc
import numpy as np
import pytest

from helpers import (
    CHAT,
    assert_error_answer,
    assert_openai_error,
    binary_body,
    eventually,
    parsed_answer,
    post_json,
    request,
    scrape,
    v2_fp32_doc,
    value,
)
from kserve_sdk import internals
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from kserve_sdk.protocol.tensor import MAX_BYTES_ELEMENTS

SEND_TIMEOUT = 2.0  # --send_timeout_seconds of both servers
BIG = 16 << 20  # bytes of the answer a client asks for and does not read
INFER = "/v2/models/echo/infer"
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(128 << 10), "MALLOC_TRIM_THRESHOLD_": str(128 << 10)}
HEADER_LIMIT = 65536  # Tornado's max_header_size, which the server keeps


@pytest.fixture(scope="module")
def limits(start_server):
    """The zoo's echo and faulty models ("big:<n>" answers n bytes) with a short send timeout. glibc's malloc
    keeps fixed thresholds here: by default it raises them after a large block is freed, and may then keep a freed
    32 MiB body cached in the process, so RSS would measure the allocator's timing rather than what the server
    holds (docs/security.md says how a deployment sets the same)."""
    return start_server("tests/models/zoo.py", "--send_timeout_seconds", str(SEND_TIMEOUT),
                        env={"ZOO_MODELS": "echo,faulty", **FIXED_MALLOC})


@pytest.fixture(scope="module")
def streams(start_server, tmp_path_factory):
    """The streaming models (flood records how many events it yielded when closed) with a short send timeout."""
    markers = tmp_path_factory.mktemp("limits-markers")
    server = start_server("tests/models/streaming.py", "--send_timeout_seconds", str(SEND_TIMEOUT),
                          env={"STREAM_MARKERS": str(markers)})
    server.markers = markers
    return server


def _rss_mib(server) -> float:
    with open(f"/proc/{server.proc.pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1)) / 1024


def _echo_works(port: int) -> None:
    status, _, doc = post_json(port, INFER, v2_fp32_doc())
    assert status == 200 and doc["outputs"][0]["data"] == [1.0, 2.0], doc


def _post_unread(port: int, path: str, body: bytes) -> socket.socket:
    """A connection that sends a POST and never reads: its receive buffer is small, so the answer stays
    on the server's side."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def _read_to_end(sock: socket.socket, limit: int = BIG * 2) -> bytes:
    """What the connection still delivers until the server's close (bounded by ``limit`` bytes and 10 s)."""
    sock.settimeout(10)
    received = bytearray()
    try:
        while len(received) < limit and (chunk := sock.recv(1 << 20)):
            received += chunk
    except ConnectionResetError:
        pass
    return bytes(received)


# --- answers a client does not read ---------------------------------------------------------------------------
def test_an_answer_the_client_does_not_read_is_dropped_after_the_send_timeout(limits):
    port, big = limits.http_port, json.dumps({"instances": [f"big:{BIG}"]}).encode()
    for _ in range(2):  # read whole first: what one answer leaves in the process is in the baseline
        status, _, body = request(port, "POST", "/v1/models/faulty:predict", big)
        assert status == 200 and len(body) == BIG
    before = _rss_mib(limits)
    started = time.monotonic()
    clients = [_post_unread(port, "/v1/models/faulty:predict", big) for _ in range(3)]
    try:
        eventually(lambda: _rss_mib(limits) > before + 24, timeout=30,
                   message=lambda: f"the unread answers are not held in the server: RSS {_rss_mib(limits):.0f} "
                                   f"MiB, before {before:.0f} MiB; {limits.log()[-1500:]}")
        peers = [f"closed the connection of 127.0.0.1:{c.getsockname()[1]}" for c in clients]

        def closed_while_others_are_served() -> bool:
            _echo_works(port)  # the other clients are served meanwhile
            log = limits.log()
            return all(peer in log for peer in peers)

        eventually(closed_while_others_are_served, timeout=SEND_TIMEOUT + 15, interval=0.2,
                   message=lambda: f"the unread answers were not dropped: {limits.log()[-2000:]}")
        waited = time.monotonic() - started
        assert SEND_TIMEOUT <= waited < SEND_TIMEOUT + 10, waited  # not before its time, nor long after
        assert "(--send_timeout_seconds)" in limits.log()
        for client in clients:
            rest = _read_to_end(client)
            assert rest.startswith(b"HTTP/1.1 200 OK") and len(rest) < BIG, len(rest)  # cut short, then closed
        eventually(lambda: _rss_mib(limits) <= before * 1.1, timeout=10,
                   message=lambda: f"RSS {_rss_mib(limits):.0f} MiB, before {before:.0f} MiB")
        _echo_works(port)
    finally:
        for client in clients:
            client.close()


def _flood_markers(server) -> set:
    return {name for name in os.listdir(server.markers) if name.startswith("flood-") and not name.endswith(".tmp")}


def test_a_stream_the_client_does_not_read_is_closed_and_its_generator_cancelled(streams):
    port, before = streams.http_port, _flood_markers(streams)
    counted = value(scrape(streams), "kserve_requests_total", model_name="flood", protocol="rest_v2",
                    endpoint="generate_stream", status="499")
    body = json.dumps({"text_input": "x", "parameters": {"count": 1000000, "size": 10000}}).encode()
    started = time.monotonic()
    client = _post_unread(port, "/v2/models/flood/generate_stream", body)
    try:
        new = eventually(lambda: _flood_markers(streams) - before, timeout=SEND_TIMEOUT + 15,
                         message=lambda: f"the unread stream was not closed: {streams.log()[-2000:]}")
        assert time.monotonic() - started >= SEND_TIMEOUT
        with open(os.path.join(streams.markers, new.pop())) as f:
            assert int(f.read()) < 1000000  # the generator was closed midway
        streams.log_with(f"closed the connection of 127.0.0.1:{client.getsockname()[1]}")
        streams.log_with('"POST /v2/models/flood/generate_stream HTTP/1.1" 499 ')  # as a client that left
        assert eventually(lambda: value(scrape(streams), "kserve_requests_total", model_name="flood",
                                        protocol="rest_v2", endpoint="generate_stream", status="499")) == counted + 1
        assert _read_to_end(client).startswith(b"HTTP/1.1 200 OK")
    finally:
        client.close()
    status, _, doc = post_json(port, "/v2/models/tokens/generate", {"text_input": "a b", "parameters": {"delay_ms": 0}})
    assert status == 200 and doc["text_output"] == "a b", doc


# --- headers over the limit -----------------------------------------------------------------------------------
def _send_and_read_to_end(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # closed with no answer while we were still sending
            return b""
        return _read_to_end(sock)


@pytest.mark.parametrize("size", [70000, 1 << 20], ids=["70KB", "1MiB"])
def test_headers_over_the_limit_are_answered_431_then_the_connection_closes(limits, size):
    port = limits.http_port
    raw = _send_and_read_to_end(port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
    if not internals.ENABLED:  # the plain path of kserve_sdk/internals/tornado_overflow.py: Tornado's bare close
        assert raw == b"", raw[:200]
        return
    status, headers, doc = parsed_answer(raw)  # the whole answer, then the close (_read_to_end saw it)
    assert status == 431 and raw.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), raw[:200]
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert doc == {"error": f"the request's headers are larger than the {HEADER_LIMIT} bytes this server reads"}
    limits.log_with(f"-> 431 (x-request-id {headers['x-request-id']})")
    assert request(port, "GET", "/v2/health/live", headers={"X-Big": "a" * 60000})[0] == 200  # under it: served
    # A chunk-size line over Tornado's own 64 bytes is not the headers' fault: no 431 for it.
    chunked = (b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"1" * 100 + b"\r\n")
    assert not _send_and_read_to_end(port, chunked).startswith(b"HTTP/1.1 431")
    _echo_works(port)


# --- request bodies in an encoding the server does not undo -------------------------------------------------------
SUPPORTED = [("gzip", gzip.compress), ("deflate", zlib.compress), ("identity", lambda body: body)]


@pytest.mark.parametrize("encoding", ["br", "x-gzip", "gzip, br", "zstd"])
def test_a_body_in_an_unsupported_encoding_is_refused_415(limits, encoding):
    port, doc = limits.http_port, json.dumps(v2_fp32_doc()).encode()
    got = request(port, "POST", INFER, doc, {"Content-Type": "application/json", "Content-Encoding": encoding})
    assert_error_answer(port, got, 415, f"Content-Encoding {encoding!r} is not supported; "
                                        "send gzip, deflate or identity")
    got = request(port, "POST", CHAT, b'{"model": "m", "messages": []}', {"Content-Encoding": encoding})
    assert_openai_error((got[0], got[1], json.loads(got[2])), 415, f"Content-Encoding {encoding!r} is not supported")
    for supported, encode in SUPPORTED:  # what the server undoes is still served
        status, _, body = request(port, "POST", INFER, encode(doc),
                                  {"Content-Type": "application/json", "Content-Encoding": supported})
        assert status == 200 and json.loads(body)["outputs"][0]["data"] == [1.0, 2.0], (supported, body)


# --- the client's errors that were the model's 500 -------------------------------------------------------------
def test_bytes_json_nested_past_any_shape_is_the_clients_error(limits):
    body = (b'{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": '
            + b"[" * 995 + b'"a"' + b"]" * 995 + b"}]}")
    got = request(limits.http_port, "POST", INFER, body, {"Content-Type": "application/json"})
    assert_error_answer(limits.http_port, got, 400, "input 'INPUT0': data does not fit datatype BYTES: its lists "
                                                    "nest more than 64 levels deep, deeper than any shape")


TOO_LARGE = "shape [0, 4611686018427387904] of input 'INPUT0' is too large"


def test_a_zero_sized_shape_numpy_cannot_hold_is_the_clients_error_over_rest(limits):
    got = request(limits.http_port, "POST", INFER, json.dumps(v2_fp32_doc(shape=[0, 2 ** 62], data=[])).encode())
    assert_error_answer(limits.http_port, got, 400, TOO_LARGE)
    body, headers = binary_body({"inputs": [{"name": "INPUT0", "shape": [0, 2 ** 62], "datatype": "BYTES",
                                             "parameters": {"binary_data_size": 0}}]})
    assert_error_answer(limits.http_port, request(limits.http_port, "POST", INFER, body, headers), 400, TOO_LARGE)


def test_a_zero_sized_shape_numpy_cannot_hold_is_invalid_argument_over_grpc(limits):
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[0, 2 ** 62])
    message = pb.ModelInferRequest(model_name="echo", inputs=[tensor], raw_input_contents=[b""])
    with grpc.insecure_channel(limits.grpc_url) as channel:
        with pytest.raises(grpc.RpcError) as err:
            GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and TOO_LARGE in err.value.details()
    _echo_works(limits.http_port)


# --- BYTES inputs: what reading them costs is bounded ------------------------------------------------------------
def _bytes_body(count: int, element: bytes = b"ab"):
    data = (struct.pack("<I", len(element)) + element) * count
    return binary_body({"inputs": [{"name": "INPUT0", "shape": [count], "datatype": "BYTES",
                                    "parameters": {"binary_data_size": len(data)}}]}, data)


def test_bytes_inputs_past_the_element_limit_are_refused_before_any_is_read(limits):
    port = limits.http_port
    count = (32 << 20) // 6  # 32 MiB of 2-byte elements with their 4-byte length prefixes
    fp32 = np.zeros(count * 6 // 4, np.float32).tobytes()  # a body as large that costs nothing to decode
    body, headers = binary_body({"inputs": [{"name": "INPUT0", "shape": [len(fp32) // 4], "datatype": "FP32",
                                             "parameters": {"binary_data_size": len(fp32)}}],
                                 "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}, fp32)
    assert request(port, "POST", INFER, body, headers)[0] == 200  # the memory of a 32 MiB body is in the baseline
    before = _rss_mib(limits)
    body, headers = _bytes_body(count)
    started = time.monotonic()
    got = request(port, "POST", INFER, body, headers)
    assert time.monotonic() - started < 5  # nothing was split into Python objects
    assert_error_answer(port, got, 400, f"the request's BYTES inputs hold {count} elements in all; "
                                        f"a request may carry at most {MAX_BYTES_ELEMENTS}")
    eventually(lambda: _rss_mib(limits) <= before * 1.1, timeout=10,  # once the body is let go
               message=lambda: f"RSS {_rss_mib(limits):.0f} MiB, before {before:.0f} MiB")
    body, headers = _bytes_body(MAX_BYTES_ELEMENTS, b"abc")  # as many as a request may carry: served
    status, _, answer = request(port, "POST", INFER, body, headers, timeout=60)
    assert status == 200, answer[:300]
    output = json.loads(answer)["outputs"][0]
    assert output["shape"] == [MAX_BYTES_ELEMENTS] and output["data"][:2] == ["abc", "abc"]


def test_bytes_inputs_past_the_element_limit_are_invalid_argument_over_grpc(limits):
    count = MAX_BYTES_ELEMENTS + 1
    raw = (struct.pack("<I", 1) + b"a") * count
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[count])
    message = pb.ModelInferRequest(model_name="echo", inputs=[tensor], raw_input_contents=[raw])
    with grpc.insecure_channel(limits.grpc_url, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        with pytest.raises(grpc.RpcError) as err:
            GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (f"the request's BYTES inputs hold {count} elements in all; a request may carry at most "
            f"{MAX_BYTES_ELEMENTS}") in err.value.details()
    _echo_works(limits.http_port)
