"""What every HTTP handler shares: JSON answers, the ``{"error": ...}`` shape, request headers, and
cancelling the work of a client that went away."""
import asyncio
import functools
import logging
import zlib
from typing import Any, Dict, NamedTuple, Optional, Tuple

from tornado.httputil import HTTPHeaders
from tornado.web import HTTPError, RequestHandler

from ..dataplane import DataPlane
from .. import metrics
from ..errors import InferenceError, InvalidInput, PayloadTooLarge, status_of
from ..internals.tornado_headers import HeaderRecorder
from ..logging import logger
from ..protocol.rest_codec import dumps

JSON = "application/json"


class Reply(NamedTuple):
    """An answer apart from its transport: the body, its content type and the other response headers."""

    body: bytes
    content_type: str
    headers: Dict[str, str]


def cancel_on_disconnect(method):
    """Run a handler method so that a client closing its connection cancels it (the model's coroutine sees
    CancelledError) and nothing more is sent."""

    @functools.wraps(method)
    async def wrapper(self: "BaseHandler", *args: Any) -> None:
        self._work_task = asyncio.current_task()
        try:
            await method(self, *args)
        except asyncio.CancelledError:
            if not self._client_gone:
                raise
        finally:
            self._work_task = None

    return wrapper


def lowercase_headers(headers: HTTPHeaders) -> Dict[str, str]:
    """Request headers as one mutable dict with lowercase names: what models receive."""
    return {name.lower(): value for name, value in headers.get_all()}


def error_reply(exc: BaseException) -> Tuple[int, bytes, Dict[str, str]]:
    """The status, ``{"error": ...}`` body and extra headers answering an exception."""
    status, message = status_of(exc)
    retry_after = getattr(exc, "retry_after", None)
    return status, dumps({"error": message}), ({} if retry_after is None else {"Retry-After": str(retry_after)})


def log_failure(method: str, path: str, status: int, exc: BaseException) -> None:
    """Log a failed request: a server fault (5xx but 501 / 503) with its traceback, others in one INFO line."""
    if status >= 500 and status != 501 and status != 503:
        logger.error("%s %s failed: %s", method, path, exc, exc_info=exc)
    elif logger.isEnabledFor(logging.INFO):
        logger.info("%s %s -> %d: %s", method, path, status, exc)


def encoded(model_name: str, encode, *args: Any):
    """``encode(*args)``, where a response the model built that cannot be written is the model's fault (500)."""
    try:
        return encode(*args)
    except InvalidInput:
        raise
    except (TypeError, ValueError, OverflowError, UnicodeError) as e:
        raise InferenceError(f"model '{model_name}' returned a response that cannot be encoded: "
                             f"{type(e).__name__}: {e}") from None


class BaseHandler(HeaderRecorder, RequestHandler):
    """A handler bound to the data plane; any exception becomes a JSON error with its own status."""

    protocol = "rest_v2"  # metric and access-log labels
    endpoint = "other"
    _work_task: Optional[asyncio.Task] = None
    _client_gone = False

    def initialize(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    def prepare(self) -> None:
        metrics.request_started(self.protocol)
        self.in_flight_counted = True
        if self.request.headers.get("Content-Encoding", "").lower() == "deflate":
            self._inflate_body()

    def _inflate_body(self) -> None:
        """Undo ``Content-Encoding: deflate`` (Tornado itself only undoes gzip), bounded by the body limit."""
        limit = self.application.settings.get("max_body_size") or 100 * 1024 * 1024
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):  # zlib-wrapped (the standard), then raw deflate
            inflater = zlib.decompressobj(wbits)
            try:
                body = inflater.decompress(self.request.body, limit + 1)
            except zlib.error:
                continue
            if len(body) > limit or inflater.unconsumed_tail:
                raise PayloadTooLarge(f"the request body inflates to more than {limit} bytes")
            self.request.body = body
            del self.request.headers["Content-Encoding"]
            return
        raise InvalidInput("the request body is not valid deflate data")

    def on_connection_close(self) -> None:
        self._client_gone = True
        task = self._work_task
        if task is not None and not task.done():
            task.cancel()

    def compute_etag(self) -> Optional[str]:
        # Inference answers are never cached; hashing every body would only cost time.
        return None

    def request_headers(self) -> Dict[str, str]:
        """The request headers as one mutable dict with lowercase names (what models receive).

        The request's ``x-request-id`` is echoed in the response; one is made up when there is none.
        """
        headers = lowercase_headers(self.request.headers)
        self.set_header("x-request-id", self.dataplane.request_id(headers))
        return headers

    def send_body(self, body: bytes, content_type: str = JSON, headers: Optional[Dict[str, str]] = None) -> None:
        """Finish with ``body``; ``headers`` are extra response headers (e.g. set by the model)."""
        if headers:
            for name, value in headers.items():
                self.set_header(name, value)
        self.set_header("Content-Type", content_type)
        self.finish(body)

    def send_reply(self, reply: Reply) -> None:
        """Finish with a reply of inference.py's functions."""
        self.send_body(reply.body, reply.content_type, reply.headers)

    def send_json(self, obj: Any) -> None:
        """Finish with ``obj`` as compact JSON."""
        self.send_body(dumps(obj))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, HTTPError):
            message = exc.log_message or self._reason
        elif exc is not None:
            status_code, body, headers = error_reply(exc)
            self.set_status(status_code)
            return self.send_body(body, JSON, headers)
        else:
            message = self._reason
        self.send_json({"error": message})

    def log_exception(self, typ, value, tb) -> None:
        status = value.status_code if isinstance(value, HTTPError) else status_of(value)[0]
        log_failure(self.request.method, self.request.path, status, value)


class NotFoundHandler(BaseHandler):
    """Any path no route matches: 404 with a JSON error."""

    def prepare(self) -> None:
        super().prepare()
        raise HTTPError(404, f"no route for {self.request.method} {self.request.path}")


class LiveHandler(BaseHandler):
    """``GET /``: the process is alive."""

    protocol, endpoint = "rest_v1", "live"

    async def get(self) -> None:
        self.send_json(await self.dataplane.live())


class MetricsHandler(BaseHandler):
    """``GET /metrics``: Prometheus metrics of every worker, in the format the scraper asks for."""

    endpoint = "metrics"

    def get(self) -> None:
        body, content_type = metrics.render(self.request.headers.get("Accept"))
        self.send_body(body, content_type)
