"""OpenAI-compatible serving against real servers (tests/models/openai_models.py) with the real ``openai``
client and raw HTTP: completions and chat (through OpenAIChatAdapterModel and with chunk objects), streamed
and not, embeddings, rerank, the model list, every error in OpenAI's shape, the SSE framing, a client that
leaves mid-stream, metrics, and a model loaded later; each with one worker and with two."""
import gzip
import json
import os
import socket
import time
import uuid

import httpx
import openai
import pytest
import tritonclient.grpc as grpcclient

from helpers import (
    CHAT,
    COMPLETIONS,
    assert_openai_error,
    check_request,
    check_response,
    eventually,
    open_openai_stream,
    post_json,
    request,
    scrape,
    sse_data,
    value,
)

ACCESS = "ACCESS %(request_id)s %(protocol)s %(endpoint)s %(model)s %(status)s"


@pytest.fixture(scope="module", params=["1", "2"], ids=["workers1", "workers2"])
def server(start_server, request, tmp_path_factory):
    markers = tmp_path_factory.mktemp(f"markers{request.param}")
    started = start_server("tests/models/openai_models.py", "--workers", request.param,
                           "--access_log_format", ACCESS, env={"OPENAI_TEST_MARKERS": str(markers)})
    started.markers = str(markers)
    return started


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


# --- completions -------------------------------------------------------------------------------------------
def test_completion(client):
    got = client.completions.create(model="parrot", prompt="one two three four", max_tokens=3)
    assert got.object == "text_completion" and got.id == "cmpl-parrot" and got.model == "parrot"
    assert [(c.index, c.text, c.finish_reason) for c in got.choices] == [(0, "one two three", "length")]
    assert (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.total_tokens) == (4, 3, 7)


def test_completion_stream_of_kserve_strings(client):
    chunks = list(client.completions.create(model="parrot", prompt="one two three four", max_tokens=3,
                                            stream=True))
    assert [c.choices[0].text for c in chunks] == ["one", " two", " three"]
    assert {c.object for c in chunks} == {"text_completion"} and {c.model for c in chunks} == {"parrot"}
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 3


def test_completion_answered_with_a_dict_and_streamed_as_objects_and_dicts(client):
    got = client.completions.create(model="objects", prompt="hey")
    assert got.choices[0].text == "HEY" and got.usage.total_tokens == 2 and got.created == 1
    chunks = list(client.completions.create(model="objects", prompt="hey", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "hey"
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.completion_tokens == 3


# --- chat --------------------------------------------------------------------------------------------------
def test_chat_through_the_adapter(client):
    got = client.chat.completions.create(model="parrot", max_tokens=2,
                                         messages=[{"role": "user", "content": "hello there"}])
    assert got.object == "chat.completion" and got.id == "cmpl-parrot" and got.model == "parrot"
    choice = got.choices[0]
    assert (choice.index, choice.message.role, choice.message.content) == (0, "parrot", "user: hello")
    assert choice.finish_reason == "length"
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (3, 2)


def test_chat_stream_through_the_adapter(client):
    chunks = list(client.chat.completions.create(model="parrot", max_tokens=2, stream=True,
                                                 messages=[{"role": "user", "content": "hello there"}]))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content for c in chunks) == "user: hello"
    assert {c.choices[0].delta.role for c in chunks} == {"parrot"}
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 2


def test_chat_with_n_other_than_1_is_refused_by_the_adapter(client, server):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="parrot", n=2, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 400 and "n != 1 is not supported" in caught.value.message
    assert_openai_error(post_json(server.http_port, CHAT, {"model": "parrot", "n": 3,
                                                           "messages": [{"role": "user", "content": "x"}]}),
                        400, "n != 1 is not supported", kind="BadRequestError")


def test_chat_through_an_adapter_model_written_for_kserve(client):
    got = client.chat.completions.create(model="kserve-style", messages=[{"role": "user", "content": "abc"}])
    assert got.choices[0].message.content == "cba" and got.choices[0].message.role == "assistant"


def test_chat_of_a_generative_model_with_chunk_objects(client):
    got = client.chat.completions.create(model="objects", messages=[{"role": "user", "content": "abc"}])
    assert got.object == "chat.completion" and got.choices[0].message.content == "cba"
    chunks = list(client.chat.completions.create(model="objects", stream=True,
                                                 messages=[{"role": "user", "content": "abc"}]))
    assert [c.choices[0].delta.content for c in chunks] == ["c", "b", "a"]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}


