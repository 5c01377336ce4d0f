"""One model call's accounting, written once for every verb and every protocol.

Whatever runs a model (v1/v2 infer and explain, a stream iterated or pumped, an OpenAI completion, chat,
embedding or rerank, a forecast) runs it inside a :class:`ModelCall`:

- it is refused (503) while the server drains or is at ``--max_concurrent_requests``, else counted in flight
  (the drain and unload wait for it);
- it waits for its turn in its model's queue when the model's scheduling policy limits its calls at once
  (:mod:`kserve_sdk.scheduling`);
- when it ends, it is recorded once: Triton statistics, KServe's stage histograms and the latency line;
- its exception becomes the model's error (500 naming the model) unless it is one of ours.

A :class:`Deadline` (``--request_timeout_seconds``, or a v2 request's ``timeout`` parameter when shorter) bounds
a unary call's whole run and a stream's wait for its first answer: a stream that answers is alive, however long
it then goes on. :class:`CountedStream` is a model's stream of answers inside one model call.
"""
import asyncio
import functools
import inspect
from time import perf_counter, perf_counter_ns
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    NamedTuple,
    Optional,
    TypeVar,
)

from . import executor, metrics
from .errors import DeadlineExceeded, model_error
from .lifecycle import Timings, model_call_finished

if TYPE_CHECKING:
    from .dataplane import DataPlane
    from .scheduling import Ticket

T = TypeVar("T")


class Deadline(NamedTuple):
    """When a model call must have answered: ``at`` on the event loop's clock, after ``seconds`` set by
    ``source`` (named in the 504)."""

    at: float
    seconds: float
    source: str

    @classmethod
    def after(cls, seconds: float, source: str, since: Optional[float] = None) -> "Deadline":
        """The deadline ``seconds`` from now, or from ``since`` (a ``time.perf_counter()`` in the past: when the
        call arrived)."""
        elapsed = 0.0 if since is None else max(perf_counter() - since, 0.0)
        return cls(asyncio.get_running_loop().time() + seconds - elapsed, seconds, source)


