"""What every HTTP handler shares: the call's lifecycle (opened in ``prepare``, closed when the answer is
logged), JSON answers, the ``{"error": ...}`` shape, request headers, and cancelling the work of a client
that went away."""
import asyncio
import functools
import zlib
from typing import Any, Dict, Optional, Tuple

from tornado.httputil import HTTPHeaders
from tornado.web import HTTPError, RequestHandler

from ..dataplane import DataPlane
from ..errors import InvalidInput, PayloadTooLarge
from ..internals.tornado_headers import HeaderRecorder
from ..lifecycle import Call, Failure
from ..protocol.rest_codec import dumps
from ..tracing import answer_traceparent
from .responder import JSON, SERVER, Reply, error_document, failure_headers, header_text

__all__ = ["BaseHandler", "JSON", "Reply", "cancel_on_disconnect", "lowercase_headers"]


def cancel_on_disconnect(method):
    """Run a handler method so that a client closing its connection cancels it (the model's coroutine sees
    CancelledError) and nothing more is sent."""

    @functools.wraps(method)
    async def wrapper(self: "BaseHandler", *args: Any) -> None:
        call = self.open_call()
        call.watch(asyncio.current_task())
        try:
            await method(self, *args)
        except asyncio.CancelledError:
            if not call.gone:
                raise
        finally:
            call.watch(None)

    return wrapper


def lowercase_headers(headers: HTTPHeaders) -> Dict[str, str]:
    """Request headers as one mutable dict with lowercase names: what models receive."""
    return {name.lower(): value for name, value in headers.get_all()}


class BaseHandler(HeaderRecorder, RequestHandler):
    """A handler bound to the data plane; any exception becomes a JSON error with its own status.

    Its :class:`~kserve_sdk.lifecycle.Call` (``self.call``) opens in ``prepare`` and closes when Tornado
    logs the answer (http.py's ``log_function``), whatever the status. The application's ``access_check``
    setting, when there is one, may then refuse the request (403, raised as an error of the call).
    """

    protocol = "rest_v2"  # metric and access-log labels
    endpoint = "other"
    call: Optional[Call] = None

    def initialize(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    def open_call(self) -> Call:
        """This request's call, opened now if ``prepare`` has not run (a URL that did not decode)."""
        if self.call is None:
            path_args = getattr(self, "path_args", None)
            self.call = self.dataplane.open_call(self.protocol, self.endpoint, lowercase_headers(self.request.headers),
                                                 path_args[0] if path_args else None)
            self._call_headers()
        return self.call

    def _call_headers(self) -> None:
        """The headers naming the call on every answer: its request id and, when traced, its traceparent."""
        self.set_header("x-request-id", self.call.request_id)
        if self.call.span is not None and (traceparent := answer_traceparent(self.call)):
            self.set_header("traceparent", traceparent)

    def set_default_headers(self) -> None:
        # also after clear(), which an error answer starts with: its request id stays
        self.set_header("Server", SERVER)
        if self.call is not None:
            self._call_headers()

    def prepare(self) -> None:
        self.open_call()
        access_check = self.settings.get("access_check")
        if access_check is not None:  # the restricted API groups (kserve_sdk/security), when the server has some
            access_check(self)
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
        if self.call is not None:
            self.call.client_left()

    def flush(self, include_footers: bool = False) -> "asyncio.Future[None]":
        if include_footers and self.call is not None:
            # The answer's last bytes: its call is counted before the client can read them, so a metrics
            # scrape that follows the answer (maybe answered by another worker) counts it.
            self.call.close(str(self.get_status()))
        return super().flush(include_footers)

    def compute_etag(self) -> Optional[str]:
        # Inference answers are never cached; hashing every body would only cost time.
        return None

    def request_headers(self) -> Dict[str, str]:
        """The request headers as one mutable dict with lowercase names (what models receive), holding the
        call's ``x-request-id``."""
        return self.open_call().headers

    def send_body(self, body: bytes, content_type: str = JSON, headers: Optional[Dict[str, str]] = None) -> None:
        """Finish with ``body``; ``headers`` are extra response headers (e.g. set by the model)."""
        if headers:
            for name, value in headers.items():
                self.set_header(name, header_text(name, value))
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
        if isinstance(exc, HTTPError) or exc is None:  # Tornado's own (no route, bad method, bad URL)
            self.open_call()  # a method Tornado refuses before prepare: the answer still names its call
            message = (exc.log_message if exc is not None else None) or self._reason
            return self.send_body(self.error_document(status_code, message))
        failure = self.open_call().failed(exc, f"{self.request.method} {self.request.path}")
        status, body = self.failure_answer(exc, failure)
        self.set_status(status)
        self.send_body(body, headers=failure_headers(failure))

    def error_document(self, status: int, message: str) -> bytes:
        """The JSON body of an error answer, ``{"error": message}``; a protocol whose errors have another
        shape (OpenAI's) overrides it."""
        return error_document(status, message)

    def failure_answer(self, exc: BaseException, failure: Failure) -> Tuple[int, bytes]:
        """The status and body answering ``exc``, whose failure the call has logged."""
        return failure.status, self.error_document(failure.status, failure.message)

    def log_exception(self, typ, value, tb) -> None:
        # write_error logs the failure, through the call, by the rule every protocol shares
        if isinstance(value, HTTPError) and value.log_message and value.status_code >= 500:
            super().log_exception(typ, value, tb)


class NotFoundHandler(BaseHandler):
    """Any path no route matches: 404 with a JSON error."""

    def prepare(self) -> None:
        super().prepare()
        raise HTTPError(404, f"no route for {self.request.method} {self.request.path}")
