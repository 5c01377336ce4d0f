"""One access-log line and the request metrics for every HTTP request, whichever path answered it."""
import logging
from typing import Any, Dict, Mapping, Optional

from tornado.httputil import HTTPServerRequest
from tornado.web import RequestHandler

from ..dataplane import DataPlane
from ..internals.tornado_headers import response_headers
from ..lifecycle import Call
from ..logging import ACCESS_LOGGER_NAME, log_info_fast
from ..security.audit import REST_ENDPOINTS as AUDITED_ENDPOINTS
from ..security.audit import audit

access_logger = logging.getLogger(ACCESS_LOGGER_NAME)

#: The default ``--access_log_format``. Fields: client, method, path, query, status, bytes,
#: duration_ms, request_id, protocol, endpoint, model, http_version, user_agent.
DEFAULT_ACCESS_LOG_FORMAT = ('%(client)s "%(method)s %(path)s HTTP/%(http_version)s" %(status)s %(bytes)s '
                             '%(duration_ms).3fms')


class RequestLog:
    """Closes the call of every answered HTTP request (counting it in the request metrics) and logs it
    in ``--access_log_format``: one place for the handlers, the fast path and the body limit. A management
    call (load, unload, a settings change, shared-memory registration) also gets its audit line."""

    def __init__(self, dataplane: DataPlane, access_log_format: Optional[str] = None):
        self.dataplane = dataplane
        self.format = access_log_format or DEFAULT_ACCESS_LOG_FORMAT

    def handler_finished(self, handler: RequestHandler) -> None:
        """Tornado's ``log_function``: called when a RequestHandler has answered."""
        open_call = getattr(handler, "open_call", None)
        if open_call is not None:
            call = open_call()
        else:  # a handler of Tornado's own (static files): counted all the same
            call = self.dataplane.open_call(getattr(handler, "protocol", "rest_v2"),
                                            getattr(handler, "endpoint", "other"))
        self.finished(call, handler.request, handler.get_status(), response_headers(handler))

    def finished(self, call: Call, request: HTTPServerRequest, status: int,
                 response_headers: Mapping[str, str]) -> None:
        """``request``'s answer went out with ``status`` and ``response_headers``: its call closes (if its
        adapter has not closed it before writing the answer) and the answer is logged."""
        call.close(str(status))
        if call.endpoint in AUDITED_ENDPOINTS and request.method == "POST":  # a management call (security/audit.py)
            audit(call.request_id, request.remote_ip or "-", f"{request.method} {request.path}", str(status))
        duration = call.duration
        if access_logger.isEnabledFor(logging.INFO):
            fields = access_log_fields(request, status, response_headers, call, duration)
            try:
                log_info_fast(access_logger, self.format, fields)
            except (KeyError, ValueError, TypeError) as e:
                access_logger.info("bad --access_log_format %r: %s", self.format, e)


def access_log_fields(request: HTTPServerRequest, status: int, response_headers: Mapping[str, str], call: Call,
                      duration: float) -> Dict[str, Any]:
    """The named fields an access log format can use."""
    protocol, endpoint, model = call.protocol, call.endpoint, call.model_label
    return {
        "client": request.remote_ip, "method": request.method, "path": request.path, "query": request.query,
        "status": status, "bytes": response_headers.get("Content-Length", "-"),
        "duration_ms": duration * 1000, "request_id": call.request_id,
        "protocol": protocol, "endpoint": endpoint, "model": model or "-",
        "http_version": request.version.rpartition("/")[2], "user_agent": request.headers.get("User-Agent", "-"),
    }
