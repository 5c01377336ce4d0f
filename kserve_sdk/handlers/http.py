"""The HTTP application, built from a list of REST APIs (api.py; the server's list is
``model_server.REST_APIS``): the inference routes answered through fast_path.py, the plain paths found
in one dict, a body over ``max_body_size`` answered as 413 and one in a ``Content-Encoding`` the server
does not undo as 415. It names no API. And the HTTP server of such an application, which answers
headers over its limit with 431 and closes connections whose client does not read its answer."""
import asyncio
import re
import time
import weakref
from http import HTTPStatus
from typing import Any, Awaitable, Dict, Iterable, List, Optional, Union, cast

from tornado import httputil
from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream
from tornado.web import Application

from .. import tracing
from ..dataplane import DataPlane
from ..errors import HeadersTooLarge, PayloadTooLarge, UnsupportedEncoding
from ..internals.tornado_buffer import body_already_buffered
from ..internals.tornado_overflow import answer_overflow
from ..internals.tornado_sent import bytes_sent
from ..logging import logger
from .access_log import RequestLog
from .api import Options, RestAPI, Route, RouteTable
from .base import NotFoundHandler, lowercase_headers
from .fast_path import FastPath
from .responder import SERVER, answer_headers, error_document, error_reply, http_date


def make_app(dataplane: DataPlane, apis: Iterable[RestAPI], access_log_format: Optional[str] = None,
             enable_docs_url: bool = False, enable_gzip: bool = True, max_body_size: Optional[int] = None,
             **settings: Any) -> Application:
    """A Tornado application serving ``apis``, in that order (the first route matching a path answers it)."""
    ctx: Dict[str, Any] = {"dataplane": dataplane}
    table = RouteTable(apis, Options(enable_docs_url=enable_docs_url), NotFoundHandler)
    tracing.untraced.update(table.untraced())
    request_log = RequestLog(dataplane, access_log_format)
    app = _Application(
        [(path, handler, ctx) for path, handler in table.routes],
        default_handler_class=NotFoundHandler,
        default_handler_args=ctx,
        compress_response=enable_gzip,
        log_function=request_log.handler_finished,
        max_body_size=max_body_size,
        **settings,
    )
    app.fast_path = FastPath(dataplane, request_log, enable_gzip, table.fast_routes())
    app.exact, app.handler_args, app.route_table = exact_routes(table.routes), ctx, table
    return app


def exact_routes(routes: List[Route]) -> Dict[str, type]:
    """The handlers of the routes whose pattern is a plain path that no route before it matches, by that
    path: found with one dict lookup, where Tornado tries each route's regular expression in turn (some
    thirty before the OpenAI API's)."""
    exact: Dict[str, type] = {}
    for i, (pattern, handler) in enumerate(routes):
        path = pattern.replace(r"\.", ".")
        if _PLAIN_PATH.fullmatch(path) and not any(re.fullmatch(before, path) for before, _ in routes[:i]):
            exact.setdefault(path, handler)
    return exact


_PLAIN_PATH = re.compile(r"[A-Za-z0-9_/.-]+")


