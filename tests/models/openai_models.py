"""OpenAI models written as KServe users write them (``kserve_sdk.protocol.rest.openai``), served beside a
v1 model; a repository loads ``late-<name>`` chat models on demand through ``/v2/repository``.

- ``parrot``: an OpenAIChatAdapterModel whose completion repeats the prompt's words, one streamed chunk per
  word in KServe's preformatted ``"data: ..."`` strings, ``[DONE]`` last.
- ``objects``: an OpenAIGenerativeModel streaming chunk objects and dicts, which the server frames; special
  prompts answer each kind of error, report the raw request (``whoami``) and what it reads of its ASGI scope
  (``scope``), or stream slowly and write a file named by
  the request's ``x-request-id`` into ``$OPENAI_TEST_MARKERS`` when its stream is closed early.
- ``kserve-style``: an adapter model whose ``create_completion`` takes no ``context``, as KServe's allow.
- ``hasher``: an OpenAIEncoderModel (word-count embeddings, word-overlap rerank).
- ``sleepy``: never ready. ``echo``: a v1 model (the only one with ``OPENAI_TEST_V1_ONLY`` set).
"""
import asyncio
import json
import os
import sys

import kserve_sdk as kserve
from kserve_sdk import ModelRepository
from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.rest.openai import (
    ChatPrompt,
    OpenAIChatAdapterModel,
    OpenAIEncoderModel,
    OpenAIError,
    OpenAIGenerativeModel,
)
from kserve_sdk.protocol.rest.openai.errors import create_error_response
from kserve_sdk.protocol.rest.openai.types import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    Embedding,
    EmbeddingResponseData,
    Error,
    ErrorResponse,
    Rerank,
    RerankDocument,
    RerankResult,
    RerankUsage,
    UsageInfo,
)


def usage(prompt_words, answer_words):
    return UsageInfo(prompt_tokens=prompt_words, completion_tokens=answer_words,
                     total_tokens=prompt_words + answer_words)


class Parrot(OpenAIChatAdapterModel):
    """Completes a prompt with its first ``max_tokens`` words, in order."""

    def apply_chat_template(self, request):
        lines = [f"{message['role']}: {message['content']}" for message in request.messages]
        return ChatPrompt(prompt=" ".join(lines), response_role="parrot")

    async def create_completion(self, request, raw_request=None, context=None):
        words = str(request.prompt).split()
        answer = words[:request.max_tokens]
        if not request.stream:
            return Completion(id="cmpl-parrot", model=self.name, usage=usage(len(words), len(answer)), choices=[
                CompletionChoice(index=0, text=" ".join(answer), finish_reason="length")])

        async def chunks():
            for i, word in enumerate(answer):
                last = i == len(answer) - 1
                chunk = CompletionChunk(id="cmpl-parrot", model=self.name, choices=[CompletionChunkChoice(
                    index=0, text=word if i == 0 else " " + word, finish_reason="length" if last else None)],
                    usage=usage(len(words), len(answer)) if last else None)
                yield f"data: {chunk.model_dump_json()}\n\n"
            yield "data: [DONE]\n\n"

        return chunks()


class KServeStyle(OpenAIChatAdapterModel):
    """Written for KServe's adapter: ``create_completion(request, raw_request=None)``, without ``context``."""

    def apply_chat_template(self, request):
        return ChatPrompt(prompt=request.messages[-1]["content"])

    async def create_completion(self, request, raw_request=None):
        return Completion(model=self.name, usage=usage(1, 1),
                          choices=[CompletionChoice(index=0, text=request.prompt[::-1], finish_reason="stop")])


def marker(raw_request, what):
    """Write ``what`` into the marker file of this request (named by its x-request-id)."""
    folder = os.environ.get("OPENAI_TEST_MARKERS")
    if folder:
        path = os.path.join(folder, raw_request.headers["x-request-id"])
        with open(path + ".tmp", "w") as f:
            f.write(what)
        os.replace(path + ".tmp", path)


