"""A ModelQueue's staged calls, in process (kserve_sdk/scheduling/queue.py ``run_staged``): calls whose whole turn
is one plain ``def`` stage wait with their thread job ready, and the model thread that ends one runs the next at
once, in priority order; deadlines and timeouts (counted from the call's arrival), cancellations, and calls that
wait for the slot on the loop behind a staged one."""
import asyncio
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import pytest

from kserve_sdk.errors import DeadlineExceeded, QueueTimeout
from kserve_sdk.lifecycle import Timings
from kserve_sdk.model_call import Deadline
from kserve_sdk.scheduling import SchedulingPolicy
from kserve_sdk.scheduling.queue import ModelQueue


def _queue(**fields: Any) -> ModelQueue:
    return ModelQueue("m", SchedulingPolicy(priority_levels=2, **fields).over(SchedulingPolicy()), 1)


def _run(scenario: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 10))


class Jobs:
    """Thread jobs that note (name, thread) when they start; a job named in ``held`` runs until released."""

    def __init__(self) -> None:
        self.started: List[Tuple[str, str]] = []
        self.gates = {}

    def job(self, name: str, hold: bool = False) -> Tuple[Callable[..., str], tuple]:
        gate = self.gates[name] = threading.Event()
        if not hold:
            gate.set()

        def run() -> str:
            self.started.append((name, threading.current_thread().name))
            assert gate.wait(5), f"{name} was never released"
            return name
        return run, ()

    def names(self) -> List[str]:
        return [name for name, _ in self.started]


async def _until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def _staged(queue: ModelQueue, jobs: Jobs, name: str, level: int = 1, hold: bool = False,
            timeout: Optional[float] = None, deadline: Optional[Deadline] = None,
            since: Optional[float] = None, timings: Optional[Timings] = None) -> asyncio.Future:
    fn, args = jobs.job(name, hold)
    return queue.run_staged(level, timeout, deadline, fn, args, Timings() if timings is None else timings, since)


def test_the_thread_that_ends_a_call_runs_the_waiting_ones_in_priority_order_itself():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        low = _staged(queue, jobs, "low", level=1)
        timings = Timings()
        high = _staged(queue, jobs, "high", level=0, timings=timings)
        assert queue.waiting == 2 and queue.free == 0
        jobs.gates["first"].set()
        results = [await f for f in (first, high, low)]
        await _until(lambda: queue.free == 1)  # the thread hands the slot on just after its answer is queued
        return results, jobs.started, timings, queue

    results, started, timings, queue = _run(scenario)
    assert results == [("first", 0.0), ("high", 0.0), ("low", 0.0)]
    assert [name for name, _ in started] == ["first", "high", "low"]
    assert len({thread for _, thread in started}) == 1, started  # handed on where the first one ended
    assert timings.scheduled_s > 0  # its wait for the slot is the call's
    assert (queue.free, queue.waiting) == (1, 0)


def test_a_staged_call_whose_deadline_passes_while_it_waits_never_runs_and_the_next_one_does():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        late = _staged(queue, jobs, "late", deadline=Deadline.after(0.05, "the request's timeout parameter"))
        after = _staged(queue, jobs, "after")
        with pytest.raises(QueueTimeout, match="waited 50 ms in model 'm''s queue"):
            await late
        jobs.gates["first"].set()
        await first, await after
        await _until(lambda: queue.free == 1)
        return jobs.names(), queue

    names, queue = _run(scenario)
    assert names == ["first", "after"] and (queue.free, queue.waiting) == (1, 0)


def test_a_staged_call_past_its_deadline_while_it_runs_is_answered_and_keeps_the_slot_until_its_thread_ends():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        running = _staged(queue, jobs, "running", hold=True, deadline=Deadline.after(0.05, "--request_timeout_seconds"))
        await _until(lambda: jobs.names() == ["running"])
        nxt = _staged(queue, jobs, "next")
        with pytest.raises(DeadlineExceeded, match="did not answer within 0.05 s"):
            await running
        await asyncio.sleep(0.05)
        assert jobs.names() == ["running"] and not nxt.done()  # the slot is still the running thread's
        jobs.gates["running"].set()
        assert await nxt == ("next", 0.0)
        return jobs.names()

    assert _run(scenario) == ["running", "next"]


