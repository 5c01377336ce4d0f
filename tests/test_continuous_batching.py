"""Step batching (``@kserve_sdk.batch``, issue 33) against a real server (tests/models/continuous.py) with real
clients: SSE read with httpx, ``tritonclient.grpc`` streams, the ``openai`` client, REST v2 and gRPC ModelInfer.
How the steps were batched is read from the server's ``kserve_batch_size`` histogram.

Timing bounds are in steps of the models' fixed step cost (``counter``: 20 ms, ``ticker``: 50 ms) with room for a
loaded two-core machine: "served from the next step" (a first chunk within two steps) is checked as the median of
three late streams' first chunks within 4 ticker steps, and the slowest within 6; a client that left may still
have its row in the step running when it left and in one more while the server notices the closed connection."""
import json
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import httpx
import numpy as np
import openai
import pytest
import tritonclient.grpc as tgrpc

from helpers import CHAT, eventually, post_json, post_json_raw, read_sse, request, scrape, sse_data, triton_error, value

SCRIPT = "tests/models/continuous.py"
COUNTER_MAX_BATCH = 16
TICKER_STEP_S = 0.05
LATE_FIRST_CHUNK_STEPS_AT_WORST = 12  # on the client's clock, for the slowest of three joins on a busy machine
LEFT_ROW_STEPS_AT_MOST = 2  # the step running when the client left, one more while the server notices it
PROTOCOLS = ["sse", "grpc", "chat"]


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(SCRIPT)


@pytest.fixture(scope="module")
def chat_client(server):
    with openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


# --- one stream, over each protocol ----------------------------------------------------------------------------
@dataclass
class Stream:
    """What one client received: (arrival time, text) of each chunk, then the error that ended it, if one did;
    ``after_error`` counts what still came after that error."""
    sent_at: float
    chunks: List[Tuple[float, str]] = field(default_factory=list)
    error: Optional[str] = None
    after_error: int = 0

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)

    @property
    def first_chunk_after(self) -> float:
        return self.chunks[0][0] - self.sent_at

    def add(self, at: float, text: Optional[str], error: Optional[str]) -> None:
        if self.error is not None:
            self.after_error += 1
        elif error is not None:
            self.error = error
        else:
            self.chunks.append((at, text))


def sse_stream(server, model: str, prompt: str, max_tokens: int) -> Stream:
    """generate_stream read with httpx as its events come."""
    stream = Stream(time.monotonic())
    body = {"text_input": prompt, "parameters": {"max_tokens": max_tokens}}
    _, events = read_sse(server.url, f"/v2/models/{model}/generate_stream", body)
    for at, event in events:
        stream.add(at, event.get("text_output"), event.get("error"))
    return stream


def grpc_stream(server, model: str, prompt: str, max_tokens: int, timeout: float = 30.0) -> Stream:
    """One request on a tritonclient ModelStreamInfer stream of its own, read until ``max_tokens`` chunks or an
    error; then the request stream is closed and whatever else the server sent is counted."""
    results: queue.Queue = queue.Queue()
    client = tgrpc.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((time.monotonic(), result, error)),
                        stream_timeout=timeout)
    stream, ended = Stream(time.monotonic()), False
    try:
        client.async_stream_infer(model, [text_input(prompt)], request_id=prompt,
                                  parameters={"max_tokens": max_tokens})
        deadline = time.monotonic() + timeout
        while len(stream.chunks) < max_tokens and stream.error is None:
            add_grpc_result(stream, *results.get(timeout=max(0.0, deadline - time.monotonic())))
        client.stop_stream()  # ends the request stream: the server finishes the call
        ended = True
        while not results.empty():
            add_grpc_result(stream, *results.get_nowait())
    finally:
        if not ended:
            client.stop_stream(cancel_requests=True)
        client.close()
    return stream


