"""Continuous batching: a character-level language model whose every live stream advances in one shared step.

``charlm`` is a small numpy network (the last 12 characters -> embeddings -> a tanh layer -> a score per
character) trained on corpus.txt when the server starts, a few seconds of plain gradient steps with a fixed
seed. It writes greedily, one character per step, the most likely next one, until the end of the line or
``max_tokens`` characters: the same prompt always gets the same answer.

Its step is ``@kserve_sdk.batch``: each stream calls ``await self.step(window)`` with its own last 12
characters and gets its own next character, while the server merges the calls of every stream waiting at
that moment into one call, computed as one matrix product over all their rows. Served two ways by one class:

  OpenAI  /openai/v1/completions, /openai/v1/chat/completions (streamed or not; a chat continues the text
          of its last user message)
  v2      POST /v2/models/charlm/generate_stream {"text_input": "...", "parameters": {"max_tokens": 80}}
          (and generate, infer_stream, gRPC ModelStreamInfer): one event per character

    python model.py --http_port 8080        # then see README.md
"""
# ruff: noqa: E402  (numpy is imported after the BLAS setting below)
import os

# This model's matrix products are small: BLAS threads cost more in waking and waiting than they save, most of
# all on a busy machine. Set before numpy loads (OPENBLAS_NUM_THREADS in the environment still wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import time
from typing import AsyncIterator, Dict, List, Optional, Sequence, Tuple

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse
from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.rest.openai import (
    ChatCompletionRequest,
    ChatPrompt,
    CompletionRequest,
    OpenAIChatAdapterModel,
)
from kserve_sdk.protocol.rest.openai.types import (
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    UsageInfo,
)

HERE = os.path.dirname(os.path.abspath(__file__))
END = "\n"  # a line of the corpus is one text: the model writes END where a text stops
DEFAULT_MAX_TOKENS = 256


