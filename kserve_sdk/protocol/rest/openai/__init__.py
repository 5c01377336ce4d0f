"""OpenAI-compatible serving at KServe's import path (``kserve.protocol.rest.openai``): the model classes
(``OpenAIGenerativeModel``, ``OpenAIEncoderModel``, ``OpenAIChatAdapterModel``, ``OpenAIProxyModel``), the
request types a model reads, ``ChatPrompt`` and ``OpenAIError``; every other type in ``.types``.

The names are imported when first used, so that importing this package (which the server does to answer the
OpenAI routes) does not load pydantic until a request or a model needs the types.
"""
import importlib
from typing import Any

#: name -> the module (relative to the kserve_sdk package) that defines it
_WHERE = {
    "OpenAIModel": ".openai.model",
    "OpenAIGenerativeModel": ".openai.model",
    "OpenAIEncoderModel": ".openai.model",
    "OpenAIChatAdapterModel": ".openai.chat_adapter",
    "ChatPrompt": ".openai.chat_adapter",
    "OpenAIProxyModel": ".openai.proxy",
    "CompletionRequest": ".protocol.rest.openai.types",
    "ChatCompletionRequest": ".protocol.rest.openai.types",
    "ChatCompletionMessageParam": ".protocol.rest.openai.types",
    "OpenAIError": ".protocol.rest.openai.errors",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, "kserve_sdk"), name)
    globals()[name] = value  # found once; later look-ups are ordinary attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