class ModelCall:
    """One call of a model, in flight from its making until :meth:`succeeded` or :meth:`failed`."""

    __slots__ = ("_dataplane", "model_name", "timings", "headers", "_start", "ticket", "deadline", "_holding",
                 "_threads")

    def __init__(self, dataplane: "DataPlane", model_name: str, timings: Timings, headers: Dict[str, str],
                 ticket: Optional["Ticket"] = None, deadline: Optional[Deadline] = None):
        dataplane.begin_request(model_name)  # ServerNotReady / ServerBusy before anything is counted
        self._dataplane, self.model_name, self.timings, self.headers = dataplane, model_name, timings, headers
        #: The call's place in its model's queue (None: the model never queues), and its run's deadline.
        self.ticket, self.deadline, self._holding = ticket, deadline, False
        self._threads: Optional[executor.ThreadWatch] = None  # a slot holder's stages on model threads
        self._start = perf_counter_ns()

    async def admitted(self) -> None:
        """Wait for the model's slot (the call's turn in its model's queue: QueueFull, QueueTimeout); the
        wait goes into the call's timings. Nothing to wait for when the model never queues."""
        ticket = self.ticket
        if ticket is None or self._holding:
            return
        waited = await ticket.queue.enter(ticket.level, ticket.timeout, self.deadline, ticket.since)
        self._holding = True
        if waited:
            self.timings.scheduled_s = waited

    def succeeded(self, whole_is_one_execution: bool = False) -> None:
        """The model answered. ``whole_is_one_execution``: it ran once outside the stage pipeline (a stream,
        an OpenAI method, a forecast), so its whole time is its ``predict_ms`` unless a stage recorded one."""
        elapsed = self._end()
        timings = self.timings
        if whole_is_one_execution:
            timings.executions += 1
            timings.setdefault("predict_ms", elapsed / 1e6)
        model_call_finished(self.model_name, timings, elapsed, True, self.headers,
                            self._dataplane.enable_latency_logging)

    def failed(self, exc: BaseException, whole_is_one_execution: bool = False) -> BaseException:
        """The model failed with ``exc``: recorded as a failure; returns what to raise (the model's own
        exception as the model's error, ours as they are)."""
        if whole_is_one_execution:
            self.timings.executions += 1
        model_call_finished(self.model_name, self.timings, self._end(), False)
        return model_error(self.model_name, exc) or exc

    def _end(self) -> int:
        if self._holding:
            self._holding = False
            ticket = self.ticket
            assert ticket is not None  # holding: it had a ticket
            threads = self._threads
            if threads is not None and threads.running:  # cut short: the slot is free once its stages end
                threads.on_idle = functools.partial(ticket.queue.leave, ticket.level)
            else:
                ticket.queue.leave(ticket.level)
        self._dataplane.end_request(self.model_name)
        return perf_counter_ns() - self._start

    async def run(self, answer: Awaitable[T], whole_is_one_execution: bool = False, may_stream: bool = False,
                  staged: bool = False) -> T:
        """Wait for the call's turn, await the model's ``answer`` within the call's deadline, then record the
        call either way. With ``may_stream``, an answer that is a stream (``__aiter__``) leaves the call open
        (holding its slot): the caller hands it to the :class:`CountedStream` of those answers, which ends it.
        ``staged``: the answer's one plain ``def`` stage is the whole turn; it waits for the slot itself, with
        its thread job ready (:meth:`ModelQueue.run_staged`), and its thread hands the slot on."""
        watching = staging = None
        try:
            if self.ticket is not None:
                if staged:
                    staging = executor.staging.set(self._staged)
                else:
                    await self._admitted_for(answer)
                    self._threads = executor.ThreadWatch()
                    watching = executor.watched.set(self._threads)
            deadline = self.deadline  # a staged call's queue keeps its deadline, over its wait and its run
            result = await answer if deadline is None or staging is not None \
                else await within(answer, deadline, self.model_name)
        except BaseException as e:
            error = self.failed(e, whole_is_one_execution)
            if error is e:
                raise
            raise error from e
        finally:
            if watching is not None:
                executor.watched.reset(watching)
            if staging is not None:
                executor.staging.reset(staging)
        if not (may_stream and hasattr(result, "__aiter__")):
            self.succeeded(whole_is_one_execution)
            if watching is not None and self.ticket.queue.free == 0:  # type: ignore[union-attr]
                await asyncio.sleep(0)  # the slot went to a waiting call: let it start before this one answers
        return result

    def _staged(self, fn: Callable[..., Any], args: tuple) -> "asyncio.Future[Any]":
        ticket = self.ticket
        assert ticket is not None  # staged only with a ticket
        executor.staging.set(None)  # this stage takes the slot; any later one runs as usual
        return ticket.queue.run_staged(ticket.level, ticket.timeout, self.deadline, fn, args, self.timings,
                                       ticket.since)

    async def _admitted_for(self, answer: Awaitable[Any]) -> None:
        try:
            await self.admitted()
        except BaseException:
            close = getattr(answer, "close", None)  # a coroutine that will never run: no "never awaited"
            if close is not None:
                close()
            raise


async def within(answer: Awaitable[T], deadline: Deadline, model_name: str) -> T:
    """``await answer``, cancelled at ``deadline`` (DeadlineExceeded). Plain ``def`` stages stay on model
    threads meanwhile, where a deadline can leave them."""
    no_inline = executor.no_inline.set(True)
    try:
        async with asyncio.timeout_at(deadline.at) as timer:
            return await answer
    except TimeoutError:
        if timer.expired():
            raise DeadlineExceeded(model_name, deadline.seconds, deadline.source) from None
        raise
    finally:
        executor.no_inline.reset(no_inline)


