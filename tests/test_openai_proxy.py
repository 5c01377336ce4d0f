"""OpenAIProxyModel in front of a second kserve_sdk server acting as the upstream OpenAI server.

tests/models/openai_upstream.py serves echo models; tests/models/openai_proxy.py serves proxies of
them (and of an address nothing listens on). Both are real servers on free loopback ports, queried
with the real `openai` client and raw HTTP: completions and chat, streamed and not, the hooks, the
upstream's 4xx passed through with its body, upstream down 503, upstream too slow 504, an answer
that is not OpenAI's 502 — each with its status and message; an upstream whose answers hold null in
their optional fields (as OpenAI's API and LitServe write them) read through the validating proxy.
"""
import json

import openai
import pytest

from helpers import free_port, post_json_raw, sse_data

PROMPT = "hello there world"
ECHO = "echo: hello there world"


@pytest.fixture(scope="module")
def upstream(start_server):
    return start_server("tests/models/openai_upstream.py", "--names", "echo,echo-fast,hooked,impatient", grpc=False)


@pytest.fixture(scope="module")
def dead_url():
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def proxy(start_server, upstream, dead_url):
    return start_server("tests/models/openai_proxy.py", "--upstream", upstream.url, "--dead", dead_url, grpc=False)


def client(server) -> openai.OpenAI:
    # no retries: a 503 or 504 must be seen once, as the server sent it
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key="none", max_retries=0, timeout=30)


def error_of(exc_info) -> dict:
    """The OpenAI error object of an openai.APIStatusError."""
    return exc_info.value.response.json()["error"]


# --- answers through the proxy ------------------------------------------------------------------------
def test_completion(proxy):
    done = client(proxy).completions.create(model="echo", prompt=PROMPT, extra_headers={"x-request-id": "px-1"})
    assert done.object == "text_completion" and done.model == "echo"
    assert done.choices[0].text == ECHO and done.choices[0].finish_reason == "stop"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (3, 4, 7)
    assert done.system_fingerprint == "px-1"  # the request id went on to the upstream