class CharLM:
    """A character-level language model: the next character of a text from its last ``context`` characters."""

    def __init__(self, text: str, context: int = 12, embedding: int = 16, hidden: int = 256, seed: int = 0):
        self.context = context
        self.chars = sorted(set(text) | {END})
        self.index = {c: i for i, c in enumerate(self.chars)}
        rng = np.random.default_rng(seed)
        n, width = len(self.chars), context * embedding
        self.weights: Dict[str, np.ndarray] = {
            "embed": rng.standard_normal((n, embedding)) * 0.1,
            "w1": rng.standard_normal((width, hidden)) / np.sqrt(width), "b1": np.zeros(hidden),
            "w2": rng.standard_normal((hidden, n)) * (0.1 / np.sqrt(hidden)), "b2": np.zeros(n)}
        self.fit(*self.examples(text), rng)

    def encode(self, text: str) -> List[int]:
        """Character ids; a character the corpus does not have reads as a space."""
        space = self.index[" "]
        return [self.index.get(c, space) for c in text]

    def window(self, ids: Sequence[int]) -> Tuple[int, ...]:
        """The last ``context`` ids, after as many END as it takes (where a line starts)."""
        padded = [self.index[END]] * self.context + list(ids)
        return tuple(padded[-self.context:])

    def examples(self, text: str) -> Tuple[np.ndarray, np.ndarray]:
        """Every (window, next character) of every line: each line learnt as a text of its own."""
        windows, following = [], []
        for line in filter(None, (ln.strip() for ln in text.splitlines())):
            ids = self.encode(line + END)
            for i, next_id in enumerate(ids):
                windows.append(self.window(ids[:i]))
                following.append(next_id)
        return np.array(windows), np.array(following)

    def scores(self, windows: np.ndarray, weights: Optional[Dict[str, np.ndarray]] = None
               ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the inputs, the hidden layer, a score per character) of a batch of windows."""
        w = weights or self.weights
        inputs = w["embed"][windows].reshape(len(windows), -1)
        hidden = np.tanh(inputs @ w["w1"] + w["b1"])
        return inputs, hidden, hidden @ w["w2"] + w["b2"]

    def fit(self, windows: np.ndarray, following: np.ndarray, rng: np.random.Generator,
            epochs: int = 25, batch: int = 128, rate: float = 0.01) -> None:
        """Softmax cross-entropy, minimised with Adam over shuffled mini-batches (in float32: faster, and the
        answers are computed again in float64 at the end)."""
        w = {k: v.astype(np.float32) for k, v in self.weights.items()}
        mean = {k: np.zeros_like(v) for k, v in w.items()}
        square = {k: np.zeros_like(v) for k, v in w.items()}
        steps = 0
        for _ in range(epochs):
            order = rng.permutation(len(following))
            for start in range(0, len(order), batch):
                rows = order[start:start + batch]
                grads = self._gradients(w, windows[rows], following[rows])
                steps += 1
                for k, g in grads.items():
                    mean[k] = 0.9 * mean[k] + 0.1 * g
                    square[k] = 0.999 * square[k] + 0.001 * g * g
                    w[k] -= rate * (mean[k] / (1 - 0.9 ** steps)) / (np.sqrt(square[k] / (1 - 0.999 ** steps)) + 1e-8)
        self.weights = {k: v.astype(np.float64) for k, v in w.items()}

    def _gradients(self, w: Dict[str, np.ndarray], windows: np.ndarray, following: np.ndarray
                   ) -> Dict[str, np.ndarray]:
        inputs, hidden, scores = self.scores(windows, w)
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        probs[np.arange(len(following)), following] -= 1  # d(loss)/d(scores), summed over the batch
        d_scores = probs / len(following)
        d_hidden = (d_scores @ w["w2"].T) * (1 - hidden * hidden)
        d_inputs = (d_hidden @ w["w1"].T).reshape(windows.size, -1)
        # each character's embedding gets the sum over the places it appears at: a product with one-hot rows
        one_hot = np.eye(len(w["embed"]), dtype=d_inputs.dtype)[windows.ravel()]
        return {"embed": one_hot.T @ d_inputs, "w1": inputs.T @ d_hidden, "b1": d_hidden.sum(axis=0),
                "w2": hidden.T @ d_scores, "b2": d_scores.sum(axis=0)}

    def next_ids(self, windows: np.ndarray) -> np.ndarray:
        """The most likely next character of each window (rows of ``context`` ids), all in one product."""
        return np.argmax(self.scores(windows)[2], axis=1)


class CharChatModel(OpenAIChatAdapterModel, kserve.Model):
    """The character model behind the OpenAI routes (``OpenAIChatAdapterModel``) and the v2 and gRPC calls
    (``kserve.Model``, whose ``predict`` they call): one shared step for every stream of either."""

    def __init__(self, name: str, corpus: str, delay_ms: float = 10):
        super().__init__(name)
        self.corpus, self.delay = corpus, delay_ms / 1000
        self.lm: Optional[CharLM] = None
        self.load()

    def load(self) -> bool:
        started = time.perf_counter()
        with open(self.corpus) as f:
            self.lm = CharLM(f.read())
        print(f"model {self.name} trained on {self.corpus} in {time.perf_counter() - started:.1f} s", flush=True)
        self.ready = True
        return self.ready

    @kserve.batch(max_batch_size=64, max_wait_ms=2)
    async def step(self, windows: List[Tuple[int, ...]]) -> List[int]:
        """The next character id of every waiting stream, from its window: one matrix product for all."""
        next_ids = self.lm.next_ids(np.array(windows))
        if self.delay:  # a large model's step takes about as long for one row as for many
            await asyncio.sleep(self.delay)
        return next_ids.tolist()

    async def write(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """The characters that follow ``prompt``, one per step, up to the end of the line or ``max_tokens``."""
        lm = self.lm
        ids = lm.encode(prompt)
        for _ in range(max_tokens):
            next_id = await self.step(lm.window(ids))
            if lm.chars[next_id] == END:
                return
            ids.append(next_id)
            yield lm.chars[next_id]

    # --- OpenAI -------------------------------------------------------------------------------------------
    def apply_chat_template(self, request: ChatCompletionRequest) -> ChatPrompt:
        # the model knows no conversations: it goes on with the text of the last user message
        users = [m for m in request.messages if m.get("role") == "user"]
        if not users:
            raise InvalidInput("the conversation has no user message")
        return ChatPrompt(prompt=message_text(users[-1]), response_role="assistant")

    async def create_completion(self, request: CompletionRequest, raw_request=None, context=None):
        if not isinstance(request.prompt, str):
            raise InvalidInput("prompt must be a string: this model reads text, not token ids")
        max_tokens = checked_max_tokens(request.max_tokens)
        characters = self.write(request.prompt, max_tokens)
        if request.stream:
            return self._chunks(request, characters, max_tokens)
        text = "".join([c async for c in characters])
        return Completion(model=self.name, usage=usage(request.prompt, len(text)), choices=[CompletionChoice(
            index=0, text=text, finish_reason=finish_reason(len(text), max_tokens))])

    async def _chunks(self, request: CompletionRequest, characters: AsyncIterator[str],
                      max_tokens: int) -> AsyncIterator[CompletionChunk]:
        """One chunk per character; the last says why it stopped and carries the usage."""
        count = 0
        async for char in characters:
            count += 1
            yield CompletionChunk(id=request.request_id, model=self.name,
                                  choices=[CompletionChunkChoice(index=0, text=char)])
        yield CompletionChunk(id=request.request_id, model=self.name, usage=usage(request.prompt, count),
                              choices=[CompletionChunkChoice(index=0, text="",
                                                             finish_reason=finish_reason(count, max_tokens))])

    # --- v2: generate_stream, infer_stream, gRPC ModelStreamInfer ----------------------------------------------
    async def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):  # gRPC ModelStreamInfer, or a v2 tensor request
            prompt = payload.inputs[0].as_string()[0]
            params = payload.parameters or {}
        elif isinstance(payload, dict) and isinstance(payload.get("text_input"), str):
            prompt, params = payload["text_input"], payload.get("parameters") or {}
        else:
            raise InvalidInput('the request needs a "text_input" string')
        async for char in self.write(prompt, checked_max_tokens(params.get("max_tokens"))):
            if isinstance(payload, InferRequest):
                out = InferOutput("text_output", [1], "BYTES")
                out.set_data_from_numpy(np.array([char.encode()], dtype=np.object_))
                yield InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])
            else:
                yield {"text_output": char}


def checked_max_tokens(max_tokens: object) -> int:
    """``max_tokens`` as asked, or the default when not given."""
    if max_tokens is None:
        return DEFAULT_MAX_TOKENS
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInput(f"max_tokens must be a whole number of at least 1, not {max_tokens!r}")
    return max_tokens


def usage(prompt: str, completion_tokens: int) -> UsageInfo:
    """A token is a character."""
    return UsageInfo(prompt_tokens=len(prompt), completion_tokens=completion_tokens,
                     total_tokens=len(prompt) + completion_tokens)


def finish_reason(written: int, max_tokens: int) -> str:
    return "length" if written >= max_tokens else "stop"


def message_text(message: dict) -> str:
    """A message's text: its content, or the text parts of a content list."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content if part.get("type") == "text")


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--delay_ms", type=float, default=10,
                        help="a pause in every step, the time a large model's step would take")
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([CharChatModel("charlm", os.path.join(HERE, "corpus.txt"), args.delay_ms)])


if __name__ == "__main__":
    main()
