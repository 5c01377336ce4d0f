"""One model's slots and the queue of calls waiting for one.

A call takes a free slot at once, or waits at its priority level; a slot that frees goes to the first call
of the highest level (arrival order within a level). A waiting call whose timeout passes is rejected
(``REJECT``) or moved behind its level's other calls (``DELAY``: Triton's "delayed" calls run after the
ones of their level that have not timed out, before lower levels). A call whose client leaves is dropped
where it stands. Entries leave a level lazily: a dropped or moved call stays in its deque, marked, and is
skipped when reached, so nothing is searched for.

Background work (durable jobs) waits below every level. With a ``background_yield`` (``--job_yield_ms``), a slot
that a foreground call frees is first kept that long for the next foreground call: a client that sends its next
call as soon as it has its answer finds the slot free, instead of behind a job that took it in between. A job
takes the slot when the time passes with no foreground call.
"""
import asyncio
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Deque, List, Optional, Tuple

from .. import metrics
from ..errors import QueueFull, QueueTimeout
from .policy import SchedulingPolicy

if TYPE_CHECKING:
    from ..model_call import Deadline

#: A waiting call whose rejection is nearer than this (seconds) is rejected rather than given a slot: it would
#: reach its model after its deadline (the hand-over to the model takes about this long).
START_GUARD_S = 0.002


class _Waiter:
    __slots__ = ("future", "level", "position", "done", "rejected_at", "timeout")

    def __init__(self, future: asyncio.Future, level: int):
        self.future, self.level, self.position, self.done = future, level, 0, False
        self.rejected_at: Optional[float] = None  # when (loop time) it is rejected if still waiting
        self.timeout = 0.0  # the timeout that rejects it, for the message


