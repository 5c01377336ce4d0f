"""Runs synchronous model code on threads and hands the results back to the event loop.

``loop.run_in_executor`` wakes the loop once per finished call (a write to its self-pipe, plus a
concurrent.futures.Future chained to an asyncio one). Under load that wake-up is a large part of a small
request's cost, so here the threads queue their results and wake the loop only when it is not already
due to look: one wake-up collects every call that finished meanwhile.
"""
import asyncio
import collections
import queue
import threading
from typing import Any, Callable, Deque, Optional, Tuple

_executors: "dict[asyncio.AbstractEventLoop, LoopExecutor]" = {}
_max_workers: Optional[int] = None


class LoopExecutor:
    """A fixed-size pool of threads bound to one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_workers: int):
        self._loop = loop
        self._max_workers = max_workers
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()  # C-level hand-off, no Python Condition
        self._threads: list = []
        self._idle = 0
        self._idle_lock = threading.Lock()
        self._done: Deque[Tuple[asyncio.Future, bool, Any]] = collections.deque()
        self._wake_pending = False

    def run(self, fn: Callable, *args: Any) -> asyncio.Future:
        """Run ``fn(*args)`` on a pool thread; the returned future resolves on the loop."""
        future = self._loop.create_future()
        with self._idle_lock:
            spawn = self._idle == 0 and len(self._threads) < self._max_workers
            if not spawn:
                self._idle -= 1  # this job will wake an idle thread
        self._jobs.put((future, fn, args))
        if spawn:
            self._start_thread()
        return future

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, name=f"model-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        # A new thread takes the job that started it; afterwards it counts as idle between jobs.
        while True:
            future, fn, args = self._jobs.get()
            if not future.cancelled():
                try:
                    result, ok = fn(*args), True
                except BaseException as e:  # handed to the awaiting coroutine
                    result, ok = e, False
                self._done.append((future, ok, result))
                # Append before looking at the flag; _deliver clears it before draining. Either this
                # result is drained by a wake-up already scheduled, or this thread schedules one.
                if not self._wake_pending:
                    self._wake_pending = True
                    try:
                        self._loop.call_soon_threadsafe(self._deliver)
                    except RuntimeError:  # the loop is closed: nobody is waiting any more
                        return
            with self._idle_lock:
                self._idle += 1

    def _deliver(self) -> None:
        self._wake_pending = False
        done = self._done
        while done:
            future, ok, result = done.popleft()
            if future.cancelled():
                continue
            if ok:
                future.set_result(result)
            else:
                future.set_exception(result)


def configure(max_workers: int) -> None:
    """Set the pool size for loops that have no executor yet (``--max_asyncio_workers``)."""
    global _max_workers
    _max_workers = max_workers


def run_sync(fn: Callable, *args: Any) -> asyncio.Future:
    """Run ``fn(*args)`` on the running loop's model threads."""
    loop = asyncio.get_running_loop()
    executor = _executors.get(loop)
    if executor is None:
        if len(_executors) > 8:  # loops come and go in tests; keep only live ones
            for old in [k for k in _executors if k.is_closed()]:
                del _executors[old]
        from .utils.utils import cpu_count

        executor = _executors[loop] = LoopExecutor(loop, _max_workers or min(32, cpu_count() + 4))
    return executor.run(fn, *args)