# --- encoders ----------------------------------------------------------------------------------------------
def test_embeddings(client):
    got = client.embeddings.create(model="hasher", input=["a b", "hello"])
    assert got.object == "list" and got.model == "hasher"
    assert [(d.index, d.object, d.embedding) for d in got.data] == [(0, "embedding", [2.0, 3.0, 1.0]),
                                                                    (1, "embedding", [1.0, 5.0, 2.0])]
    assert got.usage.prompt_tokens == 3 and got.usage.total_tokens == 3


def test_rerank_by_raw_http(server):
    doc = {"model": "hasher", "query": "red apple", "documents": ["green pear", "red apple pie", "apple"],
           "top_n": 2}
    status, headers, body = post_json(server.http_port, "/openai/v1/rerank", doc)
    assert status == 200 and headers["content-type"].startswith("application/json"), body
    assert body["id"] == "rerank-1" and body["model"] == "hasher" and body["usage"] == {"total_tokens": 2}
    assert [(r["index"], r["document"]["text"], r["relevance_score"]) for r in body["results"]] == [
        (1, "red apple pie", 1.0), (2, "apple", 0.5)]


# --- models ------------------------------------------------------------------------------------------------
def test_models_list_and_retrieve(client):
    listed = client.models.list()
    served = {m.id for m in listed.data}
    assert {"parrot", "objects", "hasher", "sleepy"} <= served and "echo" not in served
    assert {(m.object, m.owned_by) for m in listed.data} == {("model", "kserve")}
    got = client.models.retrieve("hasher")
    assert got.id == "hasher" and got.object == "model" and abs(got.created - time.time()) < 3600
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nope")
    assert caught.value.status_code == 404


def test_models_retrieve_errors(server):
    for name, status, message in [("nope", 404, "Model with name nope does not exist."),
                                  ("echo", 404, "Model with name echo is not an OpenAI model."),
                                  ("sleepy", 503, "Model with name sleepy is not ready.")]:
        code, headers, raw = request(server.http_port, "GET", f"/openai/v1/models/{name}")
        assert_openai_error((code, headers, json.loads(raw)), status, message)


# --- errors ------------------------------------------------------------------------------------------------
MODEL_ERRORS = [
    ("unknown", {"model": "nope", "prompt": "x"}, 404, "Model with name nope does not exist.", "NotFoundError"),
    ("not-ready", {"model": "sleepy", "prompt": "x"}, 503, "Model with name sleepy is not ready.",
     "ServiceUnavailableError"),
    ("not-openai", {"model": "echo", "prompt": "x"}, 404, "Model with name echo is not an OpenAI model.", None),
    ("wrong-kind", {"model": "hasher", "prompt": "x"}, 400, "Model hasher does not support Completions API",
     "BadRequestError"),
    ("invalid-input", {"model": "objects", "prompt": "invalid"}, 400, "the prompt is not acceptable", None),
    ("model-fault", {"model": "objects", "prompt": "crash"}, 500, "ZeroDivisionError", "InternalServerError"),
    ("not-an-answer", {"model": "objects", "prompt": "not-an-answer"}, 500,
     "model 'objects' returned a response that cannot be encoded: TypeError: the answer is a str", None),
    ("openai-error-text", {"model": "objects", "prompt": "openai-error-text"}, 500, "a plain message", None),
    ("no-model", {"prompt": "x"}, 400, "the request must name its model", None),
]