def text_input(prompt: str) -> tgrpc.InferInput:
    tensor = tgrpc.InferInput("text", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    return tensor


def add_grpc_result(stream: Stream, at: float, result, error) -> None:
    if error is not None:
        stream.add(at, None, error.message())
    else:
        stream.add(at, result.as_numpy("text_output")[0].decode(), None)


def chat_stream(client: openai.OpenAI, prompt: str, max_tokens: int, model: str = "counter") -> Stream:
    """A streamed chat completion of "<model>-chat" read with the openai client (an error event raises)."""
    stream = Stream(time.monotonic())
    try:
        for chunk in client.chat.completions.create(model=f"{model}-chat", max_tokens=max_tokens, stream=True,
                                                    messages=[{"role": "user", "content": prompt}]):
            stream.add(time.monotonic(), chunk.choices[0].delta.content, None)
    except openai.APIError as e:
        stream.add(time.monotonic(), None, e.message)
    return stream


def run_stream(protocol: str, server, chat_client, prompt: str, max_tokens: int, model: str = "counter") -> Stream:
    if protocol == "sse":
        return sse_stream(server, model, prompt, max_tokens)
    if protocol == "grpc":
        return grpc_stream(server, model, prompt, max_tokens)
    return chat_stream(chat_client, prompt, max_tokens, model)


def run_together(calls: List, width: Optional[int] = None) -> List:
    """Run every call at once (threads released together by a barrier); their results in order."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait(timeout=30)
        return call()

    with ThreadPoolExecutor(width or len(calls)) as pool:
        return list(pool.map(run, calls))


_alone: Dict[Tuple[str, int], Stream] = {}


def alone(server, prompt: str, max_tokens: int) -> Stream:
    """What the counter answers the prompt when its stream is the only one (over SSE, asked once)."""
    if (prompt, max_tokens) not in _alone:
        _alone[(prompt, max_tokens)] = sse_stream(server, "counter", prompt, max_tokens)
    return _alone[(prompt, max_tokens)]


# --- how the steps were batched --------------------------------------------------------------------------------
def step_sizes(server, model: str) -> Dict[str, float]:
    """The ``kserve_batch_size`` histogram of the model's ``step``: {bucket bound: steps of at most that many
    rows, "count": steps, "sum": rows}."""
    samples = scrape(server)
    labels = {"model_name": model, "method": "step"}
    sizes = {bound: value(samples, "kserve_batch_size_bucket", le=bound, **labels)
             for bound in ("1.0", "2.0", "4.0", "8.0", "16.0", "32.0")}
    sizes["count"] = value(samples, "kserve_batch_size_count", **labels)
    sizes["sum"] = value(samples, "kserve_batch_size_sum", **labels)
    return sizes


def since(before: Dict[str, float], after: Dict[str, float]) -> Dict[str, float]:
    return {key: after[key] - before[key] for key in after}


def steps_between(sizes: Dict[str, float], low: str, high: str) -> float:
    """Steps of more than ``low`` and at most ``high`` rows."""
    return sizes[high] - sizes[low]


# --- many streams at once --------------------------------------------------------------------------------------
def test_33_streams_over_sse_grpc_and_chat_answer_as_alone_in_shared_steps(server, chat_client):
    plan = [(protocol, f"{protocol} stream {i} of many", 4 + i % 5) for i in range(11) for protocol in PROTOCOLS]
    expected = {prompt: alone(server, prompt, tokens) for _, prompt, tokens in plan}
    assert all(s.error is None and len(s.chunks) == tokens for (_, prompt, tokens), s in
               zip(plan, expected.values(), strict=True))
    before = step_sizes(server, "counter")
    streams = run_together([lambda p=p, q=q, t=t: run_stream(p, server, chat_client, q, t) for p, q, t in plan])
    steps = since(before, step_sizes(server, "counter"))

    for (protocol, prompt, tokens), stream in zip(plan, streams, strict=True):
        assert stream.error is None and stream.after_error == 0, (protocol, prompt, stream)
        assert len(stream.chunks) == tokens, (protocol, prompt, stream.chunks)
        assert stream.text == expected[prompt].text, (protocol, prompt)
    assert steps["sum"] == sum(tokens for _, _, tokens in plan), steps  # one row per chunk sent, none lost
    assert steps["16.0"] == steps["count"], f"a step held more than max_batch_size={COUNTER_MAX_BATCH} rows: {steps}"
    assert steps["1.0"] < steps["count"], f"no step held more than one row: {steps}"
    assert steps["8.0"] < steps["count"], f"no step held more than 8 of the 33 streams: {steps}"
    assert steps["count"] < steps["sum"] / 4, f"steps were hardly shared: {steps}"


# --- a stream joining and a stream leaving ---------------------------------------------------------------------
class Background:
    """``n`` long SSE streams of the ticker, read in threads until the block ends (their clients then leave)."""

    def __init__(self, server, n: int, max_tokens: int = 100):
        self.server, self.n, self.max_tokens = server, n, max_tokens
        self.received = [0] * n
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(n)

    def __enter__(self) -> "Background":
        self.futures = [self.pool.submit(self.read, i) for i in range(self.n)]
        eventually(lambda: min(self.received) >= 2, timeout=15, message="the background streams did not start")
        return self

    def read(self, i: int) -> None:
        body = {"text_input": f"background {i}", "parameters": {"max_tokens": self.max_tokens}}
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", f"{self.server.url}/v2/models/ticker/generate_stream", json=body) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        assert "error" not in json.loads(line[len("data: "):]), line
                        self.received[i] += 1
                    if self.stop.is_set():
                        return

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for future in self.futures:
            future.result(timeout=30)
        self.pool.shutdown()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_joining_late_is_served_from_the_next_step(server, chat_client, protocol):
    with Background(server, 4):
        before = step_sizes(server, "ticker")
        waits = []
        for i in range(3):
            time.sleep(TICKER_STEP_S * (0.3 + 0.3 * i))  # joining at different points of a running step
            stream = run_stream(protocol, server, chat_client, f"late {i}", 2, model="ticker")
            assert stream.error is None and len(stream.chunks) == 2, stream
            waits.append(stream.first_chunk_after)
        steps = since(before, step_sizes(server, "ticker"))
    # the model's own count: the step running when a stream joins, then its own (a load-proof measure; the
    # client's clock also holds its stream's set-up, which a busy machine stretches)
    joins = post_json(server.http_port, "/v1/models/ticker-joins:predict", {"instances": []})[2]["joins"]
    late = {prompt: steps for prompt, steps in joins.items() if prompt.startswith("late ")}
    assert len(late) == 3 and max(late.values()) <= 2, f"steps before the first token: {late}"
    # the background streams run 100 steps: a late stream kept out of their steps waits seconds
    assert max(waits) < LATE_FIRST_CHUNK_STEPS_AT_WORST * TICKER_STEP_S, f"first chunks after {waits} s"
    assert steps_between(steps, "4.0", "8.0") >= 3, steps  # the late rows joined the four running ones


@pytest.mark.parametrize("protocol", ["sse", "grpc"])
def test_a_stream_whose_client_leaves_frees_its_row_within_one_step(server, protocol):
    with Background(server, 4):
        leaver = open_leaver(server, protocol)
        try:
            leaver.read_chunks(3)  # it runs in the four's steps: steps of five rows
        finally:
            leaver.leave()
        before = step_sizes(server, "ticker")

        def four_row_steps_follow() -> Dict[str, float]:
            steps = since(before, step_sizes(server, "ticker"))
            assert steps_between(steps, "2.0", "4.0") >= 3, steps
            return steps

        steps = eventually(four_row_steps_follow, timeout=10)
        assert steps_between(steps, "4.0", "8.0") <= LEFT_ROW_STEPS_AT_MOST, steps
        assert steps_between(steps, "8.0", "32.0") == 0, steps


class Leaver:
    """A long ticker stream read chunk by chunk from the test's thread, left mid-stream."""

    def read_chunks(self, n: int) -> None:
        raise NotImplementedError

    def leave(self) -> None:
        raise NotImplementedError


