"""A model's stream of answers inside the call's accounting, iterated or pumped.

While it runs the model counts as in flight (drain, overload); when it ends, the stream metrics,
statistics and the latency line are written, however many answers there were. A protocol adapter
either iterates it (``async for``, as gRPC does) or pumps it into a callback (``pump``, as REST's
StreamingHandler does): the same accounting, one async-generator hop less per answer for the pump.
"""
import inspect
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Optional

from . import metrics
from .errors import model_error, naming_the_model
from .lifecycle import Timings

if TYPE_CHECKING:
    from .dataplane import DataPlane


class CountedStream:
    """The answers of one model stream (``items``; None: ``model(request)`` answers once). ``watch``, a
    protocol's own per-answer metrics, has ``seen(item)`` called for each answer and ``ended()`` once."""

    __slots__ = ("dataplane", "model_name", "items", "headers", "protocol", "timings", "model", "request",
                 "watch", "start", "first", "count")

    def __init__(self, dataplane: "DataPlane", model_name: str, items: Optional[AsyncIterator[Any]],
                 headers: dict, protocol: str, timings: Timings, model: Any = None, request: Any = None,
                 watch: Optional[Any] = None):
        self.dataplane, self.model_name, self.items, self.headers = dataplane, model_name, items, headers
        self.protocol, self.timings, self.model, self.request, self.watch = protocol, timings, model, request, watch
        self.start, self.first, self.count = 0.0, None, 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._answers()

    async def _answers(self) -> AsyncIterator[Any]:
        failed = False
        self._begin()
        try:
            items = self.items if self.items is not None else await self._answer_once()
            with naming_the_model(self.model_name):
                async for item in items:
                    self._seen(item)
                    yield item
        except Exception:  # a client that leaves (GeneratorExit, CancelledError) is no failure of the model
            failed = True
            raise
        finally:
            await self._close(failed)

    async def pump(self, each: Callable[[Any], Optional[Awaitable[Any]]]) -> None:
        """Hand every answer to ``each``, awaiting what it returns when that is not None (a flush). An
        error of the model is raised as for ``async for``; one of ``each`` passes as it is, no failure of
        the model's."""
        failed = False
        self._begin()
        try:
            try:
                items = self.items if self.items is not None else await self._answer_once()
            except Exception:
                failed = True
                raise
            next_answer = items.__anext__
            while True:
                try:
                    item = await next_answer()
                except StopAsyncIteration:
                    break
                except Exception as e:
                    failed = True
                    error = model_error(self.model_name, e)
                    if error is None:
                        raise
                    raise error from e
                self._seen(item)
                waiting = each(item)
                if waiting is not None:
                    await waiting
        finally:
            await self._close(failed)

    async def aclose(self) -> None:
        """Close the model's generator if it was never iterated (iterating closes it at its end)."""
        if self.start == 0.0 and self.items is not None:
            await self.items.aclose()

    def _begin(self) -> None:
        self.dataplane.begin_request(self.model_name)
        self.start = time.perf_counter()

    async def _answer_once(self) -> AsyncIterator[Any]:
        answer = self.model(self.request, headers=self.headers)
        if inspect.isawaitable(answer):
            answer = await answer
        self.items = _one(answer[0])
        return self.items

    def _seen(self, item: Any) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.start
        self.count += 1
        if self.watch is not None:
            self.watch.seen(item)

    async def _close(self, failed: bool) -> None:
        """Close the model's generator, then account for the stream, however it ended."""
        try:
            if self.items is not None:
                await self.items.aclose()
        finally:
            self._end(failed)

    def _end(self, failed: bool) -> None:
        name, timings = self.model_name, self.timings
        self.dataplane.end_request(name)
        if self.watch is not None:
            self.watch.ended()
        metrics.stream_finished(name, self.protocol, self.count, self.first)
        if timings.traced:  # the stream's span counts its chunks
            timings.chunks = self.count
        self.dataplane.execution_finished(name, timings, self.start, not failed, self.headers)


async def _one(answer: Any) -> AsyncIterator[Any]:
    yield answer
