"""Models whose answers are computed by ``@kserve_sdk.batch`` steps, for tests/test_continuous_batching.py.

- ``counter``: streams the answer to a prompt one token per step (generate_stream, infer_stream, gRPC
  ModelStreamInfer). A row's state is (prompt, index, value); each step turns every live stream's state into
  its next state and token, so the answer depends only on the prompt, and a row given to the wrong stream shows.
  A prompt containing "boom" makes its third step return an Exception in that row's place. ``max_tokens``
  (parameters) sets the length, else it follows from the prompt. Steps cost 20 ms, at most 16 rows.
- ``ticker``: the same with 50 ms steps, for the join and leave timings; ``ticker-joins`` (v1) tells how many of
  its steps each stream waited for its first token.
- ``counter-chat``, ``ticker-chat``: OpenAI chat (adapter models) streaming ``counter``'s (``ticker``'s) answer,
  computed by that model's own steps, so SSE, gRPC and OpenAI streams share them.
- ``scaler``: a unary model whose plain ``def`` step (on a model thread) answers 3x+1 for each caller's INT64
  ``x``, with the size of the step that computed it (``rows``).
- ``wrong-length``, ``not-a-list`` (unary) and ``wrong-length-stream``, ``not-a-list-stream`` (streaming):
  steps that return one result too many, or a dict.

Each step's size is on /metrics (``kserve_batch_size{model_name, method="step"}``).
"""
import argparse
import asyncio
import time

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server
from kserve_sdk.protocol.rest.openai import ChatPrompt, OpenAIChatAdapterModel
from kserve_sdk.protocol.rest.openai.types import Completion, CompletionChoice, CompletionChunk, CompletionChunkChoice


def first_state(prompt):
    return prompt, 0, len(prompt)


def advance(state):
    """The next state of a stream and the token it answers."""
    prompt, index, value = state
    words = prompt.split() or ["."]
    word = words[index % len(words)]
    value = (value * 31 + sum(map(ord, word)) + index) % 997
    return (prompt, index + 1, value), f"{' ' if index else ''}{word}{value}"


def default_tokens(prompt):
    return 4 + len(prompt) % 5


def prompt_and_tokens(payload):
    """(prompt, how many tokens) of a generate body or a v2 request with one BYTES input."""
    if isinstance(payload, InferRequest):
        prompt, parameters = payload.inputs[0].as_string()[0], payload.parameters or {}
    else:
        prompt, parameters = payload["text_input"], payload.get("parameters", {})
    return prompt, int(parameters.get("max_tokens", default_tokens(prompt)))


def text_response(model, request_id, text, index):
    out = InferOutput("text_output", [1], "BYTES")
    out.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    idx = InferOutput("index", [1], "INT64")
    idx.set_data_from_numpy(np.array([index], dtype=np.int64))
    return InferResponse(response_id=request_id, model_name=model, infer_outputs=[out, idx])


class Counter(kserve.Model):
    """One token per step, every live stream's next token computed in the same step."""

    step_seconds = 0.02

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    @kserve.batch(max_batch_size=16, max_wait_ms=20)
    async def step(self, states):
        await asyncio.sleep(self.step_seconds)  # a step's fixed cost, whatever its size
        return [self.next_row(state) for state in states]

    @staticmethod
    def next_row(state):
        prompt, index, _ = state
        if "boom" in prompt and index == 2:
            return RuntimeError(f"boom at token {index} of {prompt!r}")
        return advance(state)

    async def tokens(self, prompt, count):
        """The answer's tokens, one step each."""
        state = first_state(prompt)
        for _ in range(count):
            state, token = await self.step(state)
            yield token

    async def predict(self, payload, headers=None):
        prompt, count = prompt_and_tokens(payload)
        index = 0
        async for token in self.tokens(prompt, count):
            if isinstance(payload, InferRequest):
                yield text_response(self.name, payload.id, token, index)
            else:
                yield {"text_output": token, "index": index}
            index += 1