@pytest.mark.parametrize("doc,status,message,kind", [c[1:] for c in MODEL_ERRORS], ids=[c[0] for c in MODEL_ERRORS])
def test_model_errors_in_openai_shape(server, doc, status, message, kind):
    assert_openai_error(post_json(server.http_port, COMPLETIONS, doc), status, message, kind=kind)
    assert_openai_error(post_json(server.http_port, COMPLETIONS, {**doc, "stream": True}), status, message, kind=kind)


def test_wrong_kind_for_embeddings_and_chat(server):
    assert_openai_error(post_json(server.http_port, "/openai/v1/embeddings", {"model": "parrot", "input": "x"}), 400,
                        "Model parrot does not support Embeddings API")
    assert_openai_error(post_json(server.http_port, "/openai/v1/rerank",
                                  {"model": "objects", "query": "x", "documents": []}),
                        400, "Model objects does not support Rerank API")
    assert_openai_error(post_json(server.http_port, CHAT,
                                  {"model": "hasher", "messages": [{"role": "user", "content": "x"}]}),
                        400, "Model hasher does not support Chat Completion API")


def test_the_openai_client_raises_its_typed_errors(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="nope", prompt="x")
    assert caught.value.body["message"] == (
        "Request for unknown model: 'nope' is not found. Model with name nope does not exist. Models served: echo, "
        "hasher, kserve-style, objects, parrot, sleepy.")
    with pytest.raises(openai.InternalServerError):
        client.completions.create(model="sleepy", prompt="x")  # 503
    with pytest.raises(openai.RateLimitError) as caught:
        client.completions.create(model="objects", prompt="openai-error")
    assert caught.value.status_code == 429


def test_a_returned_error_response_and_a_raised_openai_error_keep_their_code(server):
    status, _, body = post_json(server.http_port, COMPLETIONS, {"model": "objects", "prompt": "error-response"})
    assert status == 418 and body == {"error": {"code": "418", "message": "I am a teapot", "param": "prompt",
                                                "type": "Teapot"}}
    status, _, body = post_json(server.http_port, CHAT, {"model": "objects",
                                                         "messages": [{"role": "user", "content": "openai-error"}]})
    assert status == 429 and body == {"error": {"code": "429", "message": "slow down", "param": "",
                                                "type": "RateLimitError"}}
    status, _, body = post_json(server.http_port, COMPLETIONS,
                                {"model": "objects", "prompt": "error-response", "stream": True})
    assert status == 418 and body["error"]["message"] == "I am a teapot"


MALFORMED = [
    ("not-json", COMPLETIONS, b"{nope", "Unrecognized request format", None),
    ("empty", COMPLETIONS, b"", "the request body is empty", None),
    ("array", COMPLETIONS, b"[1]", "the request body must be a JSON object, got list", None),
    ("no-prompt", COMPLETIONS, {"model": "parrot"}, "invalid request: prompt is required", "prompt"),
    ("prompt-type", COMPLETIONS, {"model": "parrot", "prompt": {"a": 1}}, "prompt: Input should be", "prompt"),
    ("max-tokens", COMPLETIONS, {"model": "parrot", "prompt": "x", "max_tokens": "many"},
     "max_tokens: Input should be a valid integer", "max_tokens"),
    ("no-messages", CHAT, {"model": "parrot"}, "invalid request: messages is required", "messages"),
    ("no-role", CHAT, {"model": "parrot", "messages": [{"content": "hi"}]}, "messages[0].role is required",
     "messages[0].role"),
    ("messages-type", CHAT, {"model": "parrot", "messages": "hi"}, "messages: Input should be a valid list",
     "messages"),
    ("no-input", "/openai/v1/embeddings", {"model": "hasher"}, "input is required", "input"),
    ("no-documents", "/openai/v1/rerank", {"model": "hasher", "query": "x"}, "documents is required", "documents"),
]