class Objects(OpenAIGenerativeModel):
    """Streams chunk objects and dicts; its prompt (or last message) picks what it does."""

    async def create_completion(self, request, raw_request=None, context=None):
        prompt = str(request.prompt)
        failure = await self.fail_as(prompt, raw_request, context)
        if failure is not None:
            return failure
        if not request.stream:
            return {"id": "cmpl-objects", "object": "text_completion", "created": 1, "model": self.name,
                    "choices": [{"index": 0, "text": prompt.upper(), "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        return self.stream(prompt, request, raw_request)

    async def stream(self, prompt, request, raw_request):
        if prompt == "slow":
            try:
                for i in range(2000):  # at most 100 s; the test leaves after two chunks
                    yield CompletionChunk(model=self.name, choices=[CompletionChunkChoice(index=0, text=f"{i} ")])
                    await asyncio.sleep(0.05)
            except (GeneratorExit, asyncio.CancelledError):
                marker(raw_request, "closed")
                raise
            return
        if prompt == "json-strings":  # JSON text without the "data: " framing: the server frames it
            for letter in "xy":
                yield json.dumps({"id": "cmpl-j", "object": "text_completion", "model": self.name,
                                  "choices": [{"index": 0, "text": letter}]})
            return
        if prompt == "midstream":
            yield {"id": "cmpl-m", "model": self.name, "choices": [{"index": 0, "text": "one"}]}
            raise InvalidInput("the model failed after one chunk")
        for _i, letter in enumerate(prompt):
            yield {"id": "cmpl-objects", "object": "text_completion", "created": 1, "model": self.name,
                   "choices": [{"index": 0, "text": letter, "finish_reason": None}]}
        yield CompletionChunk(id="cmpl-objects", model=self.name,
                              choices=[CompletionChunkChoice(index=0, text="", finish_reason="stop")],
                              usage=usage(1, len(prompt)))

    async def create_chat_completion(self, request, raw_request=None, context=None):
        text = request.messages[-1]["content"]
        failure = await self.fail_as(text, raw_request, context)
        if failure is not None:
            return failure
        if not request.stream:
            return ChatCompletion(id="chatcmpl-objects", model=self.name, usage=usage(1, 1), choices=[
                ChatCompletionChoice(index=0, message=ChatMessage(role="assistant", content=text[::-1]))])

        async def chunks():
            for letter in text[::-1]:
                yield ChatCompletionChunk(id="chatcmpl-objects", model=self.name, choices=[
                    ChunkChoice(index=0, delta=ChoiceDelta(role="assistant", content=letter))])

        return chunks()

    async def fail_as(self, prompt, raw_request, context):
        """The answer of a prompt that asks for an error or the raw request; None for the others."""
        if prompt == "error-response":
            return ErrorResponse(error=Error(code="418", message="I am a teapot", param="prompt", type="Teapot"))
        if prompt == "openai-error":
            raise OpenAIError(create_error_response("slow down", "RateLimitError", status_code=429))
        if prompt == "openai-error-text":
            raise OpenAIError("a plain message")
        if prompt == "invalid":
            raise InvalidInput("the prompt is not acceptable")
        if prompt == "crash":
            return 1 / 0
        if prompt == "not-an-answer":
            return "just text"
        if prompt == "whoami":
            context["response"].headers["x-model-header"] = "objects"
            about = {"url": str(raw_request.url), "path": raw_request.url.path, "method": raw_request.method,
                     "client_host": raw_request.client.host, "header": raw_request.headers.get("x-custom"),
                     "context_header": context["headers"].get("x-custom"),
                     "disconnected": await raw_request.is_disconnected(), "pydantic": "pydantic" in sys.modules}
            return Completion(model=self.name, usage=usage(1, 1),
                              choices=[CompletionChoice(index=0, text=json.dumps(about))])
        if prompt == "scope":
            return Completion(model=self.name, usage=usage(1, 1),
                              choices=[CompletionChoice(index=0, text=json.dumps(await read_scope(raw_request)))])
        return None


async def read_scope(raw_request):
    """What KServe code reads of a Starlette request: its ASGI scope as a mapping, ``scope``, ``state``,
    the query, headers in any case, the URL's parts, cookies and the body."""
    before = "upstream_headers" in raw_request
    raw_request.scope["upstream_headers"] = {"x-up": "1"}  # as a hook does for OpenAIProxyModel
    raw_request.state.user = "u1"
    try:
        _ = raw_request.state.nobody
        missing = None
    except AttributeError as e:
        missing = str(e)
    scope = {key: raw_request[key] for key in ("type", "method", "path", "scheme", "root_path", "http_version")}
    return {
        "scope": scope, "query_string": raw_request["query_string"].decode(),
        "custom_header": [[k.decode(), v.decode()] for k, v in raw_request["headers"] if k == b"x-custom"],
        "client": [raw_request["client"][0], raw_request["client"][1] > 0], "server": list(raw_request["server"]),
        "upstream_headers": [before, "upstream_headers" in raw_request, raw_request.get("upstream_headers")],
        "state": [raw_request.state.user, raw_request["state"], missing], "mapping": "method" in set(raw_request),
        "query_params": [dict(raw_request.query_params), raw_request.query_params.getlist("a")],
        "headers": [raw_request.headers["X-Custom"], raw_request.headers.get("X-CUSTOM"),
                    "X-Custom" in raw_request.headers, raw_request.headers.get("x-absent")],
        "repeated": [raw_request.headers.getlist("X-Repeated"),
                     [v.decode() for k, v in raw_request["headers"] if k == b"x-repeated"],
                     len(raw_request.headers.getlist("x-request-id"))],
        "url": [raw_request.url.path, raw_request.url.query, raw_request.url.hostname, raw_request.url.port,
                raw_request.url.scheme, raw_request.url.is_secure, str(raw_request.base_url)],
        "cookies": raw_request.cookies, "body_model": (await raw_request.json())["model"],
        "body": len(await raw_request.body()), "client_host": raw_request.client.host,
    }


class Hasher(OpenAIEncoderModel):
    """Embeds a text as [words, letters, vowels]; ranks documents by the words they share with the query."""

    async def create_embedding(self, request, raw_request=None, context=None):
        texts = [request.input] if isinstance(request.input, str) else request.input
        data = [EmbeddingResponseData(index=i, embedding=[float(len(t.split())), float(len(t)),
                                                          float(sum(c in "aeiou" for c in t))])
                for i, t in enumerate(texts)]
        words = sum(len(t.split()) for t in texts)
        return Embedding(model=self.name, data=data, usage=UsageInfo(prompt_tokens=words, total_tokens=words))

    async def create_rerank(self, request, raw_request=None, context=None):
        query = set(request.query.lower().split())
        scores = [len(query & set(doc.lower().split())) / max(len(query), 1) for doc in request.documents]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[:request.top_n or None]
        return Rerank(id="rerank-1", model=self.name, usage=RerankUsage(total_tokens=len(query)), results=[
            RerankResult(index=i, document=RerankDocument(text=request.documents[i]), relevance_score=scores[i])
            for i in order])


class Sleepy(Parrot):
    """Never ready."""

    async def healthy(self):
        return False


class Echo(kserve.Model):
    """A v1 model, which does not speak OpenAI."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        return {"predictions": payload["instances"]}


class Repository(ModelRepository):
    """Loads ``late-<anything>`` as a Parrot on demand."""

    def load(self, name: str) -> bool:
        if not name.startswith("late-"):
            return False
        self.update(Parrot(name))
        return True


if __name__ == "__main__":
    models = [Parrot("parrot"), Objects("objects"), Hasher("hasher"), Sleepy("sleepy"), Echo("echo"),
              KServeStyle("kserve-style")]
    if os.environ.get("OPENAI_TEST_V1_ONLY"):  # no OpenAI model until one is loaded
        models = [Echo("echo")]
    kserve.ModelServer(registered_models=Repository()).start(models)
