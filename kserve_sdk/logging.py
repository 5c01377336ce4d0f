"""Logging set-up (KServe's ``kserve.logging``): logger names, the default config, ``configure_logging``.

Loggers: ``kserve`` (server and model messages), ``kserve.trace`` (per-request latency lines) and
Tornado's ``tornado.access`` (one line per HTTP request). ``KSERVE_LOGLEVEL`` sets the level.
"""
import json
import logging
import logging.config
from typing import Dict, Optional, Union

import yaml

from .constants.constants import KSERVE_LOGLEVEL

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

    def formatTime(self, record: logging.LogRecord, datefmt: Optional[str] = None) -> str:
        second = int(record.created)
        if second != self._cached_second or datefmt != self._cached_fmt:
            self._cached_second, self._cached_fmt = second, datefmt
            self._cached_text = super().formatTime(record, datefmt)
        return self._cached_text

    _cached_fmt: Optional[str] = None


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
