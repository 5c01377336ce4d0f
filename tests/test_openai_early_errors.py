"""The answers a request to an OpenAI route gets before (or instead of) its handler's work, each in
OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``, with its status: a body over
``--max_body_size`` (declared, chunked, gzip or deflate inflating past it: 413), an unknown path under
the prefix (404), a wrong method (405), a busy worker (503 with Retry-After) and a draining server (503).
The same answers on v1 / v2 routes and outside the prefix keep KServe's ``{"error": "..."}``.
Real servers (tests/models/openai_models.py) on loopback, raw HTTP and the ``openai`` client.
"""
import gzip
import json
import signal
import zlib

import openai
import pytest

from helpers import (
    CHAT,
    COMPLETIONS,
    assert_openai_error,
    eventually,
    exchange,
    json_of,
    open_openai_stream,
    parsed_answer,
    request,
)

LIMIT = 4096
ACCESS = "ACCESS %(protocol)s %(endpoint)s %(status)s %(request_id)s"
INFER = "/v2/models/parrot/infer"


@pytest.fixture(scope="module")
def limited(start_server):
    return start_server("tests/models/openai_models.py", "--max_body_size", str(LIMIT), "--access_log_format",
                        ACCESS, grpc=False)


def big_completion(size: int) -> bytes:
    """A completion request of about ``size`` bytes."""
    return json.dumps({"model": "parrot", "prompt": "a" * size}).encode()


def chunked_post(path: str, body: bytes, headers: str = "") -> bytes:
    data = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}" \
           "Transfer-Encoding: chunked\r\n\r\n".encode()
    return data + b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 1024]), body[i:i + 1024])
                           for i in range(0, len(body), 1024)) + b"0\r\n\r\n"


LARGER = f"is larger than the {LIMIT} bytes this server accepts (--max_body_size)"
INFLATES = f"the request body inflates to more than {LIMIT} bytes"
CHUNKED = f"the chunked request body passed the {LIMIT} bytes this server accepts (--max_body_size)"


# --- 413 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_a_body_over_the_limit_is_413_in_openai_shape(limited, path):
    body = big_completion(LIMIT + 500)  # read and dropped, then answered
    got = request(limited.http_port, "POST", path, body, {"Content-Type": "application/json"})
    assert_openai_error((got[0], got[1], json.loads(got[2])), 413, f"the request body of {len(body)} bytes {LARGER}",
                        kind="RequestEntityTooLargeError")
    endpoint = "completions" if path == COMPLETIONS else "chat_completions"
    limited.log_with(f"ACCESS openai {endpoint} 413 {got[1]['x-request-id']}")  # labelled as the OpenAI call


