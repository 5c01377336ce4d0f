"""samples/continuous_batching served from this checkout: the numpy character model whose ``@kserve_sdk.batch``
step advances every live stream at once, queried with the real `openai` client (completions and chat, streamed
and not), over the v2 streams (SSE, generate, gRPC ModelStreamInfer), with its bad inputs and its client
scripts. Concurrent streams get the answers they get alone, and /metrics' ``kserve_batch_size`` shows that
their steps were shared.
"""
import concurrent.futures
import json
import os
import queue
import subprocess
import sys
import time

import numpy as np
import openai
import pytest
import tritonclient.grpc as tgrpc

from helpers import ROOT, assert_error_answer, post_json, post_json_raw, read_sse, scrape, value

SAMPLE = os.path.join(ROOT, "samples", "continuous_batching")
MODEL = "charlm"
# how the sample's README and output files say the model goes on with these
CONDUCTOR = " knows many of the passengers by name and asks about their families."
RIVER = " runs through the middle of the town and turns the wheel of the old mill."
PROMPTS = ["A river", "The ferryman", "A nurse", "When a new user", "A small machine", "The conductor", "Farmers carry",
           "The librarian"]


@pytest.fixture(scope="module")
def server(start_server):
    # a pause in each step, so that streams started together are live together
    return start_server("samples/continuous_batching/model.py", "--delay_ms", "5")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/openai/v1", api_key="none", max_retries=0, timeout=30)


def streamed_chat(client: openai.OpenAI, message: str) -> str:
    chunks = client.chat.completions.create(model=MODEL, stream=True, messages=[{"role": "user", "content": message}])
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def steps(server) -> dict:
    """How many steps the model's ``step`` ran, for how many rows, of one row and of at most 64 rows
    (kserve_batch_size), and how many rows wait for the next step now (kserve_batch_rows_waiting)."""
    samples = scrape(server)
    labels = dict(model_name=MODEL, method="step")
    return {"steps": value(samples, "kserve_batch_size_count", **labels),
            "rows": value(samples, "kserve_batch_size_sum", **labels),
            "one": value(samples, "kserve_batch_size_bucket", le="1.0", **labels),
            "up_to_64": value(samples, "kserve_batch_size_bucket", le="64.0", **labels),
            "waiting": value(samples, "kserve_batch_rows_waiting", **labels)}


def test_completion_continues_the_prompt(client):
    done = client.completions.create(model=MODEL, prompt="A river", max_tokens=100)
    assert done.object == "text_completion"
    assert done.choices[0].text == RIVER and done.choices[0].finish_reason == "stop"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (7, 73, 80)
    # OpenAI's default max_tokens for a completion: 16 characters
    short = client.completions.create(model=MODEL, prompt="A river")
    assert short.choices[0].text == RIVER[:16] and short.choices[0].finish_reason == "length"


def test_completion_streams_one_character_per_chunk(client):
    chunks = list(client.completions.create(model=MODEL, prompt="The conductor", max_tokens=100, stream=True))
    characters = [c.choices[0].text for c in chunks[:-1]]
    assert characters == list(CONDUCTOR)
    assert chunks[-1].choices[0].text == "" and chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (13, len(CONDUCTOR))


def test_chat_goes_on_with_the_last_user_message(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The baker"},
                {"role": "assistant", "content": "Yes?"}, {"role": "user", "content": "The conductor"}]
    done = client.chat.completions.create(model=MODEL, messages=messages)
    assert done.object == "chat.completion" and done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.role == "assistant" and done.choices[0].message.content == CONDUCTOR
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True, max_tokens=10))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CONDUCTOR[:10]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_concurrent_chats_share_steps_and_get_their_own_answers(server, client):
    alone = {prompt: streamed_chat(client, prompt) for prompt in PROMPTS}
    assert alone["The conductor"] == CONDUCTOR and len(set(alone.values())) == len(PROMPTS)
    before = steps(server)
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda prompt: streamed_chat(client, prompt), PROMPTS, timeout=60))
    assert together == [alone[prompt] for prompt in PROMPTS]
    after = steps(server)
    ran = {k: after[k] - before[k] for k in after}
    assert ran["rows"] == sum(len(answer) + 1 for answer in together)  # each character, and each line's end
    assert ran["steps"] < ran["rows"], ran  # steps computed many streams' rows at once
    assert ran["one"] < ran["steps"] and ran["up_to_64"] == ran["steps"], ran
    assert after["waiting"] == 0  # no row is left behind


def test_generate_stream_and_generate(server):
    _, events = read_sse(server.url, f"/v2/models/{MODEL}/generate_stream",
                         {"text_input": "A nurse", "parameters": {"max_tokens": 6}})
    assert [data for _, data in events] == [{"model_name": MODEL, "model_version": None, "text_output": c}
                                            for c in " going"]
    status, _, body = post_json(server.http_port, f"/v2/models/{MODEL}/generate", {"text_input": "A river"})
    assert status == 200 and body["text_output"] == RIVER


def test_grpc_stream_one_response_per_character(server):
    results: queue.Queue = queue.Queue()
    grpc = tgrpc.InferenceServerClient(server.grpc_url)
    grpc.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for request_id, prompt, max_tokens in (("nurse", "A nurse", 6), ("conductor", "The conductor", 8)):
            text = tgrpc.InferInput("text_input", [1], "BYTES")
            text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
            grpc.async_stream_infer(MODEL, [text], request_id=request_id, parameters={"max_tokens": max_tokens})
        got: dict = {}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < 14 and time.monotonic() < deadline:
            result, error = results.get(timeout=20)
            assert error is None, error
            got.setdefault(result.get_response().id, []).append(result.as_numpy("text_output")[0].decode())
    finally:
        grpc.stop_stream()
        grpc.close()
    assert {k: "".join(v) for k, v in got.items()} == {"nurse": " going", "conductor": CONDUCTOR[:8]}


@pytest.mark.parametrize("doc,message", [
    ({"text_input": "A river", "parameters": {"max_tokens": 0}}, "max_tokens must be a whole number of at least 1, "
                                                                 "not 0"),
    ({"text_input": "A river", "parameters": {"max_tokens": "many"}}, "max_tokens must be a whole number of at "
                                                                      "least 1, not 'many'"),
    ({"text": "A river"}, 'the request needs a "text_input" string'),
])
def test_bad_v2_requests_are_400(server, doc, message):
    for endpoint in ("generate", "generate_stream"):
        got = post_json_raw(server.http_port, f"/v2/models/{MODEL}/{endpoint}", doc)
        assert_error_answer(server.http_port, got, 400, message)


def test_bad_openai_requests_are_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "The conductor"}])
    assert e.value.response.json()["error"]["message"] == "the conversation has no user message"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[12, 40])
    assert e.value.response.json()["error"]["message"] == \
        "prompt must be a string: this model reads text, not token ids"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="A river", max_tokens=0, stream=True)
    assert e.value.response.json()["error"]["message"] == "max_tokens must be a whole number of at least 1, not 0"


def test_the_client_scripts_print_what_the_readme_says(server):
    def printed(*argv: str) -> str:
        return subprocess.run([sys.executable, *argv], cwd=SAMPLE, capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()

    for script, request, expected in (("chat_client.py", "input.json", "output.txt"),
                                      ("many_chats.py", "input-many.json", "output-many.txt")):
        with open(os.path.join(SAMPLE, expected)) as f:
            assert printed(script, "--url", server.url, request) == f.read().strip(), script
    with open(os.path.join(SAMPLE, "input-many.json")) as f:
        assert json.load(f)["messages"] == PROMPTS