@pytest.mark.parametrize("path,doc,message,param", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_bodies_are_400_naming_the_field(server, path, doc, message, param):
    assert_openai_error(post_json(server.http_port, path, doc), 400, message, param=param, kind="BadRequestError")


VALID = {
    COMPLETIONS: {"model": "parrot", "prompt": "a b", "max_tokens": 2, "stream": False, "n": 1, "stop": ["x"],
                  "temperature": 0.5, "logprobs": 1, "stream_options": None, "response_format": {"type": "text"}},
    CHAT: {"model": "parrot", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": 1,
           "tools": None, "tool_choice": "none", "logprobs": False},
    "/openai/v1/embeddings": {"model": "hasher", "input": ["a"], "encoding_format": "float", "dimensions": 3},
    "/openai/v1/rerank": {"model": "hasher", "query": "a", "documents": ["a"], "top_n": 1},
}
ODD_VALUES = [None, -1, 2 ** 70, 1.5, "x", "", [], [None], [[]], {}, {"a": {"b": []}}, True, "\u00e9\x00"]


@pytest.mark.parametrize("path", sorted(VALID))
def test_any_wrong_field_is_400_in_openai_shape_never_a_fault(server, path):
    """Each field of a valid request set to each of a set of odd values: answered (200) or refused (400)
    naming the field, never a 422 nor a 5xx but the model's own (the test models trust valid requests)."""
    for field in VALID[path]:
        for odd in ODD_VALUES:
            doc = json.dumps({**VALID[path], field: odd}).encode()
            status, headers, raw = request(server.http_port, "POST", path, doc, {"Content-Type": "application/json"})
            if headers["content-type"] == "text/event-stream":
                assert status == 200 and sse_data(raw)[-1] == "[DONE]"
                continue
            body = json.loads(raw)
            model_fault = status == 500 and "(model '" in body["error"]["message"]
            assert status in (200, 400, 404) or model_fault, (field, odd, status, body)
            if status != 200:
                assert_openai_error((status, headers, body), status, "", param=body["error"]["param"])
                if status == 400 and field != "model" and "invalid request" in body["error"]["message"]:
                    assert body["error"]["param"].split("[")[0].split(".")[0] == field, (field, odd, body)
    assert request(server.http_port, "GET", "/v2/health/live")[0] == 200


def test_unknown_request_fields_are_accepted(client):
    got = client.completions.create(model="parrot", prompt="a b", extra_body={"frobnicate": True, "top_k": 3})
    assert got.choices[0].text == "a b"


def test_wrong_method_and_unknown_path_are_openai_shaped(server):
    code, headers, raw = request(server.http_port, "GET", COMPLETIONS)
    assert code == 405 and json.loads(raw)["error"]["code"] == "405"
    code, headers, raw = request(server.http_port, "GET", "/openai/v1/nothing")
    assert_openai_error((code, headers, json.loads(raw)), 404, "no route for GET /openai/v1/nothing")


# --- streams on the wire -----------------------------------------------------------------------------------
def test_raw_sse_framing_with_kserve_strings_and_framed_objects(server):
    for doc in ({"model": "parrot", "prompt": "a b c", "stream": True},
                {"model": "objects", "prompt": "ab", "stream": True},
                {"model": "objects", "prompt": "json-strings", "stream": True}):
        status, headers, raw = request(server.http_port, "POST", COMPLETIONS, json.dumps(doc).encode(),
                                       {"Content-Type": "application/json", "x-request-id": "sse-1"})
        assert status == 200 and headers["content-type"] == "text/event-stream", raw
        assert headers["x-request-id"] == "sse-1" and headers["cache-control"] == "no-cache"
        events = sse_data(raw)
        assert events[-1] == "[DONE]" and events.count("[DONE]") == 1, events  # the model's own is not doubled
        assert all(json.loads(e)["object"] == "text_completion" for e in events[:-1])


def test_one_answer_to_a_stream_request_is_its_only_event(server):
    status, headers, raw = request(server.http_port, "POST", COMPLETIONS,
                                   json.dumps({"model": "objects", "prompt": "whoami", "stream": True}).encode(),
                                   {"Content-Type": "application/json"})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    events = sse_data(raw)
    assert len(events) == 2 and events[1] == "[DONE]"
    assert json.loads(events[0])["object"] == "text_completion" and headers["x-model-header"] == "objects"


def test_a_stream_survives_gzip(server):
    doc = {"model": "parrot", "prompt": "x " * 300, "max_tokens": 300, "stream": True}
    with httpx.Client() as http:
        got = http.post(server.url + COMPLETIONS, json=doc, headers={"Accept-Encoding": "gzip"})
    assert got.status_code == 200 and got.headers["content-encoding"] == "gzip"
    events = sse_data(got.content)  # httpx undid the gzip
    assert len(events) == 301 and events[-1] == "[DONE]"
    status, _, raw = request(server.http_port, "POST", COMPLETIONS, json.dumps(doc).encode(),
                             {"Content-Type": "application/json", "Accept-Encoding": "gzip"})
    assert status == 200 and sse_data(gzip.decompress(raw))[-1] == "[DONE]"


def test_an_error_mid_stream_is_the_last_event_before_done(server):
    status, _, raw = request(server.http_port, "POST", COMPLETIONS,
                             json.dumps({"model": "objects", "prompt": "midstream", "stream": True}).encode(),
                             {"Content-Type": "application/json"})
    assert status == 200
    events = sse_data(raw)
    assert json.loads(events[0])["choices"][0]["text"] == "one"
    assert json.loads(events[1]) == {"error": {"message": "the model failed after one chunk",
                                               "type": "BadRequestError", "param": None, "code": "400"}}
    assert events[2:] == ["[DONE]"]
    assert request(server.http_port, "GET", "/v2/health/live")[0] == 200


def test_a_client_leaving_mid_stream_cancels_the_generator_within_a_second(server):
    request_id = f"leave-{uuid.uuid4().hex}"
    marker = os.path.join(server.markers, request_id)
    sock = open_openai_stream(server.http_port, request_id)
    assert not os.path.exists(marker)  # the stream is still running
    sock.close()
    left = time.monotonic()
    eventually(lambda: os.path.exists(marker), timeout=5, interval=0.01,
               message="the model's generator was never closed")
    took = time.monotonic() - left
    assert took < 1.0, f"the generator was closed {took:.2f} s after the client left"
    with open(marker) as f:
        assert f.read() == "closed"


# --- what the model is handed ------------------------------------------------------------------------------
def test_raw_request_and_context(server):
    status, headers, body = post_json(server.http_port, COMPLETIONS, {"model": "objects", "prompt": "whoami"},
                                      {"x-custom": "yes", "x-request-id": "who-1"})
    assert status == 200 and headers["x-model-header"] == "objects" and headers["x-request-id"] == "who-1"
    about = json.loads(body["choices"][0]["text"])
    assert about == {"url": f"http://127.0.0.1:{server.http_port}{COMPLETIONS}", "path": COMPLETIONS,
                     "method": "POST", "client_host": "127.0.0.1", "header": "yes", "context_header": "yes",
                     "disconnected": False, "pydantic": True}


def test_raw_request_as_a_mapping_over_its_asgi_scope(server):
    """What KServe code reads of Starlette's Request: raw_request["..."], .scope, .state, the query, the
    headers in any case, the URL's parts, cookies, body() and json()."""
    doc = {"model": "objects", "prompt": "scope"}
    body = json.dumps(doc).encode()
    status, _, raw = request(server.http_port, "POST", COMPLETIONS + "?a=1&a=2&b=x%20y", body, {
        "Content-Type": "application/json", "X-Custom": "yes", "Cookie": "session=abc; theme=dark"})
    assert status == 200, raw
    seen = json.loads(json.loads(raw)["choices"][0]["text"])
    port = server.http_port
    assert seen == {
        "scope": {"type": "http", "method": "POST", "path": COMPLETIONS, "scheme": "http", "root_path": "",
                  "http_version": "1.1"},
        "query_string": "a=1&a=2&b=x%20y", "custom_header": [["x-custom", "yes"]], "client": ["127.0.0.1", True],
        "server": ["127.0.0.1", port], "upstream_headers": [False, True, {"x-up": "1"}],
        "state": ["u1", {"user": "u1"}, "'State' object has no attribute 'nobody'"], "mapping": True,
        "query_params": [{"a": "2", "b": "x y"}, ["1", "2"]], "headers": ["yes", "yes", True, None],
        "repeated": [[], [], 1],
        "url": [COMPLETIONS, "a=1&a=2&b=x%20y", "127.0.0.1", port, "http", False, f"http://127.0.0.1:{port}/"],
        "cookies": {"session": "abc", "theme": "dark"}, "body_model": "objects", "body": len(body),
        "client_host": "127.0.0.1"}


def test_a_repeated_header_is_every_value_in_getlist_and_the_scope(server):
    """Two ``X-Repeated`` headers: ``headers.getlist`` and the scope's ``headers`` have both values, in
    order, as Starlette's; the x-request-id the server minted is there once."""
    body = json.dumps({"model": "objects", "prompt": "scope"}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port)) as s:
        s.sendall(f"POST {COMPLETIONS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"X-Repeated: one\r\nX-Custom: yes\r\nX-Repeated: two\r\nContent-Length: {len(body)}\r\n"
                  "Connection: close\r\n\r\n".encode() + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, doc = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    seen = json.loads(json.loads(doc)["choices"][0]["text"])
    assert seen["repeated"] == [["one", "two"], ["one", "two"], 1]


def test_raw_request_builds_its_scope_only_when_asked():
    from kserve_sdk.protocol.rest.openai.raw_request import Address, RawRequest

    asked = []
    raw = RawRequest(method="POST", scheme="http", host="h:1", path="/p%20q", query="", headers={"x-a": "1"},
                     body=b"{}", client=Address("127.0.0.1", 5), server=lambda: asked.append(1) or ("h", 1),
                     gone=lambda: False)
    assert raw.headers["X-A"] == "1" and raw.url == "http://h:1/p%20q" and raw.method == "POST"
    assert "scope" not in vars(raw) and asked == []  # nothing of the scope was made
    assert raw["path"] == "/p%20q".replace("%20", " ") and raw["raw_path"] == b"/p%20q" and asked == [1]
    assert raw["headers"] == [(b"x-a", b"1")] and raw["client"] == ("127.0.0.1", 5) and raw.scope is raw.scope
    assert raw.get("nope") is None and "nope" not in raw and raw != RawRequest(
        method="POST", scheme="http", host="h:1", path="/p%20q", query="", headers={"x-a": "1"}, body=b"{}",
        client=None, server=lambda: None, gone=lambda: False)


# --- lifecycle: metrics, access log ------------------------------------------------------------------------
def test_llm_and_request_metrics(client, server):
    before = scrape(server)
    client.completions.create(model="parrot", prompt="one two three four", max_tokens=3)
    list(client.chat.completions.create(model="parrot", max_tokens=2, stream=True,
                                        messages=[{"role": "user", "content": "hello there"}]))
    list(client.completions.create(model="objects", prompt="hey", stream=True))
    after = scrape(server)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("kserve_llm_prompt_tokens_total", model_name="parrot") == 4 + 3
    assert grew("kserve_llm_completion_tokens_total", model_name="parrot") == 3 + 2
    assert grew("kserve_llm_completion_tokens_total", model_name="objects") == 3
    assert grew("kserve_llm_first_chunk_seconds_count", model_name="parrot") == 1
    assert grew("kserve_llm_first_chunk_seconds_count", model_name="objects") == 1
    assert grew("kserve_llm_chunk_gap_seconds_count", model_name="objects") == 3  # four chunks, three gaps
    assert grew("kserve_requests_total", model_name="parrot", protocol="openai", endpoint="completions",
                status="200") == 1
    assert grew("kserve_requests_total", model_name="parrot", protocol="openai", endpoint="chat_completions",
                status="200") == 1
    assert grew("kserve_streams_total", model_name="objects", protocol="openai") == 1


def test_one_access_line_per_call_with_the_model(server):
    post_json(server.http_port, COMPLETIONS, {"model": "parrot", "prompt": "a"}, {"x-request-id": "acc-1"})
    post_json(server.http_port, COMPLETIONS, {"model": "nope", "prompt": "a"}, {"x-request-id": "acc-2"})
    log = server.log_with("ACCESS acc-2 ")
    lines = [line.split("ACCESS ", 1)[1] for line in log.splitlines() if "ACCESS acc-" in line]
    assert lines == ["acc-1 openai completions parrot 200", "acc-2 openai completions - 404"], lines


# --- beside v1, v2 and gRPC; models loaded later -----------------------------------------------------------
def test_v1_v2_and_grpc_keep_working(server):
    status, _, body = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1, 2]})
    assert status == 200 and body == {"predictions": [1, 2]}
    assert request(server.http_port, "GET", "/v2/models/echo/ready")[0] == 200
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert grpc.is_server_live() and grpc.is_model_ready("echo")
    finally:
        grpc.close()