class SSELeaver(Leaver):
    def __init__(self, server):
        self.client = httpx.Client(timeout=30)
        body = {"text_input": "leaver", "parameters": {"max_tokens": 100}}
        self.response = self.client.send(self.client.build_request(
            "POST", f"{server.url}/v2/models/ticker/generate_stream", json=body), stream=True)
        assert self.response.status_code == 200
        self.lines = self.response.iter_lines()

    def read_chunks(self, n: int) -> None:
        while n:
            if next(self.lines).startswith("data: "):
                n -= 1

    def leave(self) -> None:
        self.response.close()
        self.client.close()


class GRPCLeaver(Leaver):
    def __init__(self, server):
        self.results: queue.Queue = queue.Queue()
        self.client = tgrpc.InferenceServerClient(server.grpc_url)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)), stream_timeout=30)
        self.client.async_stream_infer("ticker", [text_input("leaver")], parameters={"max_tokens": 100})

    def read_chunks(self, n: int) -> None:
        for _ in range(n):
            result, error = self.results.get(timeout=10)
            assert error is None, error

    def leave(self) -> None:
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def open_leaver(server, protocol: str) -> Leaver:
    return SSELeaver(server) if protocol == "sse" else GRPCLeaver(server)


# --- a row that fails ------------------------------------------------------------------------------------------
def test_a_row_that_raises_fails_its_stream_alone_with_the_error_last(server, chat_client):
    plan = [(protocol, f"{kind} {protocol} row", 6) for protocol in PROTOCOLS for kind in ("boom", "fine", "calm")]
    expected = {prompt: alone(server, prompt, tokens) for _, prompt, tokens in plan}
    streams = run_together([lambda p=p, q=q, t=t: run_stream(p, server, chat_client, q, t) for p, q, t in plan])
    for (protocol, prompt, _), stream in zip(plan, streams, strict=True):
        if prompt.startswith("boom"):
            assert len(stream.chunks) == 2 and stream.text == expected[prompt].text, (protocol, stream)
            assert stream.error is not None and f"boom at token 2 of '{prompt}'" in stream.error, (protocol, stream)
            assert "RuntimeError" in stream.error, stream.error
            assert stream.after_error == 0, (protocol, stream)
        else:
            assert stream.error is None and len(stream.chunks) == 6, (protocol, stream)
            assert stream.text == expected[prompt].text, (protocol, prompt)