def test_completion_stream(proxy):
    chunks = list(client(proxy).completions.create(model="echo", prompt=PROMPT, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == ECHO
    assert {c.object for c in chunks} == {"text_completion"}
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.total_tokens == 7
    assert len(chunks) == 5  # one per word, then the last


def test_chat(proxy):
    done = client(proxy).chat.completions.create(model="echo", messages=[{"role": "user", "content": PROMPT}])
    assert done.object == "chat.completion"
    assert done.choices[0].message.role == "assistant" and done.choices[0].message.content == ECHO
    assert done.usage.completion_tokens == 4


def test_chat_stream(proxy):
    chunks = list(client(proxy).chat.completions.create(model="echo", stream=True,
                                                        messages=[{"role": "user", "content": PROMPT}]))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ECHO
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("model", ["echo", "echo-fast"])
def test_stream_framing(proxy, model):
    """Re-framed (echo) or passed through (echo-fast): text/event-stream, `data: ` events, [DONE] last."""
    status, headers, body = post_json_raw(proxy.http_port, "/openai/v1/completions",
                                          {"model": model, "prompt": PROMPT, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_data(body)  # every event a `data: ` line
    assert events[-1] == "[DONE]"
    docs = [json.loads(e) for e in events[:-1]]
    assert "".join(d["choices"][0]["text"] for d in docs) == ECHO and docs[-1]["model"] == model


def test_hooks(proxy):
    """Each of the six hooks ran: the prompt upper-cased on the way out, "!" on the way back."""
    c = client(proxy)
    done = c.completions.create(model="hooked", prompt=PROMPT)
    assert done.choices[0].text == "echo: HELLO THERE WORLD!"
    assert done.system_fingerprint == "set-by-the-hook"  # raw_request["upstream_headers"] went upstream
    chunks = list(c.completions.create(model="hooked", prompt=PROMPT, stream=True))
    assert "".join(x.choices[0].text for x in chunks) == "echo:! HELLO! THERE! WORLD!"
    assert {x.system_fingerprint for x in chunks} == {"set-by-the-hook"}
    chat = c.chat.completions.create(model="hooked", messages=[{"role": "user", "content": PROMPT}])
    assert chat.choices[0].message.content == "echo: HELLO THERE WORLD!"
    chunks = c.chat.completions.create(model="hooked", messages=[{"role": "user", "content": PROMPT}], stream=True)
    assert "".join(x.choices[0].delta.content or "" for x in chunks) == "echo:! HELLO! THERE! WORLD!"


def test_models_and_health(proxy):
    assert {m.id for m in client(proxy).models.list()} == {
        "echo", "echo-fast", "hooked", "ghost", "down", "down-health", "impatient", "nully", "junk"}
    assert client(proxy).models.retrieve("echo").id == "echo"


# --- null in the upstream's optional fields ---------------------------------------------------------------
def test_nulls_in_the_upstreams_answers_read_as_the_fields_defaults(proxy):
    """`"tool_calls": null`, `"logprobs": {"tokens": null, ...}`: validated, not refused as a 502."""
    c = client(proxy)
    done = c.completions.create(model="nully", prompt=PROMPT)
    assert done.choices[0].text == PROMPT and done.usage.total_tokens == 6
    assert done.choices[0].logprobs.tokens == [] and done.choices[0].logprobs.token_logprobs == []
    chat = c.chat.completions.create(model="nully", messages=[{"role": "user", "content": PROMPT}])
    message = chat.choices[0].message
    assert (message.content, message.tool_calls, message.refusal) == (PROMPT, [], None)
    assert chat.choices[0].logprobs is None and chat.usage.completion_tokens == 3


def test_nulls_in_the_upstreams_chunks_read_as_the_fields_defaults(proxy):
    c = client(proxy)
    chunks = list(c.chat.completions.create(model="nully", stream=True,
                                            messages=[{"role": "user", "content": PROMPT}]))
    pieces = [x for x in chunks if x.choices]
    assert [x.choices[0].delta.content for x in pieces] == [*PROMPT.split(), None]  # the stop's "delta": null
    assert [x.choices[0].finish_reason for x in pieces] == [None, None, None, "stop"]
    assert {x.object for x in chunks} == {"chat.completion.chunk"} and chunks[-1].usage.total_tokens == 6
    assert all(x.choices[0].delta.tool_calls == [] for x in pieces)
    first = pieces[0].choices[0].logprobs.content[0]
    assert (first.token, first.logprob, first.top_logprobs, first.bytes) == ("hello", -0.5, [], None)
    chunks = list(c.completions.create(model="nully", prompt=PROMPT, stream=True))
    assert "".join(x.choices[0].text for x in chunks if x.choices) == "hellothereworld"
    assert all(x.choices[0].logprobs.tokens == [] for x in chunks if x.choices)


def test_nulls_on_the_wire_of_a_proxied_stream(proxy):
    """The raw events: every chunk re-framed, none an error event, [DONE] last."""
    status, headers, body = post_json_raw(proxy.http_port, "/openai/v1/chat/completions", {
        "model": "nully", "stream": True, "messages": [{"role": "user", "content": PROMPT}]})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_data(body)
    assert events[-1] == "[DONE]"
    docs = [json.loads(e) for e in events[:-1]]
    assert len(docs) == 5 and not any("error" in d for d in docs), docs
    assert docs[0]["choices"][0]["delta"] == {"role": "assistant", "content": "hello", "tool_calls": []}
    assert docs[3]["choices"][0]["finish_reason"] == "stop" and docs[3]["choices"][0]["delta"] == {"tool_calls": []}


# --- the upstream's errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_4xx_passed_through(proxy, upstream, stream):
    """The upstream's 400, status and OpenAI body, exactly as the upstream answered it."""
    doc = {"model": "echo", "prompt": PROMPT, "max_tokens": 500, "stream": stream}
    with pytest.raises(openai.BadRequestError) as e:
        client(proxy).completions.create(**doc)
    assert e.value.status_code == 400
    assert error_of(e) == {"message": "max_tokens must be at most 100, not 500", "type": "BadRequestError",
                           "param": "max_tokens", "code": "400"}
    direct = post_json_raw(upstream.http_port, "/openai/v1/completions", doc)
    assert direct[0] == 400 and json.loads(direct[2])["error"] == error_of(e)


def test_upstream_404_passed_through(proxy, upstream):
    with pytest.raises(openai.NotFoundError) as e:
        client(proxy).chat.completions.create(model="ghost", messages=[{"role": "user", "content": PROMPT}])
    status, _, body = post_json_raw(upstream.http_port, "/openai/v1/chat/completions",
                                    {"model": "ghost", "messages": [{"role": "user", "content": PROMPT}]})
    assert e.value.status_code == status == 404
    assert error_of(e) == json.loads(body)["error"] and "ghost" in error_of(e)["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_down_is_503(proxy, dead_url, stream):
    with pytest.raises(openai.APIStatusError) as e:
        client(proxy).completions.create(model="down", prompt=PROMPT, stream=stream)
    assert e.value.status_code == 503
    error = error_of(e)
    assert error["type"] == "ServiceUnavailableError" and error["code"] == "503"
    assert error["message"].startswith(f"cannot reach the upstream {dead_url}/v1/completions: "), error


def test_upstream_unhealthy_is_503(proxy):
    """With a health endpoint that does not answer, the model is not ready."""
    with pytest.raises(openai.APIStatusError) as e:
        client(proxy).chat.completions.create(model="down-health", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 503
    assert error_of(e)["message"] == "Model with name down-health is not ready."


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_slow_is_504(proxy, upstream, stream):
    with pytest.raises(openai.APIStatusError) as e:
        client(proxy).completions.create(model="impatient", prompt="slow", stream=stream)
    assert e.value.status_code == 504
    assert error_of(e) == {"message": f"the upstream {upstream.url}/openai/v1/completions sent nothing for 0.5s",
                           "type": "GatewayTimeout", "param": "", "code": "504"}


def test_upstream_stalling_mid_stream_ends_with_an_error_event(proxy, upstream):
    """The answer has started (200): the timeout arrives as the stream's last event."""
    status, _, body = post_json_raw(proxy.http_port, "/openai/v1/chat/completions", {
        "model": "impatient", "stream": True, "messages": [{"role": "user", "content": "stall"}]})
    assert status == 200
    events = sse_data(body)
    assert len(events) == 3 and events[-1] == "[DONE]"
    first = json.loads(events[0])
    assert first["choices"][0]["delta"]["content"] == "echo:"
    last = json.loads(events[1])
    assert last["error"]["message"] == f"the upstream {upstream.url}/openai/v1/chat/completions sent nothing for 0.5s"
    assert last["error"]["code"] == "504"


def test_answer_that_is_not_openai_is_502(proxy, upstream):
    with pytest.raises(openai.APIStatusError) as e:
        client(proxy).completions.create(model="junk", prompt=PROMPT)
    assert e.value.status_code == 502
    error = error_of(e)
    assert error["type"] == "BadGateway" and error["code"] == "502"
    assert error["message"].startswith("the upstream answered 404 without an OpenAI error: "), error


# --- more than one worker -------------------------------------------------------------------------------
def test_two_workers(start_server, upstream, dead_url):
    """Each worker process sends through connections of its own."""
    proxy = start_server("tests/models/openai_proxy.py", "--upstream", upstream.url, "--dead", dead_url,
                         "--workers", "2", grpc=False)
    c = client(proxy)
    for _ in range(4):  # enough for both workers to answer, whichever the kernel picks
        assert c.completions.create(model="echo", prompt=PROMPT).choices[0].text == ECHO
        chunks = c.chat.completions.create(model="echo-fast", stream=True,
                                           messages=[{"role": "user", "content": PROMPT}])
        assert "".join(x.choices[0].delta.content or "" for x in chunks) == ECHO


def test_the_upstream_connections_close_with_the_server(start_server, upstream, dead_url):
    """A stop after some traffic leaves no unclosed session or connector behind (aiohttp logs those)."""
    proxy = start_server("tests/models/openai_proxy.py", "--upstream", upstream.url, "--dead", dead_url, grpc=False)
    assert client(proxy).completions.create(model="echo", prompt=PROMPT).choices[0].text == ECHO
    proxy.stop()
    assert proxy.proc.returncode == 0
    log = proxy.log()
    assert "Model server stopped" in log and "Unclosed" not in log, log[-2000:]


def test_an_http_client_that_is_not_aiohttps_is_refused_when_the_model_is_made():
    import httpx

    from kserve_sdk.protocol.rest.openai import OpenAIProxyModel

    with pytest.raises(TypeError) as e:
        OpenAIProxyModel("m", "http://127.0.0.1:1", http_client=httpx.AsyncClient())
    assert str(e.value) == "the HTTP client must be an aiohttp.ClientSession, not AsyncClient"