class _Application(Application):
    """Tornado's Application, with the inference routes answered by fast_path.py, ``max_body_size``
    answered as 413 and a JSON message (Tornado itself answers an over-large body with a bare 400 and
    closes the connection), and a body in an encoding the server does not undo as 415."""

    fast_path: Optional[FastPath] = None
    exact: Dict[str, type] = {}  # exact_routes()
    handler_args: Dict[str, Any] = {}  # what every handler is initialized with
    route_table: Optional[RouteTable] = None  # the APIs served: the labels and error shape of a 413 or 415

    def find_handler(self, request: httputil.HTTPServerRequest, **kwargs: Any) -> httputil.HTTPMessageDelegate:
        delegate = self.fast_path.delegate_for(request) if self.fast_path is not None else None
        if delegate is not None:
            return delegate
        encoding = request.headers.get("Content-Encoding")  # the fast path takes no encoded body
        if encoding is not None and encoding.strip().lower() not in UNDONE_ENCODINGS:
            return _Refused(self, request, UnsupportedEncoding(
                f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or identity"))
        handler = self.exact.get(request.path)
        if handler is not None:
            return self.get_handler_delegate(request, handler, self.handler_args, [], {})
        return super().find_handler(request, **kwargs)

    def start_request(self, server_conn: object, request_conn: httputil.HTTPConnection) -> httputil.HTTPMessageDelegate:
        delegate = super().start_request(server_conn, request_conn)
        limit = self.settings.get("max_body_size")
        if not limit:
            return delegate
        # _BodyLimit answers every body over the limit itself; Tornado's own cap, which its gzip decoder
        # copies before the headers arrive, would answer an inflating one with a bare 400 first.
        request_conn.set_max_body_size(2 ** 62)
        return _BodyLimit(delegate, request_conn, limit, self)

    def refuse(self, request: httputil.HTTPServerRequest, exc: Exception, close: bool = False) -> None:
        """Answer ``request`` with ``exc``'s error before any handler runs (413, 415), labelled and shaped
        as the API whose route matches its path declares (OpenAI's in its own error shape); with ``close``
        the connection closes once the answer is sent."""
        (protocol, endpoint, model), document = self.route_table.answer_for(request.path)
        call = self.fast_path.dataplane.open_call(protocol, endpoint, lowercase_headers(request.headers), model)
        status, reply = error_reply(call, exc, f"{request.method} {request.path}", document)
        answer, body = answer_headers(call, request, status, reply, False)
        if close:
            answer["Connection"] = "close"
        call.close(str(status))  # counted before the client can read the answer
        connection = request.connection
        connection.write_headers(httputil.ResponseStartLine("HTTP/1.1", status, _reason(status)), answer, body)
        connection.finish()
        self.fast_path.request_log.finished(call, request, status, answer)

    def headers_too_large(self, limit: int, peer: str) -> bytes:
        """The whole answer (431, then the connection closes) to a request from ``peer`` whose headers
        passed ``limit`` bytes; the call is counted and logged like any refused request's."""
        (protocol, endpoint, model), _ = self.route_table.answer_for("")
        call = self.fast_path.dataplane.open_call(protocol, endpoint, None, model)
        exc = HeadersTooLarge(f"the request's headers are larger than the {limit} bytes this server reads")
        failure = call.failed(exc, f"a request from {peer}")
        call.close(str(failure.status))
        body = error_document(failure.status, failure.message)
        head = (f"HTTP/1.1 {failure.status} {_reason(failure.status)}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\nServer: {SERVER}\r\nDate: {http_date()}\r\n"
                f"x-request-id: {call.request_id}\r\n\r\n")
        return head.encode("latin-1") + body


#: The request body encodings undone before a handler reads the body: gzip (Tornado), deflate (base.py) and
#: none. (Tornado renames a gzip body's header before the router sees it.)
UNDONE_ENCODINGS = frozenset({"identity", "deflate", ""})


def _reason(status: int) -> str:
    """The reason phrase of an answer's status line."""
    return "Payload Too Large" if status == 413 else HTTPStatus(status).phrase


class _Refused(httputil.HTTPMessageDelegate):
    """A request refused before any handler runs: its body is read and dropped, then ``exc`` answers it."""

    def __init__(self, app: _Application, request: httputil.HTTPServerRequest, exc: Exception):
        self._app, self._request, self._exc = app, request, exc

    def data_received(self, chunk: bytes) -> None:
        pass

    def finish(self) -> None:
        self._app.refuse(self._request, self._exc)


class _BodyLimit(httputil.HTTPMessageDelegate):
    """Refuses a body over ``limit`` bytes with 413 before it is buffered.

    A declared ``Content-Length`` over the limit is answered at once, without reading the body unless it
    is at most twice the limit (read and dropped, so that a client which sends its whole body before
    reading the answer still sees the 413 rather than a reset); the connection then closes. A chunked
    body, and a gzip body as Tornado inflates it, is counted as it arrives and answered when it passes
    the limit. A body that arrived with its headers skips the body timeout (``--body_timeout_seconds``),
    whose timer would cost every request. The 413 is labelled and shaped as the API whose route matches
    the path declares (OpenAI's in its own error shape).
    """

    __slots__ = ("_delegate", "_conn", "_limit", "_app", "_start", "_received", "_refused", "_counted")

    def __init__(self, delegate: httputil.HTTPMessageDelegate, conn: httputil.HTTPConnection, limit: int,
                 app: _Application):
        self._delegate, self._conn, self._limit, self._app = delegate, conn, limit, app
        self._start: Optional[tuple] = None  # (start line, headers): made into a request only for a 413
        self._received = 0
        self._refused: Optional[str] = None
        self._counted: Optional[str] = None  # a body counted as it arrives: the 413's message if it passes

    def headers_received(self, start_line: Union[httputil.RequestStartLine, httputil.ResponseStartLine],
                         headers: httputil.HTTPHeaders) -> Optional[Awaitable[None]]:
        self._start = (start_line, headers)
        length = headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > self._limit:
            self._refused = (f"the request body of {int(length)} bytes is larger than the {self._limit} bytes "
                             "this server accepts (--max_body_size)")
            self._conn.set_max_body_size(int(length))  # or Tornado answers a bare 400 after ours
            if int(length) > 2 * self._limit:
                self._answer(close=True)
            return None  # else the body is read and dropped, and finish() answers
        if "X-Consumed-Content-Encoding" in headers:  # gzip, which Tornado inflates before we see it
            self._counted = f"the request body inflates to more than {self._limit} bytes"
        elif length is None:
            if "chunked" in headers.get("Transfer-Encoding", "").lower():
                self._counted = (f"the chunked request body passed the {self._limit} bytes this server accepts "
                                 "(--max_body_size)")
        elif length.isdigit() and body_already_buffered(self._conn, int(length)):
            # The body came with the headers: no need for the body timeout's timer (a cost on every request).
            self._conn.set_body_timeout(None)
        return self._delegate.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Optional[Awaitable[None]]:
        if self._refused is not None:
            return None
        if self._counted is not None:
            self._received += len(chunk)
            if self._received > self._limit:
                self._refused = self._counted
                self._delegate.on_connection_close()
                self._answer(close=True)
                return None
        return self._delegate.data_received(chunk)

    def finish(self) -> None:
        if self._refused is not None:
            self._answer()
        else:
            self._delegate.finish()

    def on_connection_close(self) -> None:
        if self._refused is None:
            self._delegate.on_connection_close()

    @property
    def headers_came(self) -> bool:
        """Whether the request's headers have been read (a read that fails later is not theirs)."""
        return self._start is not None

    def _answer(self, close: bool = False) -> None:
        """Send the 413; with ``close`` the body is not read and the connection closes once it is sent."""
        start_line, headers = self._start
        request = httputil.HTTPServerRequest(connection=self._conn, start_line=start_line, headers=headers)
        self._app.refuse(request, PayloadTooLarge(self._refused), close)



class _Connection:
    """What the server keeps of one open connection: its stream, its peer, the delegate of the request it
    is reading (weakly: a finished request's body is not kept), and since when (with how many bytes sent
    then) its answer has been waiting on the client."""

    __slots__ = ("stream", "peer", "request", "waiting_since", "sent")

    def __init__(self, stream: IOStream, peer: str):
        self.stream, self.peer = stream, peer
        self.request: Optional[weakref.ref] = None
        self.waiting_since: Optional[float] = None
        self.sent: Optional[int] = None


class HTTPServerWithLimits(HTTPServer):
    """Tornado's HTTPServer for an application of :func:`make_app`, with the two limits Tornado leaves to
    its users:

    - headers larger than ``max_header_size`` (64 KiB unless given) are answered 431 with a JSON error, then
      the connection closes (Tornado itself closes it with no answer);
    - with ``send_timeout`` (seconds), a connection whose answer has not moved for that long, because its
      client does not read it, is closed, which frees the answer (``--send_timeout_seconds``): the time
      counts between two writes the socket took, as nginx's ``send_timeout``. A stream then ends as if its
      client had left. Connections are looked at every quarter of the timeout (every 5 s at most), so one
      closes within that much after its timeout.
    """

    def initialize(self, request_callback: Any,  # type: ignore[override]  # Tornado's keywords, and one more
                   send_timeout: Optional[float] = None, **kwargs: Any) -> None:
        super().initialize(request_callback, **kwargs)
        self._header_limit: int = kwargs.get("max_header_size") or 65536  # Tornado's default
        self._open: Dict[IOStream, _Connection] = {}
        self._send_timeout: float = send_timeout or 0.0  # 0: none
        self._sweep_every = min(max(self._send_timeout / 4, 0.01), 5.0)
        self._sweep: Optional[asyncio.TimerHandle] = None

    def handle_stream(self, stream: IOStream, address: Any) -> None:
        peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)
        connection = self._open[stream] = _Connection(stream, peer)
        if isinstance(self.request_callback, _Application):
            answer_overflow(stream, lambda: self._headers_too_large(connection))
        if self._send_timeout and self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self._sweep_every, self._close_stalled)
        super().handle_stream(stream, address)

    def start_request(self, server_conn: object, request_conn: httputil.HTTPConnection) -> httputil.HTTPMessageDelegate:
        delegate = super().start_request(server_conn, request_conn)
        connection = self._open.get(request_conn.stream)  # type: ignore[attr-defined]
        if connection is not None:
            connection.request = weakref.ref(delegate)
        return delegate

    def on_close(self, server_conn: object) -> None:
        self._open.pop(server_conn.stream, None)  # type: ignore[attr-defined]
        super().on_close(server_conn)

    def _headers_too_large(self, connection: _Connection) -> Optional[bytes]:
        """The 431 answer when the read that failed was of the headers (a chunked body's size line over its
        own limit is not: Tornado's plain close then); None otherwise."""
        request = connection.request() if connection.request is not None else None
        if getattr(request, "headers_came", True):  # no _BodyLimit (no body limit): unknown
            return None
        return cast(_Application, self.request_callback).headers_too_large(self._header_limit, connection.peer)

    def _close_stalled(self) -> None:
        """Close every connection whose answer has waited on its client for the send timeout."""
        self._sweep = None
        now, timeout = time.monotonic(), self._send_timeout
        for connection in list(self._open.values()):
            stream = connection.stream
            if not stream.writing() or stream.closed():
                connection.waiting_since = None
                continue
            sent = bytes_sent(stream)
            if connection.waiting_since is None or (sent is not None and sent != connection.sent):
                connection.waiting_since, connection.sent = now, sent
            elif now - connection.waiting_since >= timeout:
                logger.warning("closed the connection of %s: its answer waited %.3g s on a client that does not "
                               "read it (--send_timeout_seconds)", connection.peer, now - connection.waiting_since)
                stream.close()
        if self._open:
            self._sweep = asyncio.get_running_loop().call_later(self._sweep_every, self._close_stalled)
