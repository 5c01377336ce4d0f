"""The inference routes' fast path (kserve_sdk/handlers/fast_path.py) answers as the RequestHandlers do.

A deflate-encoded body is served by the RequestHandlers, the same body sent plain by the fast path: both
must give the same status, content type and body, for answers and for errors alike.
"""
import gzip
import json
import socket
import zlib

import pytest

from helpers import request

V2_BODY = json.dumps({"id": "same", "inputs": [
    {"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}).encode()


@pytest.fixture(scope="module")
def zoo(start_server):
    return start_server("tests/models/zoo.py", env={"ZOO_MODELS": "echo,failing,setheaders"}, grpc=False)


def _both_ways(port, path, body, headers=None):
    """(plain answer, deflate answer): the first served by the fast path, the second by a RequestHandler."""
    plain = request(port, "POST", path, body, dict(headers or {}))
    deflated = request(port, "POST", path, zlib.compress(body), {**(headers or {}), "Content-Encoding": "deflate"})
    return plain, deflated


@pytest.mark.parametrize("path,body,status", [
    ("/v2/models/echo/infer", V2_BODY, 200),
    ("/v2/models/echo/versions/1/infer", V2_BODY, 200),
    ("/v2/models/echo/versions/3/infer", V2_BODY, 404),
    ("/v1/models/echo:predict", b'{"instances": [[1, 2], [3, 4]]}', 200),
    ("/v2/models/nosuch/infer", V2_BODY, 404),
    ("/v1/models/nosuch:predict", b'{"instances": [1]}', 404),
    ("/v2/models/echo/infer", b'{"inputs": [', 400),
    ("/v1/models/echo:predict", b"", 400),
    ("/v1/models/echo:explain", b'{"instances": [1]}', 501),
    ("/v1/models/failing:predict", b'{"instances": ["boom"]}', 500),
    ("/v1/models/failing:predict", b'{"instances": ["invalid"]}', 400),
], ids=["v2", "v2-version", "v2-other-version", "v1", "v2-unknown", "v1-unknown", "v2-bad-json", "v1-empty",
        "explain-501", "v1-500", "v1-model-400"])
def test_fast_path_and_handlers_give_the_same_answer(zoo, path, body, status):
    (s1, h1, b1), (s2, h2, b2) = _both_ways(zoo.http_port, path, body)
    assert s1 == s2 == status, (b1, b2)
    assert set(h1) == set(h2), (h1, h2)  # the same headers, from the one responder
    for name in ("content-type", "server", "vary"):
        assert h1[name] == h2[name], name
    assert h1["server"].startswith("kserve-sdk/")
    assert b1 == b2
    assert int(h1["content-length"]) == len(b1) and "date" in h1
    assert len(h1["x-request-id"]) == 36 and len(h2["x-request-id"]) == 36  # errors carry one too
    if status >= 400:
        assert json.loads(b1)["error"], b1


def test_binary_tensors_and_request_id_on_the_fast_path(zoo):
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}],
                         "parameters": {"binary_data_output": True}}).encode()
    raw = b"".join(int(v).to_bytes(4, "little") for v in (0x3F800000, 0x40000000, 0x40400000, 0x40800000))
    status, headers, body = request(zoo.http_port, "POST", "/v2/models/echo/infer", header + raw,
                                    {"Inference-Header-Content-Length": str(len(header)), "x-request-id": "abc"})
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    assert headers["x-request-id"] == "abc"
    json_length = int(headers["inference-header-content-length"])
    assert json.loads(body[:json_length])["outputs"][0]["parameters"]["binary_data_size"] == 16
    assert body[json_length:] == raw


def test_model_headers_are_sent_as_text_and_a_line_break_is_refused(zoo):
    port = zoo.http_port
    status, headers, _ = request(port, "POST", "/v1/models/setheaders:predict",
                                 json.dumps({"instances": [["x-count", 7], ["x-name", "seven"]]}).encode())
    assert status == 200 and headers["x-count"] == "7" and headers["x-name"] == "seven"
    status, headers, body = request(port, "POST", "/v1/models/setheaders:predict",
                                    json.dumps({"instances": [["x-evil", "a\r\nSet-Cookie: b"]]}).encode())
    assert status == 500 and "set-cookie" not in headers
    assert "the response header 'x-evil' holds a line break" in json.loads(body)["error"]
    assert request(port, "POST", "/v1/models/setheaders:predict", b'{"instances": []}')[0] == 200  # still serving


def test_large_json_answers_are_gzipped_when_asked(zoo):
    data = list(range(400))  # 400 FP32 values: well over 1 KiB of JSON
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [100, 4], "datatype": "FP32", "data": data}]}).encode()
    status, headers, zipped = request(zoo.http_port, "POST", "/v2/models/echo/infer", body,
                                      {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
    assert int(headers["content-length"]) == len(zipped)
    assert json.loads(gzip.decompress(zipped))["outputs"][0]["data"] == [float(v) for v in data]
    status, headers, small = request(zoo.http_port, "POST", "/v2/models/echo/infer", V2_BODY,
                                     {"Accept-Encoding": "gzip"})
    assert status == 200 and "content-encoding" not in headers and json.loads(small)["id"] == "same"
    status, headers, plain = request(zoo.http_port, "POST", "/v2/models/echo/infer", body)
    unzipped = json.loads(gzip.decompress(zipped))
    assert status == 200 and "content-encoding" not in headers and json.loads(plain)["id"] != unzipped["id"]
    assert {**json.loads(plain), "id": None} == {**unzipped, "id": None}  # each call was given its own id


def test_pipelined_requests_are_answered_in_order(zoo):
    bodies = [json.dumps({"id": f"r{i}", "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                                                      "data": [i, i, i, i]}]}).encode() for i in range(3)]
    wire = b"".join(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b)
                    for b in bodies)
    with socket.create_connection(("127.0.0.1", zoo.http_port), timeout=10) as s:
        s.sendall(wire)
        received, answers = b"", []
        while len(answers) < 3:
            chunk = s.recv(65536)
            assert chunk, received
            received += chunk
            while b"\r\n\r\n" in received:  # take every complete answer: headers, then Content-Length bytes
                head, _, rest = received.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(rest) < length:
                    break
                answers.append((head.split(b"\r\n")[0], json.loads(rest[:length])))
                received = rest[length:]
    assert [status for status, _ in answers] == [b"HTTP/1.1 200 OK"] * 3
    assert [doc["id"] for _, doc in answers] == ["r0", "r1", "r2"]
    assert [doc["outputs"][0]["data"] for _, doc in answers] == [[float(i)] * 4 for i in range(3)]


def test_other_methods_on_inference_routes_are_not_allowed(zoo):
    status, _, body = request(zoo.http_port, "GET", "/v2/models/echo/infer")
    assert status == 405 and json.loads(body)["error"]
