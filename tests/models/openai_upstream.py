"""The upstream OpenAI server of tests/test_openai_proxy.py: echo models on kserve_sdk.

    python tests/models/openai_upstream.py --names echo,hooked --http_port 8080

Each model named answers a completion with "echo: <prompt>" and a chat with "echo: <last message>",
streamed one word per chunk (the last chunk: finish_reason "stop" and the usage). It writes the
x-request-id it was sent into ``system_fingerprint``, so a test sees what the proxy forwarded.
Prompts that misbehave on purpose:
  "slow"         the answer comes after 30 s (before any byte: the proxy's timeout)
  "stall"        a stream sends its first word, then nothing for 30 s
  max_tokens > 100  a 400 in OpenAI's shape, about the max_tokens field

It also serves ``nully``, whose answers and chunks are dicts with ``null`` in every optional field, as
OpenAI's API and LitServe send them (``"tool_calls": null``, ``"logprobs": {"tokens": null, ...}``).
"""
import argparse
import asyncio
from typing import Any, AsyncIterator, Dict, List, Optional

import kserve_sdk as kserve
from kserve_sdk.protocol.rest.openai import OpenAIGenerativeModel
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
    UsageInfo,
)

MAX_TOKENS = 100


class EchoModel(OpenAIGenerativeModel):
    """Answers with what it was asked."""

    async def create_completion(self, request, raw_request=None, context=None):
        refused = await self._misbehave(request, str(request.prompt))
        if refused is not None:
            return refused
        words = ["echo:", *str(request.prompt).split()]
        tag = _request_id(context)
        if request.stream:
            return self._stream(words, lambda text, **kw: CompletionChunk(
                model=self.name, system_fingerprint=tag, choices=[CompletionChunkChoice(index=0, text=text, **kw)]),
                str(request.prompt), request.stream_options)
        return Completion(model=self.name, system_fingerprint=tag, usage=_usage(request.prompt, words),
                          choices=[CompletionChoice(index=0, text=" ".join(words), finish_reason="stop")])

    async def create_chat_completion(self, request, raw_request=None, context=None):
        prompt = str(request.messages[-1].get("content"))
        refused = await self._misbehave(request, prompt)
        if refused is not None:
            return refused
        words = ["echo:", *prompt.split()]
        tag = _request_id(context)
        if request.stream:
            return self._stream(words, lambda text, **kw: ChatCompletionChunk(
                model=self.name, system_fingerprint=tag,
                choices=[ChunkChoice(index=0, delta=ChoiceDelta(role="assistant", content=text), **kw)]),
                prompt, request.stream_options)
        return ChatCompletion(model=self.name, system_fingerprint=tag, usage=_usage(prompt, words), choices=[
            ChatCompletionChoice(index=0, message=ChatMessage(role="assistant", content=" ".join(words)),
                                 finish_reason="stop")])

    async def _misbehave(self, request: Any, prompt: str):
        """The error answer a request asks for, after the delay it asks for; None for a normal answer."""
        if (request.max_tokens or 0) > MAX_TOKENS:
            return create_error_response(f"max_tokens must be at most {MAX_TOKENS}, not {request.max_tokens}",
                                         param="max_tokens")
        if prompt == "slow":
            await asyncio.sleep(30)
        return None

    async def _stream(self, words: List[str], chunk, prompt: str, options: Any) -> AsyncIterator[Any]:
        for i, word in enumerate(words):
            yield chunk(word if i == 0 else " " + word)
            if prompt == "stall":
                await asyncio.sleep(30)
        last = chunk("", finish_reason="stop")
        last.usage = _usage(prompt, words)
        yield last


class NullyModel(OpenAIGenerativeModel):
    """Echoes the prompt's words as OpenAI's API and LitServe write answers: dicts where every optional
    field is present and null (which vllm's types refuse in the list fields)."""

    async def create_completion(self, request, raw_request=None, context=None):
        words = str(request.prompt).split()
        if request.stream:
            return self._chunks(words, lambda word: {"index": 0, "text": word, "finish_reason": None,
                                                     "logprobs": _NULL_LOGPROBS}, "text_completion")
        return {"id": "cmpl-nully", "object": "text_completion", "created": 1, "model": self.name,
                "system_fingerprint": None, "usage": _null_usage(words),
                "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "stop",
                             "logprobs": _NULL_LOGPROBS}]}

    async def create_chat_completion(self, request, raw_request=None, context=None):
        words = str(request.messages[-1].get("content")).split()
        if request.stream:
            return self._chunks(words, lambda word: {"index": 0, "finish_reason": None, "delta": {
                "role": "assistant", "content": word, "name": None, "tool_calls": None, "tool_call_id": None,
                "function_call": None, "refusal": None}, "logprobs": {"content": [
                    {"token": word, "logprob": -0.5, "bytes": None, "top_logprobs": None}], "refusal": None}},
                "chat.completion.chunk", last={"index": 0, "finish_reason": "stop", "delta": None, "logprobs": None})
        message = {"role": "assistant", "content": " ".join(words), "refusal": None, "tool_calls": None,
                   "function_call": None, "audio": None}
        return {"id": "chatcmpl-nully", "object": "chat.completion", "created": 1, "model": self.name,
                "system_fingerprint": None, "service_tier": None, "usage": _null_usage(words),
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]}

    async def _chunks(self, words: List[str], choice, kind: str,
                      last: Optional[Dict[str, Any]] = None) -> AsyncIterator[Dict[str, Any]]:
        """A chunk per word, then ``last`` (a choice that ends the answer) if given, then the usage."""
        for word in words:
            yield {"id": "nully-1", "object": kind, "created": 1, "model": self.name, "system_fingerprint": None,
                   "usage": None, "choices": [choice(word)]}
        if last is not None:  # e.g. a chat's stop with "delta": null, as some servers send it
            yield {"id": "nully-1", "object": kind, "created": 1, "model": self.name, "system_fingerprint": None,
                   "usage": None, "choices": [last]}
        yield {"id": "nully-1", "object": kind, "created": 1, "model": self.name, "system_fingerprint": None,
               "choices": [], "usage": _null_usage(words)}


_NULL_LOGPROBS = {"text_offset": None, "token_logprobs": None, "tokens": None, "top_logprobs": None}


def _null_usage(words: List[str]) -> Dict[str, Any]:
    return {"prompt_tokens": len(words), "completion_tokens": len(words), "total_tokens": 2 * len(words),
            "prompt_tokens_details": None, "completion_tokens_details": None}


def _usage(prompt: Any, words: List[str]) -> UsageInfo:
    n = len(str(prompt).split())
    return UsageInfo(prompt_tokens=n, completion_tokens=len(words), total_tokens=n + len(words))


def _request_id(context: Optional[Dict[str, Any]]) -> Optional[str]:
    return ((context or {}).get("headers") or {}).get("x-request-id")


def main() -> None:
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--names", default="echo", help="comma-separated model names")
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([EchoModel(name) for name in args.names.split(",")] + [NullyModel("nully")])


if __name__ == "__main__":
    main()