def test_the_failed_rows_error_is_the_chat_streams_last_event_before_done(server):
    status, _, raw = post_json_raw(server.http_port, CHAT, {
        "model": "counter-chat", "stream": True, "max_tokens": 6,
        "messages": [{"role": "user", "content": "boom on the wire"}]}, timeout=10)
    assert status == 200
    events = sse_data(raw)
    assert [json.loads(e)["choices"][0]["delta"]["content"] for e in events[:2]] == \
        alone_tokens(server, "boom on the wire", 2)
    assert json.loads(events[2]) == {"error": {
        "message": "RuntimeError : boom at token 2 of 'boom on the wire' (model 'counter-chat')",
        "type": "InternalServerError", "param": None, "code": "500"}}
    assert events[3:] == ["[DONE]"]


def alone_tokens(server, prompt: str, max_tokens: int) -> List[str]:
    return [text for _, text in alone(server, prompt, max_tokens).chunks]


# --- unary calls -----------------------------------------------------------------------------------------------
def rest_scale(server, x: int) -> Tuple[int, int]:
    status, _, body = post_json_raw(server.http_port, "/v2/models/scaler/infer", {
        "id": f"caller-{x}", "inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [x]}]}, timeout=10)
    assert status == 200, body
    doc = json.loads(body)
    assert doc["id"] == f"caller-{x}"
    outputs = {o["name"]: o["data"][0] for o in doc["outputs"]}
    return outputs["y"], outputs["rows"]


def grpc_scale(server, x: int) -> Tuple[int, int]:
    with tgrpc.InferenceServerClient(server.grpc_url) as client:
        tensor = tgrpc.InferInput("x", [1], "INT64")
        tensor.set_data_from_numpy(np.array([x], dtype=np.int64))
        result = client.infer("scaler", [tensor], request_id=f"caller-{x}", client_timeout=10)
    assert result.get_response().id == f"caller-{x}"
    return int(result.as_numpy("y")[0]), int(result.as_numpy("rows")[0])


@pytest.mark.parametrize("call", [rest_scale, grpc_scale], ids=["rest", "grpc"])
def test_concurrent_unary_calls_are_merged_and_each_gets_its_own_row(server, call):
    before = step_sizes(server, "scaler")
    shared = 0
    for round_ in range(5):  # the callers of a round meet in one step unless the machine spreads them out
        xs = [round_ * 100 + i for i in range(8)]
        answers = run_together([lambda x=x: call(server, x) for x in xs])
        assert [y for y, _ in answers] == [3 * x + 1 for x in xs]
        assert all(1 <= rows <= 8 for _, rows in answers), answers
        shared += sum(rows > 1 for _, rows in answers)
        if shared >= 4:
            break
    assert shared >= 4, "concurrent calls were not merged into shared steps"
    steps = since(before, step_sizes(server, "scaler"))
    assert steps["1.0"] < steps["count"] and steps["8.0"] == steps["count"], steps
    assert steps["sum"] == 8 * (round_ + 1), steps


# --- bad use ---------------------------------------------------------------------------------------------------
BAD_STEPS = [("wrong-length", "@batch method step() returned 2 results for 1 rows: it must return one result "
                              "per row, in order"),
             ("not-a-list", "@batch method step() returned dict, not a list of 1 results")]


@pytest.mark.parametrize("model,problem", BAD_STEPS)
def test_a_bad_step_fails_a_rest_call_with_500_naming_the_method(server, model, problem):
    status, _, body = post_json_raw(server.http_port, f"/v2/models/{model}/infer", {
        "inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]}, timeout=10)
    assert status == 500, body
    assert f"model '{model}': {problem}" in json.loads(body)["error"]
    assert request(server.http_port, "GET", "/v2/health/live")[0] == 200


@pytest.mark.parametrize("model,problem", BAD_STEPS)
def test_a_bad_step_fails_a_grpc_call_with_internal_naming_the_method(server, model, problem):
    tensor = tgrpc.InferInput("x", [1], "INT64")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int64))
    with tgrpc.InferenceServerClient(server.grpc_url) as client:
        status, message = triton_error(client.infer, model, [tensor], client_timeout=10)
    assert status == "StatusCode.INTERNAL"
    assert f"model '{model}': {problem}" in message


@pytest.mark.parametrize("model,problem", BAD_STEPS)
def test_a_bad_step_fails_an_sse_stream_with_500_before_its_first_event(server, model, problem):
    response = httpx.post(f"{server.url}/v2/models/{model}-stream/generate_stream", timeout=10,
                          json={"text_input": "x", "parameters": {"max_tokens": 3}})
    assert response.status_code == 500, response.text
    assert f"model '{model}-stream': {problem}" in response.json()["error"]


@pytest.mark.parametrize("model,problem", BAD_STEPS)
def test_a_bad_step_ends_a_grpc_stream_with_its_error(server, model, problem):
    stream = grpc_stream(server, f"{model}-stream", "x", 3, timeout=10)
    assert stream.chunks == [] and stream.after_error == 0, stream
    assert f"model '{model}-stream': {problem}" in stream.error
