"""The OpenAI streaming model of openai_bench.py, written for KServe 0.21 and run unchanged on both:

    /tmp/bench-venvs/kserve-llm/bin/python hack/bench/openai_model.py --http_port 8080     # KServe + vllm
    .venv/bin/python -m kserve_sdk hack/bench/openai_model.py --http_port 8080             # kserve_sdk

``tok`` (an OpenAIGenerativeModel) streams token_source.tokens(prompt) through /openai/v1/completions and
/openai/v1/chat/completions, each token one chunk in KServe's contract (preformatted ``data:`` strings,
``[DONE]`` last); ``tok-gen`` (a plain Model, async-generator predict) streams the same tokens through
/v2/models/tok-gen/generate_stream, which only kserve_sdk serves.
"""
import time
import uuid

import kserve
import orjson
from kserve.protocol.rest.openai import OpenAIGenerativeModel
from token_source import tokens


def event(doc) -> str:
    return "data: " + orjson.dumps(doc).decode() + "\n\n"


class Tokens(OpenAIGenerativeModel):
    """Each token of the prompt's answer as one chunk; the last chunk says why it stopped."""

    async def create_completion(self, request, raw_request=None, context=None):
        return self._stream(str(request.prompt), "text_completion", lambda t: {"index": 0, "text": t})

    async def create_chat_completion(self, request, raw_request=None, context=None):
        prompt = request.messages[-1]["content"]
        return self._stream(prompt, "chat.completion.chunk", lambda t: {"index": 0, "delta": {"content": t}})

    async def _stream(self, prompt, kind, choice):
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()), "model": self.name}
        for token in tokens(prompt):
            yield event({**head, "choices": [choice(token)]})
        yield event({**head, "choices": [{**choice(""), "finish_reason": "stop"}]})
        yield "data: [DONE]\n\n"


class TokenStream(kserve.Model):
    """The same tokens over the Open Inference Protocol's generate_stream."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        for token in tokens(payload["text_input"]):
            yield token


if __name__ == "__main__":
    kserve.ModelServer().start([Tokens("tok"), TokenStream("tok-gen")])
