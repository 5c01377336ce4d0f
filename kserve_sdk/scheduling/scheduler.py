"""Which calls of which model wait, at what priority, for how long: the scheduler of one worker.

The data plane asks :meth:`Scheduler.admit` for every model call. A model whose merged policy sets no
``instance_count`` has no queue and pays for nothing but this lookup; the others get a :class:`Ticket`
that the model call redeems for a slot (:mod:`kserve_sdk.scheduling.queue`) before it runs.
"""
from contextvars import ContextVar
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from ..model_call import Deadline
from .policy import SchedulingPolicy, request_asks
from .queue import ModelQueue

#: Set while background work (a durable job) calls a model: its calls wait below every priority, so they run
#: only when no other call of the model waits.
in_background: ContextVar[bool] = ContextVar("in_background", default=False)


class Ticket(NamedTuple):
    """A call's place in its model's queue: the queue, its level (0 is the highest), how long it may wait, and
    when (``time.perf_counter()``) the call arrived, which its timeout counts from (None: from its wait)."""

    queue: ModelQueue
    level: int
    timeout: Optional[float]
    since: Optional[float] = None


class _Plan(NamedTuple):
    model: Any
    policy: SchedulingPolicy
    queue: Optional[ModelQueue]


class Scheduler:
    """Per-model queues under each model's ``scheduling`` policy over the server's ``defaults``."""

    def __init__(self, defaults: Optional[SchedulingPolicy] = None, request_timeout_seconds: Optional[float] = None):
        self.defaults = defaults or SchedulingPolicy()
        self.request_timeout_seconds = request_timeout_seconds or None
        #: Seconds a slot freed by a foreground call is kept from background work (``--job_yield_ms``), for
        #: the queues made from now on.
        self.background_yield = 0.0
        self._plans: Dict[str, _Plan] = {}

    def policy_of(self, model_name: str, model: Any) -> SchedulingPolicy:
        """The model's merged policy (its own ``scheduling`` over the server's defaults)."""
        return self._plan(model_name, model).policy

    def admit(self, model_name: str, model: Any, parameters: Optional[Mapping[str, Any]],
              headers: Mapping[str, str], since: Optional[float] = None) -> Tuple[Optional[Ticket], Optional[Deadline]]:
        """The ticket (None: the model never queues) and the run's deadline of a call asking, through its
        v2 ``parameters`` or its headers, for a priority and a timeout; a bad ask is InvalidInput. Both count
        from ``since`` (``time.perf_counter()`` when the call arrived), else from now."""
        plan = self._plans.get(model_name)
        if plan is None or plan.model is not model:
            plan = self._plan(model_name, model)
        policy = plan.policy
        priority, timeout_us = request_asks(parameters, headers)
        if plan.queue is None:
            ticket = None
            if priority is not None:
                policy.priority_of(priority)  # checked, though the model never queues
        else:
            level = plan.queue.background if in_background.get() else policy.priority_of(priority)
            ticket = Ticket(plan.queue, level, policy.queue_timeout(timeout_us), since)
        run_limit, source = self.request_timeout_seconds, "--request_timeout_seconds"
        if run_limit is None and not timeout_us:
            return ticket, None
        if timeout_us and policy.allow_timeout_override is not False and policy.timeout_action != "DELAY":
            asked = timeout_us / 1e6
            if run_limit is None or asked < run_limit:
                run_limit, source = asked, "the request's timeout parameter"
        return ticket, None if run_limit is None else Deadline.after(run_limit, source, since)

    def forget(self, model_name: str, error: BaseException) -> None:
        """The model is unloaded: its waiting calls (and any that still reach its old queue) fail with ``error``."""
        plan = self._plans.pop(model_name, None)
        if plan is not None and plan.queue is not None:
            plan.queue.close(error)

    def _plan(self, model_name: str, model: Any) -> _Plan:
        plan = self._plans.get(model_name)
        if plan is not None and plan.model is model:
            return plan
        own = getattr(model, "scheduling", None)
        if own is None:
            own = SchedulingPolicy()
        elif isinstance(own, Mapping):
            own = SchedulingPolicy.from_mapping(own, f"model '{model_name}' scheduling")
        elif not isinstance(own, SchedulingPolicy):
            raise TypeError(f"model '{model_name}': scheduling must be a kserve_sdk.SchedulingPolicy or a dict, "
                            f"not {type(own).__name__}")
        policy = own.over(self.defaults)
        queue = None
        if policy.instance_count:
            batch = getattr(model, "max_batch_size", None) or 1
            queue = ModelQueue(model_name, policy, policy.instance_count * max(int(batch), 1), self.background_yield)
        plan = self._plans[model_name] = _Plan(model, policy, queue)
        return plan
