"""One model's slots and the queue of calls waiting for one.

A call takes a free slot at once, or waits at its priority level; a slot that frees goes to the first call
of the highest level (arrival order within a level). A waiting call whose timeout passes is rejected
(``REJECT``) or moved behind its level's other calls (``DELAY``: Triton's "delayed" calls run after the
ones of their level that have not timed out, before lower levels). A call whose client leaves is dropped
where it stands. Entries leave a level lazily: a dropped or moved call stays in its deque, marked, and is
skipped when reached, so nothing is searched for.

A call whose whole turn is one plain ``def`` stage waits *staged* (:meth:`ModelQueue.run_staged`): with its
thread job ready. The model thread that ends a staged call's job hands the slot on itself, and when the next
call is staged too, runs its job at once, without a round trip through the event loop; that call's deadline
is checked right there, before it starts. So the state below is shared with model threads, under a lock.

Background work (durable jobs) waits below every level. With a ``background_yield`` (``--job_yield_ms``), a slot
that a foreground call frees is first kept that long for the next foreground call: a client that sends its next
call as soon as it has its answer finds the slot free, instead of behind a job that took it in between. A job
takes the slot when the time passes with no foreground call.
"""
import asyncio
import functools
import threading
from collections import deque
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional, Tuple

from .. import executor, metrics
from ..errors import DeadlineExceeded, QueueFull, QueueTimeout
from .policy import SchedulingPolicy

if TYPE_CHECKING:
    from ..lifecycle import Timings
    from ..model_call import Deadline

#: A waiting call whose rejection is nearer than this (seconds) is rejected rather than given a slot: it would
#: reach its model after its deadline (the hand-over to the model takes about this long).
START_GUARD_S = 0.002


class _Waiter:
    __slots__ = ("future", "level", "position", "done", "rejected_at", "timeout", "job", "timings", "queued",
                 "timers")

    def __init__(self, future: asyncio.Future, level: int, job: Optional[Callable[[], Any]] = None,
                 timings: Optional["Timings"] = None):
        self.future, self.level, self.position, self.done = future, level, 0, False
        self.rejected_at: Optional[float] = None  # when (time.monotonic()) it is rejected if still waiting
        self.timeout = 0.0  # the timeout that rejects it, for the message
        self.job, self.timings = job, timings  # a staged call's thread job, and where its wait is noted
        self.queued = perf_counter()
        self.timers: List[asyncio.TimerHandle] = []


_Entry = Tuple[_Waiter, int]  # a waiter and the position it held when queued (stale once it moved)
#: What a model thread runs next after handing a slot on: the call's future, its job, the slot's owner.
NextJob = Tuple[asyncio.Future, Callable[[], Any], "SlotOwner"]


class SlotOwner:
    """A slot held by a staged call of ``level``: what a model thread hands on when the call's job ends."""

    __slots__ = ("queue", "level")

    def __init__(self, queue: "ModelQueue", level: int):
        self.queue, self.level = queue, level

    def hand_on_from_thread(self) -> Optional[NextJob]:
        return self.queue.hand_on_from_thread(self.level)


