"""A logging formatter that writes each record as one JSON object per line (for log collectors).

Named in log_config.json as {"()": "jsonlog.JsonFormatter"}; this folder is on sys.path when the
server runs as ``python model.py``.
"""
import json
import logging
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)