def test_a_timeout_counts_from_the_calls_arrival():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        began = time.monotonic()
        late = _staged(queue, jobs, "late", timeout=0.3, since=time.perf_counter() - 0.25)
        with pytest.raises(QueueTimeout, match="waited 300 ms"):
            await late
        took = time.monotonic() - began
        jobs.gates["first"].set()
        await first
        return took

    took = _run(scenario)
    assert took < 0.2, f"rejected {took:.3f} s after it queued: its 0.3 s counted from its wait, not its arrival"


def test_a_cancelled_staged_call_leaves_the_queue_unrun_and_the_slot_is_not_lost():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        gone = _staged(queue, jobs, "gone")
        gone.cancel()
        await asyncio.sleep(0)
        assert queue.waiting == 0
        jobs.gates["first"].set()
        await first
        assert await _staged(queue, jobs, "later") == ("later", 0.0)
        await _until(lambda: queue.free == 1)
        return jobs.names(), queue

    names, queue = _run(scenario)
    assert names == ["first", "later"] and queue.free == 1


def test_a_call_waiting_on_the_loop_behind_a_staged_one_is_handed_the_slot():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        entering = asyncio.ensure_future(queue.enter(1, None))
        await asyncio.sleep(0.01)
        assert not entering.done() and queue.waiting == 1
        jobs.gates["first"].set()
        await first
        waited = await entering  # it holds the slot now: a staged call waits behind it
        behind = _staged(queue, jobs, "behind")
        await asyncio.sleep(0.02)
        assert not behind.done() and jobs.names() == ["first"]
        queue.leave(1)
        assert await behind == ("behind", 0.0)
        return waited

    assert _run(scenario) > 0


def test_a_staged_call_whose_thread_starts_it_too_near_its_deadline_is_rejected_there_unrun():
    async def scenario():
        queue, jobs = _queue(), Jobs()
        first = _staged(queue, jobs, "first", hold=True)
        await _until(lambda: jobs.names() == ["first"])
        late = _staged(queue, jobs, "late", timeout=5.0)
        waiter = queue._levels[1][0][0]
        waiter.rejected_at = time.monotonic() + 0.5  # far enough when the slot is handed on
        original = queue._take_next

        def taken_then_delayed(now, rejected):  # the thread is held up between taking the call and starting it
            found = original(now, rejected)
            if found[0] is waiter:
                waiter.rejected_at = time.monotonic() + 0.001
            return found

        queue._take_next = taken_then_delayed
        jobs.gates["first"].set()
        await first
        with pytest.raises(QueueTimeout, match="waited 5000 ms"):
            await late
        await _until(lambda: queue.free == 1)
        return jobs.names(), queue

    names, queue = _run(scenario)
    assert names == ["first"] and (queue.free, queue.waiting) == (1, 0)


def test_a_call_answered_by_its_deadline_before_a_thread_was_free_to_start_it_never_runs():
    from kserve_sdk import executor

    async def scenario():
        queue, jobs = _queue(), Jobs()
        blocker = threading.Event()
        busy = executor.run_sync(blocker.wait, 5)  # the one model thread is taken by another model's call
        late = _staged(queue, jobs, "late", deadline=Deadline.after(0.05, "--request_timeout_seconds"))
        with pytest.raises(DeadlineExceeded):
            await late
        blocker.set()
        await busy
        await _until(lambda: queue.free == 1)  # the thread skipped it and handed the slot on
        return jobs.names()

    saved = executor._max_workers
    executor.configure(1)
    try:
        assert _run(scenario) == []
    finally:
        executor._max_workers = saved
