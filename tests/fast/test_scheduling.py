"""The scheduler in process (kserve_sdk/scheduling/): a ModelQueue's slots, priority order, timeouts (REJECT,
DELAY), cancellations, close() and bound; a SchedulingPolicy's merge, levels and checks; what a request asks
for (request_asks); the Scheduler's tickets and deadlines."""
import asyncio
import time
from typing import Any, Awaitable, Callable, List, Optional

import pytest

from kserve_sdk.errors import InvalidInput, ModelNotReady, QueueFull, QueueTimeout
from kserve_sdk.model_call import Deadline
from kserve_sdk.scheduling import Scheduler, SchedulingPolicy
from kserve_sdk.scheduling.policy import DEFAULTS, request_asks
from kserve_sdk.scheduling.queue import ModelQueue


def _queue(slots: int = 1, **fields: Any) -> ModelQueue:
    return ModelQueue("m", SchedulingPolicy(**fields).over(SchedulingPolicy()), slots)


def _run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 10))


async def _settle() -> None:
    """Let every task that can run, run (a few turns of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


class Calls:
    """Calls of one queue, each a task that enters, notes its name in ``ran`` once it holds a slot and keeps
    the slot until :meth:`finish`."""

    def __init__(self, queue: ModelQueue):
        self.queue, self.ran, self.tasks = queue, [], {}
        self._done: dict = {}

    def start(self, name: str, level: int = 0, timeout: Optional[float] = None) -> "asyncio.Task[float]":
        self._done[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(self._call(name, level, timeout))
        return self.tasks[name]

    async def _call(self, name: str, level: int, timeout: Optional[float]) -> float:
        waited = await self.queue.enter(level, timeout)
        self.ran.append(name)
        try:
            await self._done[name].wait()
        finally:
            self.queue.leave(level)
        return waited

    async def finish(self, name: str) -> None:
        self._done[name].set()
        await self.tasks[name]
        await _settle()

    async def finish_all(self) -> List[str]:
        """Finish the call that holds the slot, then each that gets it, until none waits; the run order."""
        while [name for name, task in self.tasks.items() if name not in self.ran and not task.done()]:
            running = [name for name in self.ran if not self.tasks[name].done()]
            assert running, f"nothing holds the slot, yet {set(self.tasks) - set(self.ran)} wait"
            await self.finish(running[0])
        for name in self.ran:
            if not self.tasks[name].done():
                await self.finish(name)
        return self.ran


# --- ModelQueue ------------------------------------------------------------------------------------------------
def test_a_free_slot_is_taken_at_once_and_a_call_beyond_the_slots_waits_for_one():
    async def scenario():
        calls = Calls(_queue(slots=2))
        calls.start("a"), calls.start("b"), calls.start("c")
        await _settle()
        assert calls.ran == ["a", "b"] and calls.queue.waiting == 1
        await calls.finish("a")
        assert calls.ran == ["a", "b", "c"] and calls.queue.waiting == 0
        await calls.finish_all()
        assert [calls.tasks[n].result() == 0.0 for n in "abc"] == [True, True, False]
        assert calls.queue.free == 2  # every slot back

    _run(scenario)


def test_waiting_calls_run_highest_priority_first_then_in_arrival_order():
    async def scenario():
        calls = Calls(_queue(priority_levels=3))
        calls.start("running", level=2)
        await _settle()
        for name, level in [("low1", 2), ("mid1", 1), ("low2", 2), ("high", 0), ("mid2", 1)]:
            calls.start(name, level)
            await _settle()
        assert calls.queue.waiting == 5
        return await calls.finish_all()

    assert _run(scenario) == ["running", "high", "mid1", "mid2", "low1", "low2"]


def test_background_work_waits_below_every_priority_and_runs_only_when_no_call_waits():
    async def scenario():
        queue = _queue(priority_levels=2)
        calls = Calls(queue)
        calls.start("running", level=1)
        await _settle()
        for name, level in [("job1", queue.background), ("low", 1), ("job2", queue.background), ("high", 0)]:
            calls.start(name, level)
            await _settle()
        return await calls.finish_all()

    assert _run(scenario) == ["running", "high", "low", "job1", "job2"]


def _yielding_queue(yield_s: float) -> ModelQueue:
    return ModelQueue("m", SchedulingPolicy(priority_levels=2).over(SchedulingPolicy()), 1, background_yield=yield_s)


def test_a_slot_freed_by_a_call_is_kept_from_background_work_for_the_next_call_during_the_yield():
    async def scenario():
        queue = _yielding_queue(0.2)
        calls = Calls(queue)
        calls.start("first", level=1)
        await _settle()
        calls.start("job", queue.background)
        await _settle()
        await calls.finish("first")
        assert calls.ran == ["first"] and queue.free == 1 and queue.waiting_background == 1  # kept free
        calls.start("next", level=1)  # the client's next call, a moment later: it finds the slot free
        await _settle()
        assert calls.ran == ["first", "next"]
        began = time.monotonic()
        await calls.finish("next")
        while "job" not in calls.ran and time.monotonic() - began < 2:
            await asyncio.sleep(0.01)
        return calls.ran, time.monotonic() - began, calls

    ran, after, calls = _run(scenario)
    assert ran == ["first", "next", "job"] and calls.tasks["next"].result() == 0.0  # it never waited
    assert 0.19 <= after < 1.5, f"the job took the slot {after:.3f} s after the last call ended, not after its yield"


def test_background_work_takes_a_free_slot_at_once_when_no_call_has_ended_within_the_yield():
    async def scenario():
        queue = _yielding_queue(5.0)
        calls = Calls(queue)
        calls.start("job", queue.background)
        await _settle()
        assert calls.ran == ["job"]
        await calls.finish("job")  # a job's end starts no yield: the next job goes at once
        calls.start("job2", queue.background)
        await _settle()
        return calls.ran

    assert _run(scenario) == ["job", "job2"]


def test_a_call_waiting_at_a_priority_is_handed_the_slot_at_once_whatever_the_yield():
    async def scenario():
        queue = _yielding_queue(5.0)
        calls = Calls(queue)
        calls.start("first", level=1)
        await _settle()
        calls.start("job", queue.background), calls.start("second", level=1)
        await _settle()
        await calls.finish("first")
        return calls.ran

    assert _run(scenario) == ["first", "second"]


def test_closing_a_queue_during_a_yield_fails_the_background_work_still_waiting():
    async def scenario():
        queue = _yielding_queue(5.0)
        calls = Calls(queue)
        calls.start("first", level=1)
        await _settle()
        job = calls.start("job", queue.background)
        await _settle()
        await calls.finish("first")
        queue.close(ModelNotReady("m", "It is being unloaded."))
        await _settle()
        with pytest.raises(ModelNotReady):
            await job
        assert queue._yield_timer is None and queue.waiting == 0

    _run(scenario)


def test_a_call_of_background_work_asks_for_the_background_level_whatever_its_priority():
    from kserve_sdk.scheduling.scheduler import in_background

    class Model:
        scheduling = SchedulingPolicy(instance_count=1, priority_levels=2)

    scheduler, model = Scheduler(), Model()
    foreground, _ = scheduler.admit("m", model, {"priority": 1}, {})
    token = in_background.set(True)
    try:
        background, _ = scheduler.admit("m", model, {"priority": 1}, {})
    finally:
        in_background.reset(token)
    assert (foreground.level, background.level) == (0, background.queue.background) and background.level == 2


def test_a_call_arriving_as_a_slot_is_handed_on_queues_behind_the_calls_already_waiting():
    async def scenario():
        queue = _queue()
        calls = Calls(queue)
        calls.start("a"), calls.start("b")
        await _settle()
        calls._done["a"].set()  # a leaves; b is handed the slot before it has run again
        calls.start("c")
        await _settle()
        return calls.ran

    assert _run(scenario) == ["a", "b"]


def test_with_reject_a_call_whose_timeout_passes_while_it_waits_is_refused_and_takes_no_slot():
    async def scenario():
        calls = Calls(_queue())
        calls.start("a"), calls.start("late", timeout=0.05), calls.start("b")
        await _settle()
        with pytest.raises(QueueTimeout) as info:
            await calls.tasks["late"]
        assert calls.queue.waiting == 1
        return str(info.value), await calls.finish_all()

    message, order = _run(scenario)
    assert message == "waited 50 ms in model 'm''s queue, the call's timeout; it did not run"
    assert order == ["a", "b"]


def test_a_call_whose_deadline_began_before_it_queued_is_refused_at_its_deadline_naming_the_whole_timeout():
    async def scenario():
        queue = _queue()
        await queue.enter(0, None)  # this test holds the one slot
        deadline = Deadline.after(0.05, "the request's timeout parameter")
        await asyncio.sleep(0.02)  # the call spent this long before it reached the queue
        started = time.monotonic()
        with pytest.raises(QueueTimeout) as info:
            await queue.enter(0, 0.05, deadline)
        return str(info.value), time.monotonic() - started, queue.waiting

    message, took, waiting = _run(scenario)
    assert message == "waited 50 ms in model 'm''s queue, the call's timeout; it did not run"
    assert took < 0.045 and waiting == 0  # refused at the deadline, not 50 ms after it queued


def test_with_delay_a_call_whose_timeout_passes_runs_after_the_others_of_its_level_but_before_lower_levels():
    async def scenario():
        calls = Calls(_queue(priority_levels=2, timeout_action="DELAY"))
        calls.start("a", 0)
        await _settle()
        calls.start("late", 0, timeout=0.02), calls.start("b", 0), calls.start("low", 1)
        await asyncio.sleep(0.1)  # late's timeout passes while a holds the slot
        calls.start("c", 0)
        await _settle()
        assert calls.queue.waiting == 4
        return await calls.finish_all()

    assert _run(scenario) == ["a", "b", "c", "late", "low"]


def test_a_call_cancelled_while_it_waits_leaves_the_queue_and_the_slot_goes_to_the_next():
    async def scenario():
        calls = Calls(_queue())
        calls.start("a"), calls.start("gone"), calls.start("b")
        await _settle()
        calls.tasks["gone"].cancel()
        await _settle()
        assert calls.tasks["gone"].cancelled() and calls.queue.waiting == 1
        order = await calls.finish_all()
        return order, calls.queue.free

    assert _run(scenario) == (["a", "b"], 1)


def test_a_call_cancelled_in_the_turn_it_was_handed_the_slot_hands_it_on():
    async def scenario():
        calls = Calls(_queue())
        await calls.queue.enter(0, None)  # this test holds the one slot
        calls.start("gone"), calls.start("b")
        await _settle()
        calls.queue.leave()  # gone is handed the slot; its task has not run yet when its client leaves
        calls.tasks["gone"].cancel()
        await _settle()
        assert calls.tasks["gone"].cancelled()
        return await calls.finish_all(), calls.queue.free

    assert _run(scenario) == (["b"], 1)


def test_a_call_cancelled_in_the_turn_its_timeout_refused_it_hands_on_no_slot_it_never_had():
    async def scenario():
        calls = Calls(_queue())
        calls.start("a"), calls.start("late", timeout=0.01)
        await _settle()
        time.sleep(0.05)  # the loop is held: late's timeout is due at its next turn
        await asyncio.sleep(0)  # this task runs first in that turn, the timeout right after it
        await asyncio.sleep(0)  # late's task now has its refusal, not yet seen: its client leaves
        calls.tasks["late"].cancel()
        await _settle()
        calls.start("b")
        await _settle()
        ran = list(calls.ran)
        await calls.finish_all()
        return ran

    assert _run(scenario) == ["a"]  # b waits for a: the one slot is still a's


def test_close_fails_every_waiting_call_and_every_later_one_with_its_error():
    async def scenario():
        calls = Calls(_queue())
        calls.start("a"), calls.start("b"), calls.start("c")
        await _settle()
        calls.queue.close(ModelNotReady("m", "it is being unloaded"))
        await _settle()
        errors = [type(calls.tasks[n].exception()).__name__ for n in "bc"]
        with pytest.raises(ModelNotReady, match="it is being unloaded"):
            await calls.queue.enter(0, None)
        await calls.finish("a")
        return errors, calls.queue.waiting

    assert _run(scenario) == (["ModelNotReady", "ModelNotReady"], 0)


def test_a_call_that_finds_max_queue_size_calls_waiting_is_refused_at_once_naming_the_model_and_limit():
    async def scenario():
        calls = Calls(_queue(max_queue_size=2))
        calls.start("a"), calls.start("b"), calls.start("c")
        await _settle()
        with pytest.raises(QueueFull) as info:
            await calls.queue.enter(0, None)
        assert calls.queue.waiting == 2
        return str(info.value), await calls.finish_all()

    message, order = _run(scenario)
    assert message == "model 'm' is busy: 2 calls are waiting in its queue, its max_queue_size; retry later."
    assert order == ["a", "b", "c"]


def test_a_queue_without_slots_never_makes_a_call_wait():
    async def scenario():
        queue = _queue(slots=0)
        waits = [await queue.enter(0, 0.01) for _ in range(50)]
        return waits, queue.waiting

    assert _run(scenario) == ([0.0] * 50, 0)


def test_enter_returns_the_seconds_a_call_waited():
    async def scenario():
        calls = Calls(_queue())
        calls.start("a"), calls.start("b")
        await asyncio.sleep(0.1)
        await calls.finish("a")
        await calls.finish("b")
        return calls.tasks["b"].result()

    assert 0.09 <= _run(scenario) < 5


# --- SchedulingPolicy --------------------------------------------------------------------------------------------
def test_a_policy_takes_the_fields_it_leaves_out_from_the_defaults_then_from_no_limits():
    own = SchedulingPolicy(instance_count=2, timeout_action="DELAY")
    merged = own.over(SchedulingPolicy(instance_count=4, max_queue_size=10))
    assert merged == SchedulingPolicy(instance_count=2, max_queue_size=10, priority_levels=0,
                                      default_priority_level=0, default_timeout_microseconds=0,
                                      timeout_action="DELAY", allow_timeout_override=True)
    assert SchedulingPolicy().over(SchedulingPolicy()) == SchedulingPolicy(**DEFAULTS)


@pytest.mark.parametrize("fields, message", [
    ({"instance_count": -1}, "instance_count must be a non-negative integer, got -1"),
    ({"max_queue_size": 1.5}, "max_queue_size must be a non-negative integer, got 1.5"),
    ({"priority_levels": True}, "priority_levels must be a non-negative integer, got True"),
    ({"default_timeout_microseconds": "100"}, "default_timeout_microseconds must be a non-negative integer, got '100'"),
    ({"timeout_action": "reject"}, "timeout_action must be one of REJECT, DELAY, got 'reject'"),
    ({"allow_timeout_override": 1}, "allow_timeout_override must be true or false, got 1"),
])
def test_a_bad_field_value_is_refused_naming_the_field_and_the_value(fields, message):
    with pytest.raises(ValueError) as info:
        SchedulingPolicy(**fields)
    assert str(info.value) == message


def test_an_unknown_field_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(ValueError) as info:
        SchedulingPolicy.from_mapping({"instance_cout": 1, "instance_count": 1}, "model 'm' scheduling")
    assert str(info.value).startswith("unknown model 'm' scheduling field(s) 'instance_cout'; known: instance_count, ")
    assert SchedulingPolicy.from_mapping({"max_queue_size": 3}) == SchedulingPolicy(max_queue_size=3)


def test_a_default_priority_below_the_levels_is_refused_once_merged():
    with pytest.raises(ValueError, match="default_priority_level 3 is above priority_levels 2"):
        SchedulingPolicy(default_priority_level=3).over(SchedulingPolicy(priority_levels=2))


def test_priorities_map_to_levels_with_1_the_highest_and_0_or_none_the_default():
    policy = SchedulingPolicy(priority_levels=3).over(SchedulingPolicy())
    assert [policy.priority_of(p) for p in (1, 2, 3, 0, None)] == [0, 1, 2, 2, 2]
    with_default = SchedulingPolicy(priority_levels=3, default_priority_level=1).over(SchedulingPolicy())
    assert [with_default.priority_of(p) for p in (None, 0, 3)] == [0, 0, 2]
    no_levels = SchedulingPolicy().over(SchedulingPolicy())
    assert [no_levels.priority_of(p) for p in (None, 1, 7)] == [0, 0, 0]


@pytest.mark.parametrize("asked, message", [
    (4, "priority 4 is out of range: the model has priority_levels 3 (1 is the highest, 3 the lowest)"),
    (-1, "the 'priority' parameter must be a non-negative integer, got -1"),
    ("1", "the 'priority' parameter must be a non-negative integer, got '1'"),
    (1.5, "the 'priority' parameter must be a non-negative integer, got 1.5"),
])
def test_a_bad_priority_is_invalid_input_naming_it(asked, message):
    with pytest.raises(InvalidInput) as info:
        SchedulingPolicy(priority_levels=3).over(SchedulingPolicy()).priority_of(asked)
    assert str(info.value) == message


def test_the_queue_timeout_is_the_shorter_of_the_requests_and_the_default_when_overriding_is_allowed():
    def timeout(asked, **fields):
        return SchedulingPolicy(**fields).over(SchedulingPolicy()).queue_timeout(asked)

    assert timeout(None) is None and timeout(0) is None
    assert timeout(50_000) == 0.05
    assert timeout(None, default_timeout_microseconds=200_000) == 0.2
    assert timeout(50_000, default_timeout_microseconds=200_000) == 0.05
    assert timeout(500_000, default_timeout_microseconds=200_000) == 0.2
    assert timeout(50_000, default_timeout_microseconds=200_000, allow_timeout_override=False) == 0.2


# --- request_asks ------------------------------------------------------------------------------------------------
def test_a_request_asks_through_its_parameters_else_through_the_headers():
    headers = {"x-kserve-priority": "2", "x-kserve-timeout-us": "7000"}
    assert request_asks({"priority": 1, "timeout": 5000}, headers) == (1, 5000)
    assert request_asks({"other": True}, headers) == (2, 7000)
    assert request_asks(None, {}) == (None, None)
    assert request_asks({"priority": 1}, {}) == (1, None)


@pytest.mark.parametrize("parameters, headers, message", [
    ({"timeout": -1}, {}, "the 'timeout' parameter must be a non-negative integer (microseconds), got -1"),
    ({"timeout": 1.5}, {}, "the 'timeout' parameter must be a non-negative integer (microseconds), got 1.5"),
    ({"timeout": "soon"}, {}, "the 'timeout' parameter must be a non-negative integer (microseconds), got 'soon'"),
    (None, {"x-kserve-priority": "high"}, "the x-kserve-priority header must be a non-negative integer, got 'high'"),
    (None, {"x-kserve-priority": "-1"}, "the x-kserve-priority header must be a non-negative integer, got '-1'"),
    (None, {"x-kserve-timeout-us": "1e3"}, "the x-kserve-timeout-us header must be a non-negative integer, got '1e3'"),
])
def test_a_bad_ask_is_invalid_input_naming_it(parameters, headers, message):
    with pytest.raises(InvalidInput) as info:
        request_asks(parameters, headers)
    assert str(info.value) == message


# --- Scheduler ---------------------------------------------------------------------------------------------------
class _Model:
    def __init__(self, scheduling: Any = None, max_batch_size: Optional[int] = None):
        self.scheduling, self.max_batch_size = scheduling, max_batch_size


def _admit(scheduler: Scheduler, model: Any, parameters: Optional[dict] = None, headers: Optional[dict] = None):
    async def admit():
        return scheduler.admit("m", model, parameters, headers or {})

    return asyncio.run(admit())


def test_a_model_that_limits_nothing_gets_no_ticket_and_one_that_does_gets_its_level_and_timeout():
    scheduler = Scheduler()
    assert _admit(scheduler, _Model()) == (None, None)
    limited = _Model({"instance_count": 1, "priority_levels": 2})
    ticket, deadline = _admit(scheduler, limited, {"priority": 1, "timeout": 50_000})
    assert (ticket.level, ticket.timeout, ticket.queue.slots) == (0, 0.05, 1)
    assert deadline.seconds == 0.05 and deadline.source == "the request's timeout parameter"
    assert _admit(scheduler, limited)[0].queue is ticket.queue  # one queue per model


def test_the_servers_defaults_apply_to_a_model_that_declares_no_policy_and_batching_multiplies_the_slots():
    scheduler = Scheduler(SchedulingPolicy(instance_count=2), request_timeout_seconds=3)
    ticket, deadline = _admit(scheduler, _Model(max_batch_size=4))
    assert ticket.queue.slots == 8 and ticket.timeout is None
    assert deadline.seconds == 3 and deadline.source == "--request_timeout_seconds"


def test_a_delayed_call_has_no_run_deadline_from_its_timeout():
    scheduler = Scheduler()
    ticket, deadline = _admit(scheduler, _Model(SchedulingPolicy(instance_count=1, timeout_action="DELAY")),
                              {"timeout": 50_000})
    assert ticket.timeout == 0.05 and deadline is None


def test_a_model_with_a_bad_policy_is_refused_naming_the_model():
    with pytest.raises(ValueError, match="unknown model 'm' scheduling field"):
        Scheduler().policy_of("m", _Model({"instance_cout": 1}))
    with pytest.raises(TypeError, match="model 'm': scheduling must be a kserve_sdk.SchedulingPolicy or a dict"):
        Scheduler().policy_of("m", _Model(3))


def test_forget_closes_the_models_queue_and_a_new_model_object_gets_a_new_one():
    scheduler, model = Scheduler(), _Model(SchedulingPolicy(instance_count=1))
    old = _admit(scheduler, model)[0].queue
    scheduler.forget("m", ModelNotReady("m", "it is being unloaded"))
    with pytest.raises(ModelNotReady):
        asyncio.run(old.enter(0, None))
    new = _admit(scheduler, _Model(SchedulingPolicy(instance_count=1)))[0].queue
    assert new is not old


def test_a_call_too_near_its_rejection_to_reach_the_model_in_time_is_rejected_rather_than_started(monkeypatch):
    from kserve_sdk.scheduling import queue as queue_module

    monkeypatch.setattr(queue_module, "START_GUARD_S", 10.0)  # every timeout below 10 s is "too near"

    async def scenario():
        calls = Calls(_queue())
        calls.start("running")
        await _settle()
        hurried, patient = calls.start("hurried", timeout=1.0), calls.start("patient")
        await _settle()
        await calls.finish("running")
        with pytest.raises(QueueTimeout, match="waited 1000 ms in model 'm''s queue"):
            await hurried
        return calls.ran, patient.done()

    ran, patient_done = _run(scenario)
    assert ran == ["running", "patient"] and not patient_done
