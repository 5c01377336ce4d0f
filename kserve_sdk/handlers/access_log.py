"""One access-log line and the request metrics for every HTTP request, whichever path answered it."""
import logging
from typing import Any, Dict, Mapping, Optional

from tornado.httputil import HTTPServerRequest
from tornado.web import RequestHandler

from .. import metrics
from ..dataplane import DataPlane
from ..internals.tornado_headers import response_headers
from ..logging import ACCESS_LOGGER_NAME, log_info_fast

access_logger = logging.getLogger(ACCESS_LOGGER_NAME)

#: The default ``--access_log_format``. Fields: client, method, path, query, status, bytes,
#: duration_ms, request_id, protocol, endpoint, model, http_version, user_agent.
DEFAULT_ACCESS_LOG_FORMAT = '%(client)s "%(method)s %(path)s HTTP/%(http_version)s" %(status)s %(bytes)s %(duration_ms).3fms'


class RequestLog:
    """Logs answered requests in ``--access_log_format`` and counts them in the request metrics."""

    def __init__(self, dataplane: DataPlane, access_log_format: Optional[str] = None):
        self.dataplane = dataplane
        self.format = access_log_format or DEFAULT_ACCESS_LOG_FORMAT

    def handler_finished(self, handler: RequestHandler) -> None:
        """Tornado's ``log_function``: called when a RequestHandler has answered."""
        path_args = getattr(handler, "path_args", None)  # unset when the URL did not decode
        self.finished(handler.request, handler.get_status(), response_headers(handler), getattr(handler, "protocol", "rest_v2"),
                      getattr(handler, "endpoint", "other"), path_args[0] if path_args else None,
                      getattr(handler, "in_flight_counted", False))

    def finished(self, request: HTTPServerRequest, status: int, response_headers: Mapping[str, str], protocol: str,
                 endpoint: str, model_name: Optional[str], in_flight_counted: bool = True) -> None:
        """A request was answered with ``status`` and ``response_headers``."""
        duration = request.request_time()
        model = self.dataplane.model_label(model_name)
        metrics.request_finished(model, protocol, endpoint, str(status), duration, started=in_flight_counted)
        if access_logger.isEnabledFor(logging.INFO):
            fields = access_log_fields(request, status, response_headers, protocol, endpoint, model, duration)
            try:
                log_info_fast(access_logger, self.format, fields)
            except (KeyError, ValueError, TypeError) as e:
                access_logger.info("bad --access_log_format %r: %s", self.format, e)


def access_log_fields(request: HTTPServerRequest, status: int, response_headers: Mapping[str, str], protocol: str,
                      endpoint: str, model: str, duration: float) -> Dict[str, Any]:
    """The named fields an access log format can use."""
    return {
        "client": request.remote_ip, "method": request.method, "path": request.path, "query": request.query,
        "status": status, "bytes": response_headers.get("Content-Length", "-"),
        "duration_ms": duration * 1000, "request_id": response_headers.get("x-request-id", "-"),
        "protocol": protocol, "endpoint": endpoint, "model": model or "-",
        "http_version": request.version.rpartition("/")[2], "user_agent": request.headers.get("User-Agent", "-"),
    }
