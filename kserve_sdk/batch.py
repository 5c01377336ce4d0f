"""Step batching (continuous batching): ``@kserve_sdk.batch`` merges concurrent calls of one model method.

A model decorates a method that takes a list and returns a list of the same length::

    @kserve_sdk.batch(max_batch_size=32, max_wait_ms=5)
    async def step(self, rows):
        return [next_token(row) for row in rows]

and calls it with one item, awaiting one result: ``token = await self.step(state)``. Calls made at the same
time are merged into one call of the method. Called once per token inside an async-generator ``predict`` (or an
OpenAI ``create_completion``), it advances every live stream in the same step, with no loop to write.

When a step runs: one step of a method runs at a time per model object; the next closes as soon as it is full,
or every caller that has used the method before and is still running has a row waiting (streams that finished
the previous step together go on together, without waiting), or ``max_wait_ms`` after its first row. A caller
that is cancelled (its client left) loses its row before the step runs, and a finished one is no longer waited
for. An ``Exception`` returned in a row's place fails that caller alone; an exception raised by the method fails
every row of the step. A plain ``def`` method runs on a model thread.
"""
import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple
from weakref import WeakKeyDictionary

from . import executor, metrics, tracing
from .errors import InferenceError, model_error
from .triton import statistics

#: ``(item, the caller's future, the caller's task, the caller's call span when traced)``: a row waiting for a step.
_Row = Tuple[Any, "asyncio.Future[Any]", Optional["asyncio.Task[Any]"], Any]


