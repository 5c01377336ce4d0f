"""KServe's module ``kserve.protocol.rest.openai.openai_model``: the OpenAI model classes, ``ChatPrompt``, the
request and answer types it imports, and ``AsyncMappingIterator``.

The classes are those of ``kserve_sdk.protocol.rest.openai`` (the same objects); importing this module loads
them and their pydantic types.
"""
import inspect
from typing import Any, AsyncIterator, Callable, Optional

from . import ChatPrompt, OpenAIEncoderModel, OpenAIGenerativeModel, OpenAIModel
from .types import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    Embedding,
    EmbeddingRequest,
    ErrorResponse,
    Rerank,
    RerankRequest,
)

__all__ = [
    "AsyncMappingIterator", "ChatPrompt", "OpenAIEncoderModel", "OpenAIGenerativeModel",
    "OpenAIModel", "ChatCompletion", "ChatCompletionRequest", "Completion", "CompletionRequest", "Embedding",
    "EmbeddingRequest", "ErrorResponse", "Rerank", "RerankRequest",
]


class AsyncMappingIterator:
    """An async iterator over ``iterator``'s items passed through ``mapper``, leaving out the ones it maps to
    None (unless ``skip_none`` is False). When ``iterator`` ends, or it or ``mapper`` fails, ``close`` (a
    function or coroutine function, if given) is called before the end or the error goes on. ``aclose()``
    (beyond KServe's) stops it early, as the server does when the client leaves a stream: ``iterator`` is
    closed too when it can be. ``close`` is called once in all."""

    def __init__(self, iterator: AsyncIterator, mapper: Callable = lambda item: item, skip_none: bool = True,
                 close: Optional[Callable] = None):
        self.iterator = iterator
        self.mapper = mapper
        self.skip_none = skip_none
        self.close = close
        self._closed = False

    def __aiter__(self) -> "AsyncMappingIterator":
        return self

    async def __anext__(self) -> Any:
        while True:
            item = await self._next_mapped()
            if item is not None or not self.skip_none:
                return item

    async def aclose(self) -> None:
        """Stop: close ``iterator`` (if it has ``aclose``) and call ``close`` (unless it was called)."""
        try:
            closing = getattr(self.iterator, "aclose", None)
            if closing is not None:
                await closing()
        finally:
            await self._call_close()

    async def _next_mapped(self) -> Any:
        try:
            return self.mapper(await self.iterator.__anext__())
        except Exception:  # StopAsyncIteration too: the end closes as a failure does
            await self._call_close()
            raise

    async def _call_close(self) -> None:
        if self.close is None or self._closed:
            return
        self._closed = True
        closed = self.close()
        if inspect.isawaitable(closed):
            await closed
