"""INFO records for the per-request log lines, built without ``Logger.makeRecord``.

Reaches into the standard library's logging: ``logging._startTime`` (the time ``relativeCreated``
counts from) and the attribute set of ``LogRecord``, whose ``__init__`` is skipped: a record is a copy
of the fields that do not change between records of one logger and thread, with the time and the
message written in.

Why: the access and latency lines are logged for every request; when their logger is configured (a
handler, a filter, a format of the user's) each one needs a record, and ``makeRecord`` asks for the
thread, process and task names, the time and more each time, while a copy only writes what changes
(the figure is in docs/performance.md).

Plain path (``KSERVE_SDK_INTERNALS=off``): ``Logger.makeRecord``.
"""
import logging
import os
import threading
import time
from typing import Any, Dict, Tuple

from . import ENABLED

#: (logger name, thread id) -> the fields of a record logged there that do not change between records
_fixed_fields: Dict[Tuple[str, int], Dict] = {}
os.register_at_fork(after_in_child=_fixed_fields.clear)


def info_record(target: logging.Logger, msg: str, args: Any) -> logging.LogRecord:
    """An INFO record of ``msg % args`` for ``target``, without the caller's file and line."""
    if not ENABLED or logging.getLogRecordFactory() is not logging.LogRecord:  # someone adds fields: let them
        return target.makeRecord(target.name, logging.INFO, "", 0, msg, args, None)
    key = (target.name, threading.get_ident())
    fixed = _fixed_fields.get(key)
    if fixed is None:
        if len(_fixed_fields) > 256:  # threads come and go
            _fixed_fields.clear()
        fixed = _fixed_fields[key] = vars(target.makeRecord(target.name, logging.INFO, "", 0, "", (), None))
    record = logging.LogRecord.__new__(logging.LogRecord)
    fields = record.__dict__
    fields.update(fixed)
    now = time.time()
    fields["created"], fields["msecs"] = now, int((now - int(now)) * 1000) + 0.0
    fields["relativeCreated"] = (now - logging._startTime) * 1000
    fields["msg"], fields["args"] = msg, args
    return record