def batch(max_batch_size: int = 32, max_wait_ms: float = 5.0) -> Callable[[Callable[..., Any]], "BatchedMethod"]:
    """Make a model method that takes a list (and returns a list of the same length) callable with one item:
    concurrent calls are merged into one call of at most ``max_batch_size`` items, waiting at most
    ``max_wait_ms`` for more callers."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"batch(max_batch_size=...) must be a whole number of at least 1, got {max_batch_size!r}")
    if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or max_wait_ms < 0:
        raise ValueError(f"batch(max_wait_ms=...) must be a number of milliseconds of at least 0, got {max_wait_ms!r}")

    def decorate(method: Callable[..., Any]) -> "BatchedMethod":
        if not callable(method) or isinstance(method, (staticmethod, classmethod)):
            raise TypeError(f"@batch decorates a model method (def or async def), not {method!r}")
        return BatchedMethod(method, max_batch_size, max_wait_ms / 1000.0)

    return decorate


class BatchedMethod:
    """The decorated method, on the class: each model object gets its own :class:`StepBatcher`."""

    def __init__(self, method: Callable[..., Any], max_batch_size: int, max_wait_s: float):
        self.method, self.max_batch_size, self.max_wait_s = method, max_batch_size, max_wait_s
        self.name = getattr(method, "__name__", "method")
        self._batchers: WeakKeyDictionary[Any, StepBatcher] = WeakKeyDictionary()
        functools.update_wrapper(self, method)  # type: ignore[arg-type]  # a callable object, not a function

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, model: Any, owner: Optional[type] = None) -> Any:
        if model is None:
            return self
        batcher = self._batchers.get(model)
        if batcher is None:
            batcher = self._batchers[model] = StepBatcher(model, self)
        return batcher


class StepBatcher:
    """One model object's batcher of one method: call it with one item, await its result."""

    def __init__(self, model: Any, method: BatchedMethod):
        self.model, self.spec = model, method
        self.model_name = str(getattr(model, "name", type(model).__name__))
        self._sync = not inspect.iscoroutinefunction(method.method)
        self._waiting: List[_Row] = []
        self._members: Set[asyncio.Task[Any]] = set()  # callers that have called before and still run
        self._running = False
        self._check_soon: Optional[asyncio.Handle] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._first_at = 0.0
        self._stats: Dict[str, Any] = {"steps": 0, "rows": 0, "max_rows": 0, "sizes": {}}

    async def __call__(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        task = asyncio.current_task()
        if not self._waiting:
            self._first_at = loop.time()
        row = (item, future, task, None if tracing.spans is None else tracing.spans.current_call_span())
        self._waiting.append(row)
        metrics.batch_rows_waiting(self.model_name, self.spec.name, 1)
        if task is not None and task not in self._members:
            self._members.add(task)
            task.add_done_callback(self._left)
        self._schedule(loop)
        try:
            return await future
        except asyncio.CancelledError:
            if row in self._waiting:  # cancelled before its step ran: its row goes
                self._waiting.remove(row)
                metrics.batch_rows_waiting(self.model_name, self.spec.name, -1)
            raise

    def stats(self) -> Dict[str, Any]:
        """Steps run, rows computed, the largest step and how many steps of each size (for tests)."""
        return {**self._stats, "sizes": dict(self._stats["sizes"])}

    def _left(self, task: "asyncio.Task[Any]") -> None:
        self._members.discard(task)
        if self._waiting and not self._running:
            self._schedule(asyncio.get_event_loop())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the next step now if it is due, else look again at the end of this turn of the loop (when
        the other callers resumed by the same step have called too) or when ``max_wait_ms`` is up."""
        if self._running or not self._waiting:
            return
        if len(self._waiting) >= self.spec.max_batch_size:
            self._start(loop)
            return
        if self._check_soon is None:
            self._check_soon = loop.call_soon(self._check, loop)
        if self._timer is None:
            self._timer = loop.call_at(self._first_at + self.spec.max_wait_s, self._check, loop, True)

    def _check(self, loop: asyncio.AbstractEventLoop, timed_out: bool = False) -> None:
        if timed_out:
            self._timer = None
        else:
            self._check_soon = None
        if self._running or not self._waiting:
            return
        waiting_tasks = {task for _, _, task, _ in self._waiting}
        if self._members <= waiting_tasks:
            self._start(loop)
        elif timed_out or loop.time() >= self._first_at + self.spec.max_wait_s:
            self._members &= waiting_tasks  # callers that did not come in time are not waited for until they do
            self._start(loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        for handle in (self._check_soon, self._timer):
            if handle is not None:
                handle.cancel()
        self._check_soon = self._timer = None
        rows, self._waiting = self._waiting[:self.spec.max_batch_size], self._waiting[self.spec.max_batch_size:]
        if self._waiting:
            self._first_at = loop.time()
        metrics.batch_rows_waiting(self.model_name, self.spec.name, -len(rows))
        self._running = True
        started = time.perf_counter()
        if self._sync:
            self._sync_step(rows, started)
        else:
            loop.create_task(self._async_step(rows, started))

    def _sync_step(self, rows: List[_Row], started: float) -> None:
        """A plain ``def`` step: handed to a model thread at once, with no task and no turn of the loop first."""
        try:
            running = executor.run_sync(self.spec.method, self.model, [item for item, _, _, _ in rows])
        except Exception as e:  # no thread to run it on (the server stops): the rows fail, the batcher goes on
            self._end(rows, started, None, e)
            return
        running.add_done_callback(functools.partial(self._thread_step_ended, rows, started))

    async def _async_step(self, rows: List[_Row], started: float) -> None:
        try:
            results = await self.spec.method(self.model, [item for item, _, _, _ in rows])
        except BaseException as e:
            self._end(rows, started, None, e)
            if not isinstance(e, Exception):  # the step itself was cancelled (the server stops)
                raise
        else:
            self._end(rows, started, results, None)

    def _thread_step_ended(self, rows: List[_Row], started: float, running: "asyncio.Future[Any]") -> None:
        if running.cancelled():
            self._end(rows, started, None, asyncio.CancelledError())
        else:
            error = running.exception()
            self._end(rows, started, None if error is not None else running.result(), error)

    def _end(self, rows: List[_Row], started: float, results: Any, error: Optional[BaseException]) -> None:
        """Hand each row its result, or every row the step's error (``error``: the method raised)."""
        try:
            if error is None:
                problem = _shape_problem(results, len(rows))
                if problem is not None:
                    error = InferenceError(f"model '{self.model_name}': @batch method {self.spec.name}() {problem}")
            if error is None:
                for (_, future, _, _), result in zip(rows, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
            else:  # the whole step failed: every row with the model's error
                _fail(rows, self.model_name, error)
        finally:
            self._finished(len(rows), time.perf_counter() - started)
            if tracing.spans is not None:  # the step's span, linked to the spans of the calls it served
                tracing.spans.batch_step(self.model_name, self.spec.name, started, rows)

    def _finished(self, size: int, seconds: float) -> None:
        stats = self._stats
        stats["steps"] += 1
        stats["rows"] += size
        stats["max_rows"] = max(stats["max_rows"], size)
        stats["sizes"][size] = stats["sizes"].get(size, 0) + 1
        metrics.batch_step(self.model_name, self.spec.name, size, seconds)
        statistics.record_batch_step(self.model_name, size, seconds)
        self._running = False
        self._schedule(asyncio.get_event_loop())


def _fail(rows: List[_Row], model_name: str, e: BaseException) -> None:
    """Every row of a failed step: the model's error, or cancelled when the step itself was."""
    error = model_error(model_name, e) or e
    for _, future, _, _ in rows:
        if future.done():
            continue
        if isinstance(e, Exception):
            future.set_exception(error)
        else:
            future.cancel()


def _shape_problem(results: Any, expected: int) -> Optional[str]:
    """What is wrong with what a batched method returned for ``expected`` rows; None when it is a list of that
    many results."""
    if not isinstance(results, (list, tuple)):
        return f"returned {type(results).__name__}, not a list of {expected} results (one per row, in order)"
    if len(results) != expected:
        return f"returned {len(results)} results for {expected} rows: it must return one result per row, in order"
    return None