def test_a_body_far_over_the_limit_is_413_at_once_in_openai_shape(limited):
    raw = exchange(limited.http_port, f"POST {COMPLETIONS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      f"Content-Length: {10 ** 12}\r\n\r\n{{}}".encode())
    assert b"Connection: close" in raw.partition(b"\r\n\r\n")[0]
    assert_openai_error(parsed_answer(raw), 413, f"the request body of {10 ** 12} bytes {LARGER}")


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_a_chunked_body_over_the_limit_is_413_in_openai_shape(limited, path):
    raw = exchange(limited.http_port, chunked_post(path, big_completion(LIMIT * 2)))
    assert_openai_error(parsed_answer(raw), 413, CHUNKED)


@pytest.mark.parametrize("encoding,compress", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_a_body_inflating_past_the_limit_is_413_in_openai_shape(limited, encoding, compress):
    body = compress(big_completion(LIMIT * 50))  # a few hundred bytes on the wire
    assert len(body) < LIMIT
    got = request(limited.http_port, "POST", COMPLETIONS, body,
                  {"Content-Type": "application/json", "Content-Encoding": encoding})
    assert_openai_error((got[0], got[1], json.loads(got[2])), 413, INFLATES)
    raw = exchange(limited.http_port, chunked_post(COMPLETIONS, body, f"Content-Encoding: {encoding}\r\n"))
    assert_openai_error(parsed_answer(raw), 413, INFLATES)


def test_a_compressed_body_within_the_limit_is_served(limited):
    for encoding, compress in [("gzip", gzip.compress), ("deflate", zlib.compress)]:
        body = compress(json.dumps({"model": "parrot", "prompt": "a b c", "max_tokens": 2}).encode())
        status, _, raw = request(limited.http_port, "POST", COMPLETIONS, body,
                                 {"Content-Type": "application/json", "Content-Encoding": encoding})
        assert status == 200 and json.loads(raw)["choices"][0]["text"] == "a b", raw


def test_v1_and_v2_routes_keep_their_413(limited):
    body = big_completion(LIMIT + 500)
    for path in (INFER, "/v1/models/parrot:predict"):
        status, _, raw = request(limited.http_port, "POST", path, body, {"Content-Type": "application/json"})
        assert status == 413 and json.loads(raw) == {"error": f"the request body of {len(body)} bytes {LARGER}"}
    status, _, raw = request(limited.http_port, "POST", INFER, gzip.compress(body),
                             {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert status == 413 and json.loads(raw) == {"error": INFLATES}  # was Tornado's bare 400
    raw = exchange(limited.http_port, chunked_post(INFER, big_completion(LIMIT * 2)))
    assert raw.startswith(b"HTTP/1.1 413") and json_of(raw) == {"error": CHUNKED}


def test_the_openai_client_raises_its_typed_error_for_413(limited):
    with openai.OpenAI(base_url=f"{limited.url}/openai/v1", api_key="unused", max_retries=0, timeout=30) as c:
        with pytest.raises(openai.APIStatusError) as e:
            c.completions.create(model="parrot", prompt="a" * (LIMIT + 500))
    assert e.value.status_code == 413 and e.value.body["message"].startswith("the request body of ")


# --- 404 and 405 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,path", [("GET", "/openai/v1/nothing"), ("POST", "/openai/v1/completions/"),
                                         ("GET", "/openai"), ("DELETE", "/openai/v2/models"),
                                         ("POST", "/openai/v1/chat/completions/extra")])
def test_an_unknown_path_under_the_prefix_is_404_in_openai_shape(limited, method, path):
    status, headers, raw = request(limited.http_port, method, path, b"{}" if method == "POST" else None)
    assert_openai_error((status, headers, json.loads(raw)), 404, f"no route for {method} {path}",
                        kind="NotFoundError")


@pytest.mark.parametrize("path", ["/openaix", "/v1/nothing", "/v2/nothing", "/nothing/openai/v1/models"])
def test_an_unknown_path_outside_the_prefix_keeps_kserves_404(limited, path):
    status, _, raw = request(limited.http_port, "GET", path)
    assert status == 404 and json.loads(raw) == {"error": f"no route for GET {path}"}


@pytest.mark.parametrize("method,path", [("GET", COMPLETIONS), ("PUT", CHAT), ("DELETE", "/openai/v1/models"),
                                         ("POST", "/openai/v1/models/parrot"), ("PROPFIND", COMPLETIONS)])
def test_a_wrong_method_is_405_in_openai_shape(limited, method, path):
    status, headers, raw = request(limited.http_port, method, path, b"{}" if method in ("PUT", "POST") else None)
    assert_openai_error((status, headers, json.loads(raw)), 405, "Method Not Allowed", kind="MethodNotAllowedError")


def test_with_an_empty_prefix_only_the_openai_routes_answer_in_its_shape(start_server):
    """``KSERVE_OPENAI_ROUTE_PREFIX=""`` puts the routes at ``/v1/completions``...: the rest of ``/v1``
    is KServe v1's, and keeps its answers."""
    bare = start_server("tests/models/openai_models.py", "--max_body_size", str(LIMIT), grpc=False,
                        env={"KSERVE_OPENAI_ROUTE_PREFIX": ""})
    body = big_completion(LIMIT + 500)
    got = request(bare.http_port, "POST", "/v1/completions", body, {"Content-Type": "application/json"})
    assert_openai_error((got[0], got[1], json.loads(got[2])), 413, f"the request body of {len(body)} bytes {LARGER}")
    for path in ("/v1/models/parrot:predict", "/v1/models"):
        status, _, raw = request(bare.http_port, "POST", path, body, {"Content-Type": "application/json"})
        assert status == 413 and json.loads(raw) == {"error": f"the request body of {len(body)} bytes {LARGER}"}
    status, _, raw = request(bare.http_port, "GET", "/v1/nothing")
    assert status == 404 and json.loads(raw) == {"error": "no route for GET /v1/nothing"}
    status, _, raw = request(bare.http_port, "POST", "/v1/completions", json.dumps(
        {"model": "parrot", "prompt": "a b", "max_tokens": 1}).encode(), {"Content-Type": "application/json"})
    assert status == 200 and json.loads(raw)["choices"][0]["text"] == "a"


# --- 503: a busy worker, then a draining server --------------------------------------------------------
def test_busy_and_draining_are_503_in_openai_shape(start_server):
    """One call at a time: a stream in flight makes the next call 503 (busy, Retry-After); after SIGTERM
    the stream holds the drain open and a new call is 503 (shutting down); then the server exits."""
    server = start_server("tests/models/openai_models.py", "--max_concurrent_requests", "1", "--grace_period",
                          "20", grpc=False)
    sock = open_openai_stream(server.http_port, "holds-the-only-slot")  # two events arrived: the stream is in flight
    try:
        doc = json.dumps({"model": "parrot", "prompt": "a b"}).encode()
        got = request(server.http_port, "POST", COMPLETIONS, doc, {"Content-Type": "application/json"})
        assert_openai_error((got[0], got[1], json.loads(got[2])), 503, "The server is busy: 1 requests are in "
                            "flight in this worker (--max_concurrent_requests); retry later.",
                            kind="ServiceUnavailableError")
        assert got[1]["retry-after"] == "1"
        server.proc.send_signal(signal.SIGTERM)
        eventually(lambda: request(server.http_port, "GET", "/v2/health/ready")[0] == 503,
                   message="the server never began to drain")
        got = request(server.http_port, "POST", CHAT, json.dumps(
            {"model": "parrot", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            {"Content-Type": "application/json"})
        assert_openai_error((got[0], got[1], json.loads(got[2])), 503, "The server is shutting down.",
                            kind="ServiceUnavailableError")
        assert json.loads(got[2])["error"]["message"] == "Server is not ready. The server is shutting down."
        status, _, raw = request(server.http_port, "POST", "/v1/models/echo:predict", b'{"instances": [1]}')
        assert status == 503 and json.loads(raw) == {"error": "Server is not ready. The server is shutting down."}
    finally:
        sock.close()  # the stream ends, the drain with it
    assert server.wait_exit(timeout=15) == 0