class Ticker(Counter):
    """Counter with 50 ms steps, counting them: ``joins`` holds, per prompt, how many steps ended between its
    stream's start and its first token (the model's own measure of a late join, whatever the machine's load)."""

    step_seconds = 0.05

    def __init__(self, name):
        super().__init__(name)
        self.steps_done, self.joins = 0, {}

    @kserve.batch(max_batch_size=16, max_wait_ms=20)
    async def step(self, states):
        await asyncio.sleep(self.step_seconds)
        self.steps_done += 1
        return [self.next_row(state) for state in states]

    async def tokens(self, prompt, count):
        joined, first = self.steps_done, True
        async for token in super().tokens(prompt, count):
            if first:
                self.joins[prompt], first = self.steps_done - joined, False
            yield token


class TickerJoins(kserve.Model):
    """v1: the ticker's ``joins``."""

    def __init__(self, name, ticker):
        super().__init__(name)
        self.ticker, self.ready = ticker, True

    def predict(self, payload, headers=None):
        return {"joins": self.ticker.joins}


class CounterChat(OpenAIChatAdapterModel):
    """The counter's answer to the last message, over OpenAI chat, computed by the counter's steps."""

    def __init__(self, name, engine):
        super().__init__(name)
        self.engine = engine
        self.ready = True

    def apply_chat_template(self, request):
        return ChatPrompt(prompt=request.messages[-1]["content"], response_role="assistant")

    async def create_completion(self, request, raw_request=None, context=None):
        prompt = str(request.prompt)
        count = request.max_tokens or default_tokens(prompt)
        if not request.stream:
            text = "".join([token async for token in self.engine.tokens(prompt, count)])
            return Completion(id="cmpl-counter", model=self.name,
                              choices=[CompletionChoice(index=0, text=text, finish_reason="length")])
        return self.chunks(prompt, count)

    async def chunks(self, prompt, count):
        index = 0
        async for token in self.engine.tokens(prompt, count):
            index += 1
            yield CompletionChunk(id="cmpl-counter", model=self.name, choices=[CompletionChunkChoice(
                index=0, text=token, finish_reason="length" if index == count else None)])


class Scaler(kserve.Model):
    """Unary: each caller's x becomes 3x+1, computed in a step with the callers of the same moment."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    @kserve.batch(max_batch_size=8, max_wait_ms=50)
    def step(self, xs):
        time.sleep(0.05)  # on a model thread: a plain def does not hold the event loop
        return [(3 * x + 1, len(xs)) for x in xs]

    async def predict(self, payload, headers=None):
        x = int(payload.inputs[0].as_numpy().reshape(-1)[0])
        y, rows = await self.step(x)
        outputs = []
        for name, number in (("y", y), ("rows", rows)):
            out = InferOutput(name, [1], "INT64")
            out.set_data_from_numpy(np.array([number], dtype=np.int64))
            outputs.append(out)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=outputs)


class WrongLength(Scaler):
    """Its step returns one result more than it was given rows."""

    @kserve.batch(max_batch_size=8, max_wait_ms=5)
    async def step(self, xs):
        return [(x, 1) for x in xs] + [(0, 1)]


class NotAList(Scaler):
    """Its step returns a dict."""

    @kserve.batch(max_batch_size=8, max_wait_ms=5)
    async def step(self, xs):
        return {i: (x, 1) for i, x in enumerate(xs)}


class WrongLengthStream(Counter):
    @kserve.batch(max_batch_size=8, max_wait_ms=5)
    async def step(self, states):
        return [advance(state) for state in states] + [advance(states[0])]


class NotAListStream(Counter):
    @kserve.batch(max_batch_size=8, max_wait_ms=5)
    async def step(self, states):
        return {i: advance(state) for i, state in enumerate(states)}


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    counter, ticker = Counter("counter"), Ticker("ticker")
    kserve.ModelServer().start([
        counter, ticker, CounterChat("counter-chat", counter), CounterChat("ticker-chat", ticker), Scaler("scaler"),
        TickerJoins("ticker-joins", ticker),
        WrongLength("wrong-length"), NotAList("not-a-list"), WrongLengthStream("wrong-length-stream"),
        NotAListStream("not-a-list-stream")])
