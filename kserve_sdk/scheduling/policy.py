"""A model's scheduling policy: how many of its calls run at once and how the others wait.

The fields are Triton's (``instance_group.count``, ``dynamic_batching.priority_levels``,
``default_queue_policy``), so a Triton user reads them as they know them. A model declares its own with
``model.scheduling = SchedulingPolicy(...)``; a field it leaves out takes the server's default, set by the
flags of the same names (``--max_queue_size`` ...; ``--model_instance_count`` for ``instance_count``).
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import InvalidInput

TIMEOUT_ACTIONS = ("REJECT", "DELAY")

#: The fields of a policy and their defaults: nothing is limited, as before there was a scheduler.
DEFAULTS: Dict[str, Any] = {
    "instance_count": 0,
    "max_queue_size": 0,
    "priority_levels": 0,
    "default_priority_level": 0,
    "default_timeout_microseconds": 0,
    "timeout_action": "REJECT",
    "allow_timeout_override": True,
}


@dataclasses.dataclass(frozen=True)
class SchedulingPolicy:
    """How a model's calls are scheduled (Triton's names; None: the server's default for that field).

    - ``instance_count``: calls of the model that run at once (0: no limit). Calls beyond it wait in the
      model's queue. With adaptive batching, ``instance_count × max_batch_size`` calls are let in, to batch.
    - ``max_queue_size``: calls that may wait (0: no limit); one more is answered 503 / UNAVAILABLE at once.
    - ``priority_levels``: how many priorities a request may ask for (1 is the highest; 0: no priorities,
      a request's priority is ignored).
    - ``default_priority_level``: the priority of a request that asks for none (0: the lowest level).
    - ``default_timeout_microseconds``: how long a call may wait for its turn (0: no limit).
    - ``timeout_action``: what happens to a call whose timeout passes while it waits: ``"REJECT"`` (answered
      504 / DEADLINE_EXCEEDED without running) or ``"DELAY"`` (it runs after the calls of its priority).
    - ``allow_timeout_override``: whether a request's own ``timeout`` parameter may shorten the default.
    """

    instance_count: Optional[int] = None
    max_queue_size: Optional[int] = None
    priority_levels: Optional[int] = None
    default_priority_level: Optional[int] = None
    default_timeout_microseconds: Optional[int] = None
    timeout_action: Optional[str] = None
    allow_timeout_override: Optional[bool] = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                _check_field(field.name, value)

    @classmethod
    def from_mapping(cls, fields: Mapping[str, Any], where: str = "scheduling policy") -> "SchedulingPolicy":
        """A policy from a mapping of its fields (a settings file, flags); an unknown field is an error
        naming it and the known ones."""
        unknown = sorted(set(fields) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown {where} field(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(DEFAULTS)}")
        return cls(**fields)

    def over(self, defaults: "SchedulingPolicy") -> "SchedulingPolicy":
        """This policy with the fields it leaves out taken from ``defaults``, then from :data:`DEFAULTS`;
        checked as a whole (a default priority within the levels)."""
        merged = {name: _first(getattr(self, name), getattr(defaults, name), default)
                  for name, default in DEFAULTS.items()}
        levels, default_level = merged["priority_levels"], merged["default_priority_level"]
        if default_level > levels and levels:
            raise ValueError(f"default_priority_level {default_level} is above priority_levels {levels}")
        return SchedulingPolicy(**merged)

    def priority_of(self, asked: Any) -> int:
        """The queue level (0 is the highest) of a request that asked for priority ``asked`` (None or 0: the
        default). A priority above ``priority_levels`` is refused naming it."""
        levels = self.priority_levels or 0
        if asked is None or asked == 0:
            default = self.default_priority_level or levels
            return max(default, 1) - 1 if levels else 0
        if type(asked) is not int or asked < 0:
            raise InvalidInput(f"the 'priority' parameter must be a non-negative integer, got {asked!r}")
        if not levels:
            return 0
        if asked > levels:
            raise InvalidInput(f"priority {asked} is out of range: the model has priority_levels {levels} "
                               f"(1 is the highest, {levels} the lowest)")
        return asked - 1

    def queue_timeout(self, asked_us: Optional[int]) -> Optional[float]:
        """Seconds a call may wait: the request's ``timeout`` (microseconds) when the policy lets it override
        the default and it is shorter; None when neither sets one."""
        default_us = self.default_timeout_microseconds or 0
        if asked_us and (not default_us or (self.allow_timeout_override and asked_us < default_us)):
            return asked_us / 1e6
        return default_us / 1e6 or None

    def triton_config(self, model_name: str = "") -> Dict[str, Any]:
        """The model configuration fields of this (merged) policy, in Triton's JSON names and shape (those
        of Triton's ``GET /v2/models/{m}/config``: its 64-bit fields as numbers, which proto3 JSON parsing
        takes too): ``instance_group`` when ``instance_count`` is set (one CPU group named after the model,
        as Triton names the group it adds), and ``dynamic_batching`` with the priorities and
        ``default_queue_policy`` when any field differs from :data:`DEFAULTS`. A policy that limits nothing
        adds nothing: the configuration then reads as it did before there was a scheduler."""
        config: Dict[str, Any] = {}
        if self.instance_count:
            config["instance_group"] = [{"name": model_name or "instance", "kind": "KIND_CPU",
                                         "count": int(self.instance_count)}]
        queue_policy = {
            "timeout_action": self.timeout_action or "REJECT",
            "default_timeout_microseconds": int(self.default_timeout_microseconds or 0),
            "allow_timeout_override": bool(self.allow_timeout_override),
            "max_queue_size": int(self.max_queue_size or 0),
        }
        batching: Dict[str, Any] = {
            "priority_levels": int(self.priority_levels or 0),
            "default_priority_level": int(self.default_priority_level or 0),
            "default_queue_policy": queue_policy,
        }
        if any(getattr(self, name) != default for name, default in DEFAULTS.items()):
            config["dynamic_batching"] = batching
        return config


def _first(*values: Any) -> Any:
    return next(value for value in values if value is not None)


def _check_field(name: str, value: Any) -> None:
    if name == "timeout_action":
        if value not in TIMEOUT_ACTIONS:
            raise ValueError(f"timeout_action must be one of {', '.join(TIMEOUT_ACTIONS)}, got {value!r}")
    elif name == "allow_timeout_override":
        if not isinstance(value, bool):
            raise ValueError(f"allow_timeout_override must be true or false, got {value!r}")
    elif type(value) is not int or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def request_asks(parameters: Optional[Mapping[str, Any]], headers: Mapping[str, str]) -> Tuple[Any, Optional[int]]:
    """The priority and the timeout (microseconds) a request asks for: its Open Inference Protocol
    parameters ``priority`` and ``timeout`` (as tritonclient sends them), else the headers
    ``x-kserve-priority`` and ``x-kserve-timeout-us`` (v1, OpenAI). A timeout that is not a non-negative
    integer is refused naming it."""
    priority = timeout = None
    if parameters:
        priority, timeout = parameters.get("priority"), parameters.get("timeout")
    if priority is None and "x-kserve-priority" in headers:
        priority = _header_int(headers["x-kserve-priority"], "x-kserve-priority")
    if timeout is None and "x-kserve-timeout-us" in headers:
        timeout = _header_int(headers["x-kserve-timeout-us"], "x-kserve-timeout-us")
    if timeout is not None and (type(timeout) is not int or timeout < 0):
        raise InvalidInput(f"the 'timeout' parameter must be a non-negative integer (microseconds), got {timeout!r}")
    return priority, timeout


def _header_int(text: str, header: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"the {header} header must be a non-negative integer, got {text!r}") from None
    if value < 0:
        raise InvalidInput(f"the {header} header must be a non-negative integer, got {text!r}")
    return value