class ModelQueue:
    """The slots of one model (``instance_count`` of them, times its batch size when it batches) and the
    calls waiting for one, under the model's merged :class:`SchedulingPolicy`."""

    def __init__(self, model_name: str, policy: SchedulingPolicy, slots: int, background_yield: float = 0.0):
        self.model_name, self.policy = model_name, policy
        self.free = slots if slots > 0 else -1  # -1: no limit on calls at once (a queue for timeouts only)
        self.slots = slots
        levels = max(policy.priority_levels or 0, 1)
        #: The level below every priority: background work (durable jobs) runs only when no call waits.
        self.background = levels
        self._levels: List[Deque[_Entry]] = [deque() for _ in range(levels + 1)]
        self._delayed: List[Deque[_Entry]] = [deque() for _ in range(levels + 1)]
        self.waiting = 0
        self.waiting_background = 0
        self._closed: Optional[BaseException] = None
        self._delay = policy.timeout_action == "DELAY"
        #: Seconds a slot freed by a foreground call is kept from background work (0: none; no slot limit: none).
        self.background_yield = background_yield if slots > 0 else 0.0
        self._yield_until = 0.0  # time.monotonic() until which a free slot is kept from background work
        self._yield_timer: Optional[asyncio.TimerHandle] = None
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    # --- entering ------------------------------------------------------------------------------------------
    async def enter(self, level: int, timeout: Optional[float], deadline: Optional["Deadline"] = None,
                    since: Optional[float] = None) -> float:
        """Take a slot, waiting for it at ``level`` (0 is the highest) for up to ``timeout`` seconds from
        ``since`` (``time.perf_counter()`` when the call arrived; None: from now; then REJECT or DELAY) and
        never beyond the call's ``deadline`` (then rejected, whatever the action).
        Returns the seconds waited; raises QueueFull, QueueTimeout, or what :meth:`close` gave.
        Cancelled while waiting, the call leaves the queue and takes no slot."""
        loop = self._loop = asyncio.get_running_loop()
        waiter = self._admit(level, loop, None)
        if waiter is None:
            return 0.0
        self._arm(waiter, loop, timeout, deadline, since=since)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.leave(level)  # given a slot in the same turn the client left: hand it on
            else:
                self._cancelled(waiter)
            raise
        finally:
            for timer in waiter.timers:
                timer.cancel()
        waited = perf_counter() - waiter.queued
        metrics.queue_waited(self.model_name, waited)
        return waited

    def run_staged(self, level: int, timeout: Optional[float], deadline: Optional["Deadline"],
                   fn: Callable[..., Any], args: tuple, timings: "Timings",
                   since: Optional[float] = None) -> asyncio.Future:
        """Run ``fn(*args)`` on a model thread in a slot, taken at once or waited for at ``level`` as
        :meth:`enter` waits (its wait goes into ``timings.scheduled_s``). The future gives ``(result, 0.0)``
        (``executor.run_stage``'s shape) or raises what :meth:`enter` raises; cancelling it while the call
        waits takes it out of the queue. The slot is handed on by the thread that ran the job."""
        loop = self._loop = asyncio.get_running_loop()
        future = loop.create_future()
        staged = _Waiter(future, level, None, timings)
        staged.job = functools.partial(self._run_after_wait, staged, fn, args)  # set before a thread can see it
        waiter = self._admit(level, loop, staged)
        if waiter is None:
            staged.done = True
            executor.run_in_slot(future, functools.partial(_run_at_once, fn, args), SlotOwner(self, level))
        else:
            self._arm(waiter, loop, timeout, deadline, staged=True, since=since)
        if deadline is not None:  # one timer for the whole turn: the wait, then the run
            staged.timers.append(loop.call_at(deadline.at, self._deadline_passed, staged, deadline))
        future.add_done_callback(functools.partial(self._staged_settled, staged))
        return future

    def _admit(self, level: int, loop: asyncio.AbstractEventLoop, staged: Optional[_Waiter]) -> Optional[_Waiter]:
        """Take a free slot (None) or queue a waiter at ``level`` (``staged``, or a new one); QueueFull past
        max_queue_size."""
        if self._closed is not None:
            raise self._closed
        with self._lock:
            if self.free and self.waiting == self.waiting_background and (
                    level != self.background or (not self.waiting and not self._yielding(monotonic()))):
                if self.free > 0:  # background waiters here are kept out by a yield: a foreground call goes first
                    self.free -= 1
                return None
            most = self.policy.max_queue_size
            if most and self.waiting >= most:
                full = True
            else:
                full = False
                waiter = staged if staged is not None else _Waiter(loop.create_future(), level)
                self._levels[level].append((waiter, 0))
                self._counted(level, 1)
                arm_yield = bool(self.free) and level == self.background
        if full:
            metrics.queue_rejected(self.model_name, "queue_full")
            raise QueueFull(self.model_name, int(most or 0))
        if arm_yield:  # a free slot kept from it: it is handed on after the yield
            self._after_yield()
        return waiter

    def _arm(self, waiter: _Waiter, loop: asyncio.AbstractEventLoop, timeout: Optional[float],
             deadline: Optional["Deadline"], staged: bool = False, since: Optional[float] = None) -> None:
        """Start the timers that reject (or, DELAY, move) the waiter, its ``timeout`` counted from ``since``; a
        ``staged`` waiter's deadline has a timer of its own (:meth:`_deadline_passed`)."""
        now = monotonic()
        limit = None if deadline is None else max(deadline.at - loop.time(), 0.0)
        left = None  # what is left of the timeout (None: no timeout)
        if timeout is not None:
            left = timeout if since is None else max(timeout - (waiter.queued - since), 0.0)
            if limit is None or self._delay or left <= limit:
                waiter.timers.append(loop.call_later(left, self._expire, waiter, timeout))
                if not self._delay:
                    waiter.rejected_at, waiter.timeout = now + left, timeout
        if deadline is not None and limit is not None and (left is None or self._delay or limit < left):
            # the message names the deadline's whole span: the call has waited that long since it arrived
            if not staged:
                waiter.timers.append(loop.call_later(limit, self._reject, waiter, deadline.seconds))
            waiter.rejected_at, waiter.timeout = now + limit, deadline.seconds

    # --- a staged call's job, on a model thread --------------------------------------------------------------
    def _run_after_wait(self, waiter: _Waiter, fn: Callable[..., Any], args: tuple) -> Tuple[Any, float]:
        waited = perf_counter() - waiter.queued
        if waiter.timings is not None:
            waiter.timings.scheduled_s = waited
        if waiter.rejected_at is not None and waiter.rejected_at < monotonic() + START_GUARD_S:
            # its thread started late (the machine was busy since the call was taken): still too late to run
            metrics.queue_rejected(self.model_name, "expired")
            raise QueueTimeout(self.model_name, waiter.timeout)
        try:
            return fn(*args), 0.0  # nothing between the check and the model
        finally:
            metrics.queue_waited(self.model_name, waited)

    def _deadline_passed(self, waiter: _Waiter, deadline: "Deadline") -> None:
        """A staged call's deadline: still waiting, it is rejected (it never runs); running, its caller is
        answered now (its thread goes on, keeping the slot until it ends)."""
        if not self._reject(waiter, deadline.seconds) and not waiter.future.done():
            waiter.future.set_exception(DeadlineExceeded(self.model_name, deadline.seconds, deadline.source))

    def _staged_settled(self, waiter: _Waiter, future: asyncio.Future) -> None:
        for timer in waiter.timers:
            timer.cancel()
        if future.cancelled():
            self._cancelled(waiter)

    def _cancelled(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.done:
                return
            self._drop(waiter)
        metrics.queue_rejected(self.model_name, "cancelled")

    # --- leaving -------------------------------------------------------------------------------------------
    def leave(self, level: int = 0) -> None:
        """A call (of ``level``) that held a slot has ended: the slot goes to the next waiting call, or is free.
        A call too near its rejection to reach its model in time is rejected instead (:data:`START_GUARD_S`).
        A foreground call's slot is kept from background work for :attr:`background_yield`."""
        self._hand_on(monotonic(), level)

    def _hand_on(self, now: float, level: Optional[int] = None) -> None:
        """On the loop: the slot being freed (by a call of ``level``; None: by no call) goes to the next waiting
        call, or is free."""
        waiter, kept, rejected = self._release(now, level)
        self._settle_rejected(rejected)
        if kept:
            self._after_yield()
        if waiter is not None:
            self._grant(waiter)

    def hand_on_from_thread(self, level: int) -> Optional[NextJob]:
        """On a model thread whose staged call of ``level`` has ended: the slot goes to the next waiting call.
        Returns the next call's job when it is staged (the thread runs it now), else None (the loop grants it
        the slot, or the slot is free)."""
        waiter, kept, rejected = self._release(monotonic(), level)
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        try:
            if rejected:
                loop.call_soon_threadsafe(self._settle_rejected, rejected)
            if kept:
                loop.call_soon_threadsafe(self._after_yield)
            if waiter is None:
                return None
            if waiter.job is not None and not waiter.future.cancelled():
                return waiter.future, waiter.job, SlotOwner(self, waiter.level)
            loop.call_soon_threadsafe(self._grant, waiter)
        except RuntimeError:  # the loop closed meanwhile: nobody waits any more
            pass
        return None

    def _release(self, now: float, level: Optional[int]) -> Tuple[Optional[_Waiter], bool, List[_Waiter]]:
        """A slot freed by a call of ``level`` (None: by no call): under the lock, a foreground call's slot is
        kept from background work for the yield, and the next waiting call is taken (else the slot is free).
        Returns that call, whether background work waits for the yield, and the calls rejected on the way."""
        rejected: List[_Waiter] = []
        with self._lock:
            if self.background_yield and level is not None and level != self.background:
                self._yield_until = now + self.background_yield
            waiter, kept = self._take_next(now, rejected)
            if waiter is None and self.free >= 0:
                self.free += 1
        return waiter, kept, rejected

    def _take_next(self, now: float, rejected: List[_Waiter]) -> Tuple[Optional[_Waiter], bool]:
        """Under the lock: the next waiting call, taken out of the queue (None: none may have the slot), and
        whether background work waits for a yield to end. Calls too near their rejection go to ``rejected``."""
        guard = now + START_GUARD_S
        for level in range(len(self._levels)):
            if level == self.background and self.waiting_background and self._yielding(now):
                return None, True
            for entries in (self._levels[level], self._delayed[level]):
                while entries:
                    waiter, position = entries.popleft()
                    if waiter.done or position != waiter.position or waiter.future.done():
                        continue
                    self._drop(waiter)
                    if waiter.rejected_at is not None and waiter.rejected_at < guard:
                        rejected.append(waiter)
                        continue
                    return waiter, False
        return None, False

    def _grant(self, waiter: _Waiter) -> None:
        """On the loop: hand ``waiter`` the slot (a staged call's job goes to a model thread)."""
        if waiter.future.done():  # its client left after it was taken: the slot goes on
            self._hand_on(monotonic())
        elif waiter.job is not None:
            executor.run_in_slot(waiter.future, waiter.job, SlotOwner(self, waiter.level))
        else:
            waiter.future.set_result(None)

    def _settle_rejected(self, rejected: List[_Waiter]) -> None:
        for waiter in rejected:
            self._expired(waiter, waiter.timeout)

    # --- the yield to foreground calls -----------------------------------------------------------------------
    def _yielding(self, now: float) -> bool:
        return bool(self._yield_until) and now < self._yield_until

    def _after_yield(self) -> None:
        """On the loop: hand a free slot to background work once the yield has passed (a timer; set once)."""
        if self._yield_timer is None and self._closed is None:
            delay = max(self._yield_until - monotonic(), 0.0)
            self._yield_timer = asyncio.get_running_loop().call_later(delay, self._yield_ended)

    def _yield_ended(self) -> None:
        self._yield_timer = None
        if self._closed is not None or not self.waiting_background:
            return
        now = monotonic()
        if self._yielding(now):  # a foreground call took the slot and left meanwhile: its own yield runs on
            self._after_yield()
            return
        with self._lock:
            take = self.free > 0 and self.waiting == self.waiting_background
            if take:
                self.free -= 1
        if take:
            self._hand_on(now)

    # --- rejecting -----------------------------------------------------------------------------------------
    def close(self, error: BaseException) -> None:
        """The model is gone: every waiting call, and every later one, fails with ``error``."""
        self._closed = error
        if self._yield_timer is not None:
            self._yield_timer.cancel()
            self._yield_timer = None
        failed = []
        with self._lock:
            for queues in (self._levels, self._delayed):
                for entries in queues:
                    while entries:
                        waiter, position = entries.popleft()
                        if not waiter.done and position == waiter.position and not waiter.future.done():
                            self._drop(waiter)
                            failed.append(waiter)
        for waiter in failed:
            waiter.future.set_exception(error)

    def _expire(self, waiter: _Waiter, timeout: float) -> None:
        if not self._delay:
            self._reject(waiter, timeout)
            return
        with self._lock:
            if not waiter.done and not waiter.future.done():
                waiter.position += 1  # its old entry is stale; it now waits behind its level's other calls
                self._delayed[waiter.level].append((waiter, waiter.position))

    def _reject(self, waiter: _Waiter, timeout: float) -> bool:
        """Reject the waiter if it still waits (answered 504 after ``timeout``); False if it does not."""
        with self._lock:
            if waiter.done or waiter.future.done():
                return False
            self._drop(waiter)
        self._expired(waiter, timeout)
        return True

    def _expired(self, waiter: _Waiter, timeout: float) -> None:
        """On the loop: answer a waiter taken out of the queue as one whose ``timeout`` passed."""
        metrics.queue_rejected(self.model_name, "expired")
        if not waiter.future.done():
            waiter.future.set_exception(QueueTimeout(self.model_name, timeout))

    def _drop(self, waiter: _Waiter) -> None:
        waiter.done = True
        self._counted(waiter.level, -1)

    def _counted(self, level: int, change: int) -> None:
        self.waiting += change
        if level == self.background:
            self.waiting_background += change
        metrics.queue_size(self.model_name, "background" if level == self.background else str(level + 1), change)


def _run_at_once(fn: Callable[..., Any], args: tuple) -> Tuple[Any, float]:
    return fn(*args), 0.0
