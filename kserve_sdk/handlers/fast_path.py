"""Inference requests answered without a RequestHandler.

A RequestHandler does much per request that an inference call never uses (its own header object,
output transforms, cookies and XSRF hooks, a regular-expression walk over every route). For a POST to
``/v2/models/<m>[/versions/<v>]/infer`` or ``/v1/models/<m>:predict`` / ``:explain`` the application's
router hands Tornado this module's delegate instead: it gathers the body, calls inference.py (the same
functions the handlers call) and writes the answer with one ``write_headers``. Anything unusual (another
method, a %-escaped path, a deflate body, a v1 model whose predict streams) goes to the RequestHandlers.
"""
import asyncio
import datetime
import gzip
import numbers
import re
import time
from email.utils import formatdate
from functools import partial
from typing import Any, Awaitable, Callable, List, Optional, Tuple

from tornado import httputil
from tornado.httputil import HTTPHeaders, HTTPMessageDelegate, HTTPServerRequest, ResponseStartLine

from .. import metrics
from ..dataplane import DataPlane
from .access_log import RequestLog
from .base import JSON, Reply, error_reply, log_failure
from .inference import call_v1, infer_v2

_ROUTE = re.compile(r"/v2/models/([^/%]+?)(?:/versions/([^/%]+))?/infer|/v1/models/([^/%]+?):(predict|explain)")
#: gzip answers as Tornado's ``compress_response`` does: JSON or text of at least 1 KiB, level 6.
GZIP_MIN_LENGTH, GZIP_LEVEL = 1024, 6


class FastPath:
    """Chooses the requests served here and holds what their delegates share."""

    def __init__(self, dataplane: DataPlane, request_log: RequestLog, compress_response: bool):
        self.dataplane = dataplane
        self.request_log = request_log
        self.compress_response = compress_response

    def delegate_for(self, request: HTTPServerRequest) -> Optional[HTTPMessageDelegate]:
        """A delegate answering ``request``, or None when the RequestHandlers should."""
        if request.method != "POST" or "Content-Encoding" in request.headers:  # gzip bodies arrive undone
            return None
        match = _ROUTE.fullmatch(request.path)
        if match is None:
            return None
        v2_name, version, v1_name, verb = match.groups()
        if v2_name is not None:
            return InferenceCall(self, request, partial(infer_v2, self.dataplane, v2_name, version),
                                 "rest_v2", "infer", v2_name)
        model = self.dataplane.model_registry.get_model(v1_name)
        if verb == "predict" and getattr(model, "streams_responses", bool)():
            return None
        return InferenceCall(self, request, partial(call_v1, self.dataplane, verb, v1_name), "rest_v1", verb, v1_name)


class InferenceCall(HTTPMessageDelegate):
    """One inference request: its body is gathered, then ``call(body, headers)`` is answered.

    A client that closes its connection while the call runs cancels it (the model's coroutine sees
    CancelledError), as ``cancel_on_disconnect`` does for handlers.
    """

    __slots__ = ("_fast", "_request", "_call", "_protocol", "_endpoint", "_model", "_chunks", "_task", "_gone")

    def __init__(self, fast: FastPath, request: HTTPServerRequest, call: Callable[[bytes, HTTPHeaders], Awaitable[Reply]],
                 protocol: str, endpoint: str, model: str):
        self._fast, self._request, self._call = fast, request, call
        self._protocol, self._endpoint, self._model = protocol, endpoint, model
        self._chunks: List[bytes] = []
        self._task: Optional[asyncio.Task] = None
        self._gone = False

    def data_received(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def finish(self) -> None:
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._task = asyncio.get_running_loop().create_task(self._answer(body))
        # Tornado watches the connection while an answer is pending; this asks it to tell us too.
        self._request.connection.set_close_callback(self.on_connection_close)

    def on_connection_close(self) -> None:
        self._gone = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _answer(self, body: bytes) -> None:
        metrics.request_started(self._protocol)
        request = self._request
        try:
            reply = await self._call(body, request.headers)
        except asyncio.CancelledError:
            if not self._gone:
                raise
            return self._fast.request_log.finished(request, 499, {}, self._protocol, self._endpoint, self._model)
        except Exception as exc:  # noqa: BLE001 - every failure is answered, as RequestHandler does
            status, error, headers = error_reply(exc)
            log_failure(request.method, request.path, status, exc)
            return self._send(status, Reply(error, JSON, headers))
        self._send(200, reply)

    def _send(self, status: int, reply: Reply) -> None:
        connection = self._request.connection
        try:
            headers, body = self._headers_and_body(reply)
            connection.write_headers(ResponseStartLine("HTTP/1.1", status, httputil.responses.get(status, "Unknown")),
                                     headers, body)
        except (ValueError, TypeError) as e:  # a header the model set cannot be sent; nothing was written yet
            status, body, _ = error_reply(e)
            log_failure(self._request.method, self._request.path, status, e)
            headers = HTTPHeaders({"Content-Type": JSON, "Date": http_date(), "Content-Length": str(len(body))})
            connection.write_headers(ResponseStartLine("HTTP/1.1", status, "Internal Server Error"), headers, body)
        connection.finish()
        self._fast.request_log.finished(self._request, status, headers, self._protocol, self._endpoint, self._model)

    def _headers_and_body(self, reply: Reply) -> Tuple[HTTPHeaders, bytes]:
        headers = HTTPHeaders()
        for name, value in reply.headers.items():
            text = value if isinstance(value, str) else header_text(value)
            if "\r" in text or "\n" in text:
                raise ValueError(f"the response header {name!r} holds a line break: {text!r}")
            headers[name] = text
        headers["Content-Type"] = reply.content_type
        headers["Date"] = http_date()
        body = self._maybe_gzip(reply.body, headers) if self._fast.compress_response else reply.body
        headers["Content-Length"] = str(len(body))
        return headers, body

    def _maybe_gzip(self, body: bytes, headers: HTTPHeaders) -> bytes:
        headers["Vary"] = "Accept-Encoding"
        content_type = headers["Content-Type"].split(";", 1)[0]
        if (len(body) >= GZIP_MIN_LENGTH and (content_type == JSON or content_type.startswith("text/"))
                and "gzip" in self._request.headers.get("Accept-Encoding", "")
                and "Content-Encoding" not in headers):
            headers["Content-Encoding"] = "gzip"
            return gzip.compress(body, GZIP_LEVEL)
        return body


def header_text(value: Any) -> str:
    """A header value a model set, as text (numbers, bytes and datetimes as RequestHandler.set_header takes)."""
    if isinstance(value, bytes):
        return value.decode("latin1")
    if isinstance(value, numbers.Integral):
        return str(value)
    if isinstance(value, datetime.datetime):
        return httputil.format_timestamp(value)
    raise TypeError(f"unsupported header value {value!r}")


_date_second, _date_text = 0, ""


def http_date() -> str:
    """The ``Date`` header's value, formatted once a second."""
    global _date_second, _date_text
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_text = now, formatdate(now, usegmt=True)
    return _date_text