_Entry = Tuple[_Waiter, int]  # a waiter and the position it held when queued (stale once it moved)


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
        self._yield_until = 0.0  # loop time until which a free slot is kept from background work
        self._yield_timer: Optional[asyncio.TimerHandle] = None

    async def enter(self, level: int, timeout: Optional[float], deadline: Optional["Deadline"] = None) -> float:
        """Take a slot, waiting for it at ``level`` (0 is the highest) for up to ``timeout`` seconds (then
        REJECT or DELAY) and never beyond the call's ``deadline`` (then rejected, whatever the action).
        Returns the seconds waited; raises QueueFull, QueueTimeout, or what :meth:`close` gave.
        Cancelled while waiting, the call leaves the queue and takes no slot."""
        if self._closed is not None:
            raise self._closed
        if self.free and self.waiting == self.waiting_background:
            if level != self.background:  # background waiters here are kept out by a yield: go first
                if self.free > 0:
                    self.free -= 1
                return 0.0
            if not self.waiting and not self._yielding():
                if self.free > 0:
                    self.free -= 1
                return 0.0
        most = self.policy.max_queue_size
        if most and self.waiting >= most:
            metrics.queue_rejected(self.model_name, "queue_full")
            raise QueueFull(self.model_name, most)
        if self.free and level == self.background:  # a free slot kept from it: it is handed on after the yield
            self._after_yield()
        return await self._wait(level, timeout, deadline)

    async def _wait(self, level: int, timeout: Optional[float], deadline: Optional["Deadline"]) -> float:
        loop = asyncio.get_running_loop()
        limit = None if deadline is None else max(deadline.at - loop.time(), 0.0)
        waiter = _Waiter(loop.create_future(), level)
        self._levels[level].append((waiter, 0))
        self._counted(level, 1)
        started = perf_counter()
        timers = []
        if timeout is not None and (limit is None or self._delay or timeout <= limit):
            timers.append(loop.call_later(timeout, self._expire, waiter, timeout))
            if not self._delay:
                waiter.rejected_at, waiter.timeout = loop.time() + timeout, timeout
        if deadline is not None and limit is not None and (timeout is None or self._delay or limit < timeout):
            # the message names the deadline's whole span: the call has waited that long since it arrived
            timers.append(loop.call_later(limit, self._reject, waiter, deadline.seconds))
            waiter.rejected_at, waiter.timeout = loop.time() + limit, deadline.seconds
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.leave(level)  # given a slot in the same turn the client left: hand it on
            elif not waiter.done:
                self._drop(waiter)
                metrics.queue_rejected(self.model_name, "cancelled")
            raise
        finally:
            for timer in timers:
                timer.cancel()
        waited = perf_counter() - started
        metrics.queue_waited(self.model_name, waited)
        return waited

    def leave(self, level: int = 0) -> None:
        """A call (of ``level``) that held a slot has ended: the slot goes to the next waiting call, or is free.
        A call too near its rejection to reach its model in time is rejected instead (:data:`START_GUARD_S`).
        A foreground call's slot is kept from background work for :attr:`background_yield`."""
        if self.background_yield and level != self.background:
            self._yield_until = asyncio.get_running_loop().time() + self.background_yield
        self._hand_on()

    def _hand_on(self) -> None:
        guard = None
        for level in range(len(self._levels)):
            if level == self.background and self.waiting_background and self._yielding():
                self._after_yield()
                break
            for queue in (self._levels[level], self._delayed[level]):
                while queue:
                    waiter, position = queue.popleft()
                    if waiter.done or position != waiter.position or waiter.future.done():
                        continue
                    if waiter.rejected_at is not None:
                        guard = guard or asyncio.get_running_loop().time() + START_GUARD_S
                        if waiter.rejected_at < guard:
                            self._reject(waiter, waiter.timeout)
                            continue
                    self._drop(waiter)
                    waiter.future.set_result(None)
                    return
        if self.free >= 0:
            self.free += 1

    def _yielding(self) -> bool:
        return bool(self._yield_until) and asyncio.get_running_loop().time() < self._yield_until

    def _after_yield(self) -> None:
        """Hand a free slot to background work once the yield has passed (a timer; set once)."""
        if self._yield_timer is None:
            self._yield_timer = asyncio.get_running_loop().call_at(self._yield_until, self._yield_ended)

    def _yield_ended(self) -> None:
        self._yield_timer = None
        if self._closed is not None or not self.waiting_background:
            return
        if self._yielding():  # a foreground call took the slot and left meanwhile: its own yield runs on
            self._after_yield()
        elif self.free > 0 and self.waiting == self.waiting_background:
            self.free -= 1
            self._hand_on()

    def close(self, error: BaseException) -> None:
        """The model is gone: every waiting call, and every later one, fails with ``error``."""
        self._closed = error
        if self._yield_timer is not None:
            self._yield_timer.cancel()
            self._yield_timer = None
        for queues in (self._levels, self._delayed):
            for queue in queues:
                while queue:
                    waiter, position = queue.popleft()
                    if not waiter.done and position == waiter.position and not waiter.future.done():
                        self._drop(waiter)
                        waiter.future.set_exception(error)

    def _expire(self, waiter: _Waiter, timeout: float) -> None:
        if waiter.done or waiter.future.done():
            return
        if self._delay:
            waiter.position += 1  # its old entry is stale; it now waits behind its level's other calls
            self._delayed[waiter.level].append((waiter, waiter.position))
            return
        self._reject(waiter, timeout)

    def _reject(self, waiter: _Waiter, timeout: float) -> None:
        if waiter.done or waiter.future.done():
            return
        self._drop(waiter)
        metrics.queue_rejected(self.model_name, "expired")
        waiter.future.set_exception(QueueTimeout(self.model_name, timeout))

    def _drop(self, waiter: _Waiter) -> None:
        waiter.done = True
        self._counted(waiter.level, -1)

    def _counted(self, level: int, change: int) -> None:
        self.waiting += change
        if level == self.background:
            self.waiting_background += change
        metrics.queue_size(self.model_name, "background" if level == self.background else str(level + 1), change)
