"""The HTTP application, built from a list of REST APIs (api.py; the server's list is
``model_server.REST_APIS``): the inference routes answered through fast_path.py, the plain paths found
in one dict, and a body over ``max_body_size`` answered as 413. It names no API."""
import re
from typing import Any, Awaitable, Dict, Iterable, List, Optional, Union

from tornado import httputil
from tornado.web import Application

from .. import tracing
from ..dataplane import DataPlane
from ..errors import PayloadTooLarge
from ..internals.tornado_buffer import body_already_buffered
from .access_log import RequestLog
from .api import Options, RestAPI, Route, RouteTable
from .base import NotFoundHandler, lowercase_headers
from .fast_path import FastPath
from .responder import answer_headers, error_reply


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
    """Tornado's Application, with the inference routes answered by fast_path.py and ``max_body_size``
    answered as 413 and a JSON message (Tornado itself answers an over-large body with a bare 400 and
    closes the connection)."""

    fast_path: Optional[FastPath] = None
    exact: Dict[str, type] = {}  # exact_routes()
    handler_args: Dict[str, Any] = {}  # what every handler is initialized with
    route_table: Optional[RouteTable] = None  # the APIs served: the labels and error shape of a 413

    def find_handler(self, request: httputil.HTTPServerRequest, **kwargs: Any) -> httputil.HTTPMessageDelegate:
        delegate = self.fast_path.delegate_for(request) if self.fast_path is not None else None
        if delegate is not None:
            return delegate
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

    def _answer(self, close: bool = False) -> None:
        """Send the 413; with ``close`` the body is not read and the connection closes once it is sent."""
        fast, (start_line, headers) = self._app.fast_path, self._start
        request = httputil.HTTPServerRequest(connection=self._conn, start_line=start_line, headers=headers)
        (protocol, endpoint, model), document = self._app.route_table.answer_for(request.path)
        call = fast.dataplane.open_call(protocol, endpoint, lowercase_headers(request.headers), model)
        status, reply = error_reply(call, PayloadTooLarge(self._refused), f"{request.method} {request.path}",
                                    document)
        answer, body = answer_headers(call, request, status, reply, False)
        if close:
            answer["Connection"] = "close"
        call.close(str(status))  # counted before the client can read the answer
        self._conn.write_headers(httputil.ResponseStartLine("HTTP/1.1", status, "Payload Too Large"), answer, body)
        self._conn.finish()
        fast.request_log.finished(call, request, status, answer)
