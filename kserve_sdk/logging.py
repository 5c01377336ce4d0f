"""Logging set-up (KServe's ``kserve.logging``): logger names, the default config, ``configure_logging``.

Loggers: ``kserve`` (server and model messages), ``kserve.trace`` (per-request latency lines) and
Tornado's ``tornado.access`` (one line per HTTP request). ``KSERVE_LOGLEVEL`` sets the level.
"""
import asyncio
import atexit
import json
import logging
import logging.config
import os
import time
from typing import Any, Dict, List, Optional, Union

import yaml

from .constants.constants import KSERVE_LOGLEVEL
from .internals.log_records import info_record

KSERVE_LOGGER_NAME = "kserve"
KSERVE_TRACE_LOGGER_NAME = "kserve.trace"
ACCESS_LOGGER_NAME = "tornado.access"
KSERVE_LOGGER_FORMAT = (
    "%(asctime)s.%(msecs)03d %(process)s %(name)s %(levelname)s "
    "[%(filename)s:%(funcName)s():%(lineno)s] %(message)s"
)
KSERVE_TRACE_LOGGER_FORMAT = "%(asctime)s.%(msecs)03d %(process)s %(name)s %(message)s"
KSERVE_LOGGER_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


class Formatter(logging.Formatter):
    """logging.Formatter that formats each second's date and time once: the server writes a latency
    line and an access line per request, and ``time.strftime`` was a visible part of their cost."""

    _cached_second = -1
    _cached_text = ""
    _cached_fmt: Optional[str] = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._own = (self._fmt, self.datefmt)
        self.iso8601 = False
        self._set_plain()

    def _set_plain(self) -> None:
        #: the default trace format with the default date format: log_info_fast may write its lines itself
        self.plain = (self._fmt == KSERVE_TRACE_LOGGER_FORMAT and self.datefmt == KSERVE_LOGGER_DATE_FORMAT
                      and type(self._style) is logging.PercentStyle)

    def use_iso8601(self, on: bool) -> None:
        """Write the time as ISO 8601 in UTC (``2026-12-01T14:48:19.123Z``, Triton's log_format "ISO8601")
        or, with ``on`` False, as this formatter's own format does."""
        if on == self.iso8601:
            return
        fmt, self.datefmt = self._own
        if on and fmt and type(self._style) is logging.PercentStyle:
            fmt = fmt.replace("%(asctime)s.%(msecs)03d", "%(asctime)s")  # the milliseconds go before the Z
        self._fmt = self._style._fmt = fmt
        self.iso8601 = on
        self._set_plain()
        self._cached_second = -1

    def format(self, record: logging.LogRecord) -> str:
        _write_waiting_lines()  # the per-request lines logged before this record go out before it
        return super().format(record)

    def formatTime(self, record: logging.LogRecord, datefmt: Optional[str] = None) -> str:
        if self.iso8601:
            return f"{self._iso_second(int(record.created))}.{int(record.msecs):03d}Z"
        second = int(record.created)
        if second != self._cached_second or datefmt != self._cached_fmt:
            self._cached_second, self._cached_fmt = second, datefmt
            self._cached_text = super().formatTime(record, datefmt)
        return self._cached_text

    def _iso_second(self, second: int) -> str:
        if second != self._cached_second:  # (use_iso8601 empties the cache of the other format)
            self._cached_second = second
            self._cached_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return self._cached_text

    def second_text(self, now: float) -> str:
        """The date and time of ``now`` (seconds since the epoch) in this formatter's date format."""
        if int(now) == self._cached_second and self.datefmt == self._cached_fmt:
            return self._cached_text
        return self.formatTime(logging.makeLogRecord({"created": now}), self.datefmt)


def _logger_config(handler: str, level: str) -> Dict:
    return {"handlers": [handler], "level": level, "propagate": False}