def test_a_long_streams_gaps_are_all_counted(client, server):
    """A stream's chunk times are written to the gap histogram a few hundred at once and at its end: a
    stream of 600 words and [DONE] (601 items the model yields) counts 600 gaps, none twice."""
    before = scrape(server)
    words = " ".join(f"w{i}" for i in range(600))
    texts = [c.choices[0].text for c in client.completions.create(model="parrot", prompt=words, max_tokens=600,
                                                                   stream=True)]
    after = scrape(server)
    assert "".join(texts) == words

    def grew(name, **labels):
        return value(after, name, model_name="parrot", **labels) - value(before, name, model_name="parrot", **labels)

    assert grew("kserve_llm_chunk_gap_seconds_count") == 600
    assert grew("kserve_llm_chunk_gap_seconds_bucket", le="+Inf") == 600
    assert 0 < grew("kserve_llm_chunk_gap_seconds_sum") < 60


def test_a_chat_model_loaded_later_gets_its_routes(server, client):
    assert_openai_error(post_json(server.http_port, COMPLETIONS, {"model": "late-one", "prompt": "x"}), 404,
                        "Model with name late-one does not exist.")
    status, _, body = request(server.http_port, "POST", "/v2/repository/models/late-one/load", b"")
    assert status == 200, body
    for _ in range(4):  # with two workers, both answer
        got = client.chat.completions.create(model="late-one", messages=[{"role": "user", "content": "hi"}])
        assert got.model == "late-one" and got.choices[0].message.content == "user: hi"
    assert "late-one" in {m.id for m in client.models.list().data}


