"""Triton's trace settings (``/v2[/models/<m>]/trace/setting``, gRPC ``TraceSetting``), mapped onto sampling.

``trace_level`` ``OFF`` samples no call; ``trace_rate`` N passes one call in N on to the sampler of
``OTEL_TRACES_SAMPLER``; ``trace_count`` N lets N more calls be traced (-1: no limit); ``log_frequency`` is
kept and reported only, since spans leave through the OpenTelemetry exporter, not a file. A model's own
settings start as a copy of the global ones; a setting set to null goes back to the global value.
Each worker applies every change (the data plane shares it) and counts its own calls.
"""
import itertools
from typing import Any, Dict, List, Optional

from ..errors import InvalidInput

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
#: The settings a client may change, with their lowest allowed value (for the integer ones).
_INTEGERS = {"trace_rate": 1, "trace_count": -1, "log_frequency": 0}
NAMES = ("trace_level", *_INTEGERS)
TRACE_MODE = "opentelemetry"

Settings = Dict[str, Any]  # name -> a string, or a list of strings for trace_level


def _level(value: Any) -> List[str]:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not levels or not all(isinstance(v, str) and v.upper() in LEVELS
                                                             for v in levels):
        raise InvalidInput(f"trace_level must be a list of {', '.join(LEVELS)}; got {value!r}")
    levels = [v.upper() for v in levels]
    return ["OFF"] if "OFF" in levels else levels


def _integer(name: str, value: Any) -> str:
    lowest = _INTEGERS[name]
    text = value[0] if isinstance(value, list) and len(value) == 1 else value
    number: Optional[int] = None
    if isinstance(text, str) and text.strip().lstrip("-").isdigit():
        number = int(text)
    elif isinstance(text, int) and not isinstance(text, bool):
        number = text
    if number is None or number < lowest:
        raise InvalidInput(f"{name} must be an integer of at least {lowest} (a string such as \"100\"); got {value!r}")
    return str(number)


def validated(update: Any, tracing_on: bool) -> Dict[str, Optional[Any]]:
    """``update`` (a client's settings: name -> value, None to clear) checked and normalised; InvalidInput
    names the first bad setting."""
    if not isinstance(update, dict):
        raise InvalidInput(f"the trace settings must be a JSON object of setting names and values; got "
                           f"{type(update).__name__}")
    out: Dict[str, Optional[Any]] = {}
    for name, value in update.items():
        if name == "trace_mode":
            raise InvalidInput(f"trace_mode cannot be changed: this server traces with {TRACE_MODE}")
        if name == "trace_file":
            raise InvalidInput("trace_file is not supported: spans are exported by OpenTelemetry "
                               "(set OTEL_EXPORTER_OTLP_ENDPOINT), not written to a file")
        if name not in NAMES:
            raise InvalidInput(f"unknown trace setting {name!r}; the settings are {', '.join(NAMES)}")
        if value is None:
            out[name] = None
        elif name == "trace_level":
            out[name] = _level(value)
        else:
            out[name] = _integer(name, value)
    if not tracing_on and out.get("trace_level") not in (None, ["OFF"]):
        raise InvalidInput("trace_level cannot be turned on: tracing is not configured (set "
                           "OTEL_EXPORTER_OTLP_ENDPOINT, with kserve-sdk[tracing] installed)")
    return out


class TraceSettings:
    """The global settings and each model's own, and the sampling decision they make for a call."""

    def __init__(self, tracing_on: bool = False):
        self.tracing_on = tracing_on
        self.reset(tracing_on)

    def reset(self, tracing_on: bool) -> None:
        """The defaults: every call is offered to the sampler when tracing is on; none when it is off."""
        self.tracing_on = tracing_on
        self.scopes: Dict[str, Settings] = {"": {
            "trace_level": ["TIMESTAMPS"] if tracing_on else ["OFF"], "trace_rate": "1", "trace_count": "-1",
            "log_frequency": "0"}}
        self._counters: Dict[str, Any] = {}

    def view(self, model_name: str = "") -> Settings:
        """The settings in force for ``model_name`` (global with ""), as Triton reports them."""
        resolved = dict(self.scopes[""])
        resolved.update(self.scopes.get(model_name, {}) if model_name else {})
        resolved["trace_mode"] = TRACE_MODE
        return resolved

    def updated(self, model_name: str, update: Dict[str, Optional[Any]]) -> Settings:
        """The settings of ``model_name``'s scope ("" global) once the validated ``update`` is applied."""
        if model_name:
            scope = dict(self.scopes.get(model_name) or self.scopes[""])  # first time: a copy of the global
        else:
            scope = dict(self.scopes[""])
        for name, value in update.items():
            if value is not None:
                scope[name] = value
            elif model_name:
                scope.pop(name, None)  # back to the global value
        return scope

    def set_scope(self, model_name: str, scope: Settings) -> None:
        """Put ``scope`` (from :meth:`updated`, maybe another worker's) in force for ``model_name``."""
        if model_name:
            self.scopes[model_name] = dict(scope)
        else:
            self.scopes[""].update(scope)
        self._counters.pop(model_name, None)

    def admits(self, model_name: Optional[str]) -> bool:
        """Whether a call to ``model_name`` may be sampled: level not OFF, traces left, its turn in the rate."""
        key = model_name if model_name in self.scopes else ""
        scope = self.scopes[key]
        level, rate, count = scope.get("trace_level"), scope.get("trace_rate"), scope.get("trace_count")
        if key:  # a model's scope falls back to the global one for the settings it cleared
            defaults = self.scopes[""]
            level = level or defaults["trace_level"]
            rate, count = rate or defaults["trace_rate"], count or defaults["trace_count"]
        if level == ["OFF"] or count == "0":
            return False
        if rate != "1":
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = itertools.count()
            if next(counter) % int(rate):
                return False
        if count != "-1":
            owner = scope if "trace_count" in scope else self.scopes[""]
            owner["trace_count"] = str(int(count) - 1)
        return True