KSERVE_LOG_CONFIG: Dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "kserve": {"()": "kserve_sdk.logging.Formatter", "fmt": KSERVE_LOGGER_FORMAT,
                   "datefmt": KSERVE_LOGGER_DATE_FORMAT},
        "kserve_trace": {"()": "kserve_sdk.logging.Formatter", "fmt": KSERVE_TRACE_LOGGER_FORMAT,
                         "datefmt": KSERVE_LOGGER_DATE_FORMAT},
    },
    "handlers": {
        "kserve": {"formatter": "kserve", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
        "kserve_trace": {"formatter": "kserve_trace", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
        "access": {"formatter": "kserve_trace", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
    },
    "loggers": {
        KSERVE_LOGGER_NAME: _logger_config("kserve", KSERVE_LOGLEVEL),
        KSERVE_TRACE_LOGGER_NAME: _logger_config("kserve_trace", KSERVE_LOGLEVEL),
        ACCESS_LOGGER_NAME: _logger_config("access", KSERVE_LOGLEVEL),
        "tornado.application": _logger_config("kserve", "INFO"),
        "tornado.general": _logger_config("kserve", "INFO"),
    },
}

logger = logging.getLogger(KSERVE_LOGGER_NAME)
trace_logger = logging.getLogger(KSERVE_TRACE_LOGGER_NAME)


def configure_logging(log_config: Optional[Union[Dict, str]] = None) -> None:
    """Configure the server's loggers.

    ``log_config`` may be a ``logging.config.dictConfig`` dict, the path of a ``.json`` or
    ``.yaml``/``.yml`` file holding one, or the path of a ``logging.config.fileConfig`` file.
    With None, the default configuration is applied unless the ``kserve`` logger already has handlers.
    """
    if log_config is None:
        if logger.handlers:
            return
        logging.config.dictConfig(KSERVE_LOG_CONFIG)
    elif isinstance(log_config, dict):
        logging.config.dictConfig(log_config)
    elif log_config.endswith(".json"):
        with open(log_config) as f:
            logging.config.dictConfig(json.load(f))
    elif log_config.endswith((".yaml", ".yml")):
        with open(log_config) as f:
            logging.config.dictConfig(yaml.safe_load(f))
    else:
        logging.config.fileConfig(log_config, disable_existing_loggers=False)


_pid = os.getpid()


def _after_fork() -> None:
    global _pid
    _pid = os.getpid()
    _pending.clear()  # the parent writes its own lines


os.register_at_fork(after_in_child=_after_fork)


def log_info_fast(target: logging.Logger, msg: str, args: Any) -> None:
    """``target.info(msg, args)`` for the lines logged per request (access and latency), at a fraction of
    the cost. With the default configuration (one StreamHandler and the default trace format) the line
    is formatted here and written to the stream with the other lines of the next few milliseconds
    (:func:`_write_soon`); otherwise a record goes through the handlers as usual, without
    the look-up of the caller's file and line (a frame walk that says nothing here). A message that
    cannot be formatted raises (TypeError, KeyError or ValueError) in the first case."""
    if not target.isEnabledFor(logging.INFO) or target.disabled:
        return
    handler = _plain_handler(target)
    if handler is not None:
        now = time.time()
        _write_soon(handler, f"{handler.formatter.second_text(now)}.{int((now - int(now)) * 1000):03d} {_pid} "
                             f"{target.name} {msg % args if args else msg}\n")
        return
    target.handle(info_record(target, msg, args))


#: How long a per-request line may wait for others to share its write (one system call for them all).
LINES_WAIT_S = 0.01

#: event loop -> {handler: lines waiting for their write}
_pending: Dict[Any, Dict[logging.StreamHandler, List[str]]] = {}


def _write_soon(handler: logging.StreamHandler, line: str) -> None:
    """Write ``line`` within :data:`LINES_WAIT_S`, with the other lines logged meanwhile: under load one
    write (one system call) carries the lines of many requests, in order. A record formatted by our
    :class:`Formatter` first writes what waits, so the log keeps its order. Off an event loop's thread
    the line is written at once; :func:`flush_pending` writes what waits (the server calls it as it
    stops)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _write(handler, [line])
        return
    waiting = _pending.get(loop)
    if waiting is None:
        waiting = _pending[loop] = {}
        loop.call_later(LINES_WAIT_S, _write_pending, loop)
    lines = waiting.get(handler)
    if lines is None:
        waiting[handler] = [line]
    else:
        lines.append(line)


def _write_pending(loop: Any) -> None:
    for handler, lines in _pending.pop(loop, {}).items():
        _write(handler, lines)


def _write_waiting_lines() -> None:
    """On an event loop's thread, write the lines waiting there now (only that thread touches them)."""
    if _pending:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        _write_pending(loop)


def flush_pending() -> None:
    """Write every per-request line still waiting (a stopping server's last answers)."""
    for loop in list(_pending):
        _write_pending(loop)


atexit.register(flush_pending)


def _write(handler: logging.StreamHandler, lines: List[str]) -> None:
    try:
        with handler.lock:
            handler.stream.write("".join(lines))
            handler.stream.flush()
    except Exception:  # a closed or broken stream must not fail the request (logging.Handler's rule)
        handler.handleError(logging.makeLogRecord({"msg": lines[0].rstrip("\n")}))


def _plain_handler(target: logging.Logger) -> Optional[logging.StreamHandler]:
    """The logger's only handler when it writes the default trace format and nothing else can see the
    record (no filters, no propagation); None otherwise."""
    handlers = target.handlers
    if len(handlers) != 1 or target.propagate or target.filters:
        return None
    handler = handlers[0]
    if (type(handler) is logging.StreamHandler and not handler.filters and handler.level <= logging.INFO
            and type(handler.formatter) is Formatter and handler.formatter.plain):
        return handler
    return None