class CountedStream:
    """A model's stream of answers (``items``; None: ``model(request)`` answers once) as one model call:
    iterate it (``async for``) or :meth:`pump` it into a callback. The call begins when the first answer is
    asked for, unless one that has begun is handed over (``begun``: an OpenAI method that returned a stream);
    ``watch``, a protocol's own per-answer metrics, has ``seen(item)`` called for each answer and ``ended()``
    once, in the stream's own loop rather than in a generator around it."""

    __slots__ = ("dataplane", "model_name", "items", "headers", "protocol", "timings", "model", "request",
                 "watch", "deadline", "ticket", "model_call", "started", "first", "count", "_start_ns")

    def __init__(self, dataplane: "DataPlane", model_name: str, items: Optional[AsyncGenerator[Any, None]],
                 headers: Dict[str, str], protocol: str, timings: Timings, model: Any = None, request: Any = None,
                 watch: Optional[Any] = None, deadline: Optional[Deadline] = None,
                 begun: Optional[ModelCall] = None, ticket: Optional["Ticket"] = None):
        self.dataplane, self.model_name, self.items, self.headers = dataplane, model_name, items, headers
        self.protocol, self.timings, self.model, self.request, self.watch = protocol, timings, model, request, watch
        self.deadline, self.model_call, self.ticket = deadline, begun, ticket
        self.started, self.count, self._start_ns = False, 0, 0
        self.first: Optional[float] = None  # seconds from the stream's start to its first answer

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._answers()

    async def _answers(self) -> AsyncIterator[Any]:
        next_answer = await self._begin()
        try:
            while True:
                try:
                    item = await next_answer()
                except StopAsyncIteration:
                    break
                next_answer = self.items.__anext__  # type: ignore[union-attr]  # set by _begin
                self._seen(item)
                yield item
        except BaseException as e:
            await self._close(e)
            raise
        await self._close(None)

    async def pump(self, each: Callable[[Any], Optional[Awaitable[Any]]]) -> None:
        """Hand every answer to ``each``, awaiting what it returns when that is not None (a flush). An error
        of the model is raised as for ``async for``; one of ``each`` passes as it is, no failure of the model's."""
        next_answer = await self._begin()
        try:
            while True:
                try:
                    item = await next_answer()
                except StopAsyncIteration:
                    break
                except BaseException as e:
                    await self._close(e)
                    raise
                next_answer = self.items.__anext__  # type: ignore[union-attr]  # set by _begin
                self._seen(item)
                waiting = each(item)
                if waiting is not None:
                    await waiting
        except BaseException:
            await self._close(None)  # each() failed, or the client left while it flushed: no failure of the model
            raise
        await self._close(None)

    async def aclose(self) -> None:
        """Close the model's generator if it was never iterated (iterating closes it at its end)."""
        if not self.started:
            self.started = True
            await _close_items(self.items)
            if self.model_call is not None:  # handed over, never asked for: a call that ended without answers
                self.model_call.succeeded(True)
                self.model_call = None

    async def _begin(self) -> Callable[[], Awaitable[Any]]:
        """Begin the model call (unless handed one); return what gives the first answer, within the deadline."""
        if self.model_call is None:
            self.model_call = ModelCall(self.dataplane, self.model_name, self.timings, self.headers, self.ticket,
                                        self.deadline)
        self.started = True
        self._start_ns = perf_counter_ns()
        try:
            await self.model_call.admitted()  # a stream holds its model's slot until it ends
            if self.items is None:
                self.items = _one(await self._answer_once())
        except BaseException as e:
            await self._close(e)
            raise
        items, deadline = self.items, self.deadline
        if deadline is None:
            return items.__anext__
        return lambda: within(items.__anext__(), deadline, self.model_name)

    async def _answer_once(self) -> Any:
        answer = self.model(self.request, headers=self.headers)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer[0]

    def _seen(self, item: Any) -> None:
        if self.first is None:
            self.first = (perf_counter_ns() - self._start_ns) / 1e9
        self.count += 1
        if self.watch is not None:
            self.watch.seen(item)

    async def _close(self, exc: Optional[BaseException]) -> None:
        """Close the model's generator, then account for the stream once, however it ended: ``exc`` is the
        model's failure unless it is the client leaving (GeneratorExit, CancelledError)."""
        model_call, self.model_call = self.model_call, None
        if model_call is None:
            return
        try:
            await _close_items(self.items)
        finally:
            if self.watch is not None:
                self.watch.ended()
            metrics.stream_finished(self.model_name, self.protocol, self.count, self.first)
            if self.timings.traced:  # the stream's span counts its chunks
                self.timings.chunks = self.count
            if isinstance(exc, Exception):
                error = model_call.failed(exc, True)
                if error is not exc:
                    raise error from exc
            else:
                model_call.succeeded(True)


async def _one(answer: Any) -> AsyncGenerator[Any, None]:
    yield answer


async def _close_items(items: Any) -> None:
    """Close a model's async iterator when it can be closed: KServe takes any async iterable, and only
    generators (and iterators written like them) have ``aclose``."""
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()