@pytest.fixture(scope="module", params=["1", "2"], ids=["workers1", "workers2"])
def v1_server(start_server, request):
    return start_server("tests/models/openai_models.py", "--workers", request.param, grpc=False,
                        env={"OPENAI_TEST_V1_ONLY": "1"})


def test_a_server_without_openai_models_has_no_openai_routes_until_one_is_loaded(v1_server):
    code, _, raw = request(v1_server.http_port, "GET", "/openai/v1/models")
    assert code == 404 and json.loads(raw)["error"]["message"] == "no route for GET /openai/v1/models"
    assert_openai_error(post_json(v1_server.http_port, COMPLETIONS, {"model": "echo", "prompt": "x"}), 404,
                        "no route for POST /openai/v1/completions")
    status, _, body = post_json(v1_server.http_port, "/v1/models/echo:predict", {"instances": ["pydantic"]})
    assert status == 200 and body == {"predictions": ["pydantic"]}
    status, _, body = request(v1_server.http_port, "POST", "/v2/repository/models/late-two/load", b"")
    assert status == 200, body
    for _ in range(4):
        status, _, body = post_json(v1_server.http_port, COMPLETIONS,
                                    {"model": "late-two", "prompt": "a b c", "max_tokens": 2})
        assert status == 200 and body["choices"][0]["text"] == "a b", body
    status, _, raw = request(v1_server.http_port, "GET", "/openai/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(raw)["data"]] == ["late-two"]
    # the model the routes were last found served by goes; another OpenAI model keeps them; then none does
    for path in ("/v2/repository/models/late-three/load", "/v2/repository/models/late-two/unload"):
        assert request(v1_server.http_port, "POST", path, b"")[0] == 200
    for _ in range(4):
        status, _, body = post_json(v1_server.http_port, COMPLETIONS,
                                    {"model": "late-three", "prompt": "d e", "max_tokens": 1})
        assert status == 200 and body["choices"][0]["text"] == "d", body
    assert request(v1_server.http_port, "POST", "/v2/repository/models/late-three/unload", b"")[0] == 200
    for _ in range(4):
        assert_openai_error(post_json(v1_server.http_port, COMPLETIONS, {"model": "late-three", "prompt": "x"}), 404,
                            "no route for POST /openai/v1/completions")


def test_a_plain_v1_v2_server_never_imports_pydantic(start_server):
    plain = start_server("tests/models/modules.py", grpc=False)
    assert request(plain.http_port, "GET", "/openai/v1/models")[0] == 404
    assert post_json(plain.http_port, COMPLETIONS, {"model": "modules", "prompt": "x"})[0] == 404
    status, _, body = post_json(plain.http_port, "/v1/models/modules:predict",
                                {"instances": ["pydantic", "kserve_sdk.protocol.rest.openai.types"]})
    assert status == 200 and body == {"predictions": [False, False]}, body


# --- the answers fit protocol/rest_v1.yaml -----------------------------------------------------------------
DOCUMENTED = [
    ("completion", COMPLETIONS, {"model": "parrot", "prompt": "a b"}, 200),
    ("chat", CHAT, {"model": "parrot", "messages": [{"role": "user", "content": "hi"}]}, 200),
    ("embeddings", "/openai/v1/embeddings", {"model": "hasher", "input": "a b"}, 200),
    ("rerank", "/openai/v1/rerank", {"model": "hasher", "query": "a", "documents": ["a", "b"]}, 200),
    ("bad-body", COMPLETIONS, {"model": "parrot", "prompt": "a", "max_tokens": "x"}, 400),
    ("unknown-model", CHAT, {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}, 404),
    ("not-ready", COMPLETIONS, {"model": "sleepy", "prompt": "a"}, 503),
    ("model-fault", COMPLETIONS, {"model": "objects", "prompt": "crash"}, 500),
]


@pytest.mark.parametrize("path,doc,status", [c[1:] for c in DOCUMENTED], ids=[c[0] for c in DOCUMENTED])
def test_answers_fit_the_openapi_document(server, path, doc, status):
    from kserve_sdk.handlers.docs import openapi_document

    document, body = openapi_document(), json.dumps(doc).encode()
    if status == 200:  # the others are wrong on purpose
        check_request(document, path, "post", body, "application/json")
    got, headers, raw = request(server.http_port, "POST", path, body, {"Content-Type": "application/json"})
    assert got == status, raw
    check_response(document, path, "post", status, headers, raw)
    for url, documented in [("/openai/v1/models", "/openai/v1/models"),
                            ("/openai/v1/models/parrot", "/openai/v1/models/{model_name}")]:
        got, headers, raw = request(server.http_port, "GET", url)
        check_response(document, documented, "get", got, headers, raw)


def test_the_route_prefix_comes_from_the_environment(start_server):
    moved = start_server("tests/models/openai_models.py", grpc=False, env={"KSERVE_OPENAI_ROUTE_PREFIX": "llm/"})
    with openai.OpenAI(base_url=f"{moved.url}/llm/v1", api_key="unused", max_retries=0, timeout=30) as moved_client:
        got = moved_client.completions.create(model="parrot", prompt="a b", max_tokens=1)
        assert got.choices[0].text == "a" and "parrot" in {m.id for m in moved_client.models.list().data}
    code, _, raw = request(moved.http_port, "GET", "/openai/v1/models")
    assert code == 404 and json.loads(raw) == {"error": "no route for GET /openai/v1/models"}
    code, headers, raw = request(moved.http_port, "GET", "/llm/v1/nothing")  # under the prefix: OpenAI's shape
    assert_openai_error((code, headers, json.loads(raw)), 404, "no route for GET /llm/v1/nothing")
