"""Runs synchronous model code on threads and hands the results back to the event loop.

``loop.run_in_executor`` wakes the loop once per finished call (a write to its self-pipe, plus a
concurrent.futures.Future chained to an asyncio one). Under load that wake-up is a large part of a small
request's cost, so here the threads queue their results and wake the loop only when it is not already
due to look: one wake-up collects every call that finished meanwhile.
"""
import asyncio
import collections
import contextvars
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Optional, Tuple

if TYPE_CHECKING:
    from .scheduling.queue import SlotOwner

_executors: "dict[asyncio.AbstractEventLoop, LoopExecutor]" = {}
_max_workers: Optional[int] = None


class LoopExecutor:
    """A fixed-size pool of threads bound to one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_workers: int):
        self._loop = loop
        self._max_workers = max_workers
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # C-level hand-off, no Python Condition
        self._threads: list = []
        self._idle = 0
        self._idle_lock = threading.Lock()
        self._done: Deque[Tuple[asyncio.Future, bool, Any]] = collections.deque()
        self._wake_pending = False

    def run(self, fn: Callable, *args: Any) -> asyncio.Future:
        """Run ``fn(*args)`` on a pool thread; the returned future resolves on the loop. A call that watches
        its threads (:data:`watched`) counts this one until it has ended, even when the future is cancelled."""
        future = self._loop.create_future()
        watch = watched.get()
        if watch is not None:
            watch.running += 1
        self._put((future, fn, args, watch, None))
        return future

    def run_in_slot(self, future: asyncio.Future, job: Callable[[], Any], owner: "SlotOwner") -> None:
        """Run ``job()`` on a pool thread for a call that holds a model's slot, its result into ``future``;
        when it ends (or, its future cancelled, is skipped), the thread hands the slot on through ``owner``
        and runs the next call's job at once when the owner gives one."""
        self._put((future, job, (), None, owner))

    def _put(self, job: tuple) -> None:
        with self._idle_lock:
            spawn = self._idle == 0 and len(self._threads) < self._max_workers
            if not spawn:
                self._idle -= 1  # this job will wake an idle thread
        self._jobs.put(job)
        if spawn:
            self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, name=f"model-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        # A new thread takes the job that started it; afterwards it counts as idle between jobs. A job that
        # holds a model's slot may hand this thread the next call's job of the same model (SlotOwner).
        while True:
            job: Optional[tuple] = self._jobs.get()
            while job is not None:
                future, fn, args, watch, owner = job
                if not self._run_one(future, fn, args, watch):
                    return
                job = None
                if owner is not None:
                    after = owner.hand_on_from_thread()
                    if after is not None:
                        job = (after[0], after[1], (), None, after[2])
            with self._idle_lock:
                self._idle += 1

    def _run_one(self, future: asyncio.Future, fn: Callable, args: tuple, watch: Optional["ThreadWatch"]) -> bool:
        """Run one job and queue its result for the loop (a job whose future is done already, cancelled or
        answered by its deadline, does not run); False once the loop is closed."""
        deliver = not future.done()
        if deliver:
            try:
                result, ok = fn(*args), True
            except BaseException as e:  # handed to the awaiting coroutine
                result, ok = e, False
            self._done.append((future, ok, result, watch))
        elif watch is not None:  # never ran: its watch still hears that it has ended
            self._done.append((future, False, None, watch))
            deliver = True
        if deliver:
            # Append before looking at the flag; _deliver clears it before draining. Either this
            # result is drained by a wake-up already scheduled, or this thread schedules one.
            if not self._wake_pending:
                self._wake_pending = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody is waiting any more
                    return False
        return True

    def _deliver(self) -> None:
        self._wake_pending = False
        done = self._done
        while done:
            future, ok, result, watch = done.popleft()
            if watch is not None:
                watch.ended()
            if future.done():  # cancelled, or answered already (a deadline passed while it ran)
                continue
            if ok:
                future.set_result(result)
            else:
                future.set_exception(result)


def configure(max_workers: int, inline_below_ms: Optional[float] = None) -> None:
    """Set the pool size for loops that have no executor yet (``--max_asyncio_workers``) and the duration
    under which a sync stage may run on the loop (``--inline_sync_below_ms``; 0: always on a thread)."""
    global _max_workers, _inline_below_s
    _max_workers = max_workers
    if inline_below_ms is not None:
        _inline_below_s = inline_below_ms / 1000.0


# --- quick sync stages run on the loop ------------------------------------------------------------------
# Handing a call to a thread and back costs two thread wake-ups, often more than a small predict itself.
# A sync stage that has run INLINE_AFTER calls on the pool under _inline_below_s runs on the loop from
# then on (as KServe runs every sync predict); one inline call over the limit sends it back to the pool,
# and it must then prove itself twice as long. A slow model therefore blocks the loop at most once per
# demotion, and a model that is never quick never leaves the pool. Time is wall time (a model that sleeps
# or waits is slow). Slow calls on the pool do not reset the count, because there a quick call is often
# slowed by waiting for the GIL while the loop holds it; on the loop, a call that never waited but that
# the system switched away from (the machine was busy) is judged by the CPU time its thread used.
INLINE_AFTER = 16
_inline_below_s = 0.001
class ThreadWatch:
    """The model threads still running one call's stages: a call cut short (its deadline, its client gone)
    keeps its model's slot until they have ended, so no more stages run at once than the model allows."""

    __slots__ = ("running", "on_idle")

    def __init__(self) -> None:
        self.running = 0
        self.on_idle: Optional[Callable[[], None]] = None

    def ended(self) -> None:
        self.running -= 1
        if not self.running and self.on_idle is not None:
            on_idle, self.on_idle = self.on_idle, None
            on_idle()


