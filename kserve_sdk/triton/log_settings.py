"""Triton's logging extension over the server's loggers: the settings in force (``log_info``,
``log_warning``, ``log_error``, ``log_verbose_level``, ``log_format``, ``log_file``), a change checked
setting by setting, and a change applied to this process's loggers.

The data plane shares an applied change with the other workers; every protocol reads and writes the
settings through it.
"""
import logging
from typing import Any, Dict, Optional

from ..errors import InvalidInput
from ..logging import ACCESS_LOGGER_NAME, KSERVE_LOGGER_NAME, KSERVE_TRACE_LOGGER_NAME, Formatter, logger

#: The settings, in the order Triton answers them.
SETTINGS = ("log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format")
#: The values of ``log_format``: ours as it is, or times in ISO 8601 (UTC).
FORMATS = ("default", "ISO8601")
_MAX_VERBOSE = 2 ** 32 - 1  # Triton's uint32
#: The loggers the settings govern: the server's messages, latency lines, access lines, Tornado's own.
LOGGERS = (KSERVE_LOGGER_NAME, KSERVE_TRACE_LOGGER_NAME, ACCESS_LOGGER_NAME, "tornado.application",
           "tornado.general")

_LEVEL_SETTINGS = ("log_info", "log_warning", "log_error", "log_verbose_level")

_current: Optional[Dict[str, Any]] = None  # None until first needed: then what the loggers' levels say
_startup: Dict[str, Any] = {}  # what a setting sent as null goes back to
_startup_levels: Dict[str, int] = {}  # each logger's own level then (a log config may give them different ones)


def current() -> Dict[str, Any]:
    """The log settings in force in this process, as Triton answers them."""
    global _current
    if _current is None:
        _current = _from_loggers()
        _startup.update(_current)
        _startup_levels.update({name: logging.getLogger(name).level for name in LOGGERS})
    return dict(_current)


def _from_loggers() -> Dict[str, Any]:
    """The settings that the ``kserve`` logger's level (``KSERVE_LOGLEVEL``, a log config) amounts to (the
    verbose level as :func:`_levels` maps it: DEBUG is 1)."""
    level = logging.getLogger(KSERVE_LOGGER_NAME).getEffectiveLevel()
    return {"log_file": "", "log_info": level <= logging.INFO, "log_warning": level <= logging.WARNING,
            "log_error": level <= logging.ERROR, "log_verbose_level": max(0, logging.DEBUG + 1 - level),
            "log_format": "default"}


def checked(changes: Any) -> Dict[str, Any]:
    """The settings ``changes`` asks for, each checked (a null value stands for the setting at start-up);
    InvalidInput names the first unknown setting or wrong value."""
    if not isinstance(changes, dict):
        raise InvalidInput('the log settings must be a JSON object, such as {"log_verbose_level": 1}')
    current()  # the first time, this notes the settings at start-up
    out = {}
    for key, value in changes.items():
        if key not in SETTINGS:
            raise InvalidInput(f"unknown log setting {key!r}{_did_you_mean(key)}: the settings are "
                               f"{', '.join(SETTINGS)}")
        out[key] = _startup[key] if value is None else _checked_value(key, value)
    return out


def _did_you_mean(key: str) -> str:
    singular = key[:-1] if key.endswith("s") else ""  # Triton's docs spell two of them log_warnings, log_errors
    return f" (did you mean {singular!r}?)" if singular in SETTINGS else ""


def _checked_value(key: str, value: Any) -> Any:
    if key == "log_file":
        if not isinstance(value, str):
            raise InvalidInput(f"log setting 'log_file' must be a string, got {value!r}")
        if value:
            raise InvalidInput(f"log setting 'log_file' ({value!r}) is not supported: this server logs to its "
                               "standard output and error; to log to a file, start it with --log_config_file")
    elif key == "log_verbose_level":
        if type(value) is not int or not 0 <= value <= _MAX_VERBOSE:
            raise InvalidInput(f"log setting 'log_verbose_level' must be an integer from 0 to {_MAX_VERBOSE}, "
                               f"got {value!r}")
    elif key == "log_format":
        if not isinstance(value, str) or value not in FORMATS:
            raise InvalidInput(f"log setting 'log_format' must be one of {', '.join(FORMATS)}, got {value!r}")
    elif type(value) is not bool:
        raise InvalidInput(f"log setting {key!r} must be true or false, got {value!r}")
    return value


def apply(changes: Dict[str, Any]) -> Dict[str, Any]:
    """Apply checked settings to this process's loggers at once; returns every setting now in force."""
    global _current
    settings = {**current(), **changes}
    _current = settings
    _set_levels(settings)
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler.formatter, Formatter):
                handler.formatter.use_iso8601(settings["log_format"] == "ISO8601")
    logger.info("log settings now %s", settings)
    return dict(settings)


def _set_levels(settings: Dict[str, Any]) -> None:
    """Give the loggers the levels the settings ask for; while those are the start-up ones, each logger has
    its own start-up level again (a change of log_format alone leaves the levels as they were)."""
    as_at_start = all(settings[key] == _startup[key] for key in _LEVEL_SETTINGS)
    threshold, level_filter = _levels(settings)
    for name in LOGGERS:
        target = logging.getLogger(name)
        target.setLevel(_startup_levels[name] if as_at_start else threshold)
        for old in [f for f in target.filters if isinstance(f, _ToggleFilter)]:
            target.removeFilter(old)
        if level_filter is not None:
            target.addFilter(level_filter)


def _levels(settings: Dict[str, Any]):
    """The loggers' level, and a filter when the settings leave a gap above it (e.g. info on, warnings off).

    Verbose level N lets records down to logging level 11 - N through: DEBUG at 1, and a model's
    ``logger.log(9, ...)`` at 2."""
    verbose = settings["log_verbose_level"]
    enabled = {"error": settings["log_error"], "warning": settings["log_warning"], "info": settings["log_info"],
               "verbose": verbose > 0}
    lowest = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO,
              "verbose": max(1, logging.DEBUG + 1 - verbose)}
    on = [kind for kind, is_on in enabled.items() if is_on]
    threshold = min((lowest[kind] for kind in on), default=logging.CRITICAL + 1)
    above = [kind for kind in enabled if lowest[kind] >= threshold]
    return threshold, None if all(enabled[kind] for kind in above) else _ToggleFilter(enabled)


class _ToggleFilter(logging.Filter):
    """Drops the records of the kinds turned off (only when the level alone cannot say it)."""

    def __init__(self, enabled: Dict[str, bool]):
        super().__init__()
        self.enabled = enabled

    def filter(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        kind = ("error" if level >= logging.ERROR else "warning" if level >= logging.WARNING
                else "info" if level >= logging.INFO else "verbose")
        return self.enabled[kind]