#: Set while a call that holds a model's slot runs its stages (kserve_sdk/model_call.py).
watched: "contextvars.ContextVar[Optional[ThreadWatch]]" = contextvars.ContextVar("kserve_sdk_watched", default=None)

#: Set while a call whose turn is one plain ``def`` stage runs without its model's slot yet: that stage goes to
#: this function, ``(fn, args) -> future``, which waits for the slot with the job ready (kserve_sdk/model_call.py).
staging: "contextvars.ContextVar[Optional[Callable[[Callable, tuple], asyncio.Future]]]" = contextvars.ContextVar(
    "kserve_sdk_staging", default=None)

#: Set while a call has a deadline: a stage running on the loop could not be cancelled at the deadline.
no_inline: "contextvars.ContextVar[bool]" = contextvars.ContextVar("kserve_sdk_no_inline", default=False)


class _Pace:
    __slots__ = ("quick_runs", "needed", "inline")

    def __init__(self) -> None:
        self.quick_runs, self.needed, self.inline = 0, INLINE_AFTER, False

    def pooled_run_took(self, seconds: float) -> None:
        if seconds < _inline_below_s:
            self.quick_runs += 1
            if self.quick_runs >= self.needed:
                self.inline = True

    def inline_run_was_slow(self) -> None:
        self.inline, self.quick_runs, self.needed = False, 0, self.needed * 2


try:
    from resource import RUSAGE_THREAD, getrusage

    def _thread_usage() -> Tuple[int, int, float]:
        usage = getrusage(RUSAGE_THREAD)
        return usage.ru_nvcsw, usage.ru_nivcsw, usage.ru_utime + usage.ru_stime
except ImportError:  # not Linux: wall time alone decides
    def _thread_usage() -> Tuple[int, int, float]:
        return 0, 0, 0.0


def _was_slow(seconds: float, before: Tuple[int, int, float]) -> bool:
    """Whether a run on the loop that took ``seconds`` (wall) was slow. On a busy machine the system may
    pause a quick call for longer than the limit: a run that never waited (no voluntary switch: no sleep,
    no I/O) but was switched away from counts by the CPU time its thread used instead."""
    if seconds < _inline_below_s:
        return False
    waited, preempted, cpu = _thread_usage()
    return waited != before[0] or preempted == before[1] or cpu - before[2] >= _inline_below_s


_paces: "dict[Any, _Pace]" = {}


def _pace_of(fn: Callable) -> _Pace:
    key = (getattr(fn, "__self__", None) is not None and id(fn.__self__), getattr(fn, "__func__", fn))
    pace = _paces.get(key)
    if pace is None:
        pace = _paces[key] = _Pace()
    return pace


def forget(owner: Any) -> None:
    """Let go of the pace kept for the methods of ``owner`` (a model the server no longer serves)."""
    for key in [key for key in _paces if key[0] == id(owner)]:
        del _paces[key]


def run_stage(fn: Callable, *args: Any) -> Any:
    """Run the sync stage ``fn(*args)``: on the loop when it has been quick, else on a model thread.

    Returns the result itself when it ran here, or an ``asyncio.Future`` of ``(result, seconds it waited
    for a thread)`` when it went to the pool.
    """
    stage = staging.get()
    if stage is not None:
        return stage(fn, args)
    pace = _pace_of(fn) if _inline_below_s > 0 else None
    if pace is not None and pace.inline and not no_inline.get():
        usage = _thread_usage()
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            if _was_slow(time.perf_counter() - start, usage):
                pace.inline_run_was_slow()
    return run_sync(_timed, pace, fn, args, time.perf_counter())


def _timed(pace: Optional[_Pace], fn: Callable, args: tuple, queued: float) -> Tuple[Any, float]:
    start = time.perf_counter()
    try:
        return fn(*args), start - queued
    finally:
        if pace is not None:
            pace.pooled_run_took(time.perf_counter() - start)


def run_in_slot(future: asyncio.Future, job: Callable[[], Any], owner: "SlotOwner") -> None:
    """Run a slot holder's ``job()`` on the running loop's model threads (:meth:`LoopExecutor.run_in_slot`)."""
    _executor_of(asyncio.get_running_loop()).run_in_slot(future, job, owner)


def run_sync(fn: Callable, *args: Any) -> asyncio.Future:
    """Run ``fn(*args)`` on the running loop's model threads."""
    return _executor_of(asyncio.get_running_loop()).run(fn, *args)


def _executor_of(loop: asyncio.AbstractEventLoop) -> LoopExecutor:
    executor = _executors.get(loop)
    if executor is None:
        if len(_executors) > 8:  # loops come and go in tests; keep only live ones
            for old in [k for k in _executors if k.is_closed()]:
                del _executors[old]
        from .utils.utils import cpu_count

        executor = _executors[loop] = LoopExecutor(loop, _max_workers or min(32, cpu_count() + 4))
    return executor
