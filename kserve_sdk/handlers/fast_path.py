"""Inference requests answered without a RequestHandler.

A RequestHandler does much per request that an inference call never uses (its own header object,
output transforms, cookies and XSRF hooks, a regular-expression walk over every route). For the routes
of the table whose handler has a ``fast_answer`` (``POST /v2/models/<m>[/versions/<v>]/infer``,
``/v1/models/<m>:predict`` and ``:explain``) the application's router hands Tornado this module's
delegate instead: it gathers the body, calls the same function the handler calls and writes the answer
with one ``write_headers``, built by responder.py as every answer is. Anything unusual (another method,
a %-escaped path, a deflate body, a v1 model whose predict streams) goes to the RequestHandlers.
"""
import asyncio
import re
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple

from tornado import httputil
from tornado.httputil import HTTPHeaders, HTTPMessageDelegate, HTTPServerRequest, ResponseStartLine

from ..dataplane import DataPlane
from ..lifecycle import Call
from .access_log import RequestLog
from .api import ErrorDocument
from .base import lowercase_headers
from .responder import Reply, answer_headers, error_reply

Answer = Callable[[Call, bytes, HTTPHeaders], Awaitable[Reply]]


class FastPath:
    """Chooses the requests served here (the routes whose handler has a ``fast_answer``) and holds what
    their delegates share."""

    def __init__(self, dataplane: DataPlane, request_log: RequestLog, compress_response: bool,
                 routes: Sequence[Tuple[str, Any, ErrorDocument]]):
        """``routes``: ``(pattern, handler, error document)`` of each such route, in the route table's order
        (api.py's ``RouteTable.fast_routes``)."""
        self.dataplane = dataplane
        self.request_log = request_log
        self.compress_response = compress_response
        # One regular expression for all of them: an alternative per route, told apart by its first group.
        self._route = re.compile("|".join(f"(?:{pattern})" for pattern, _, _ in routes))
        self._handlers: List[Tuple[int, int, Any, ErrorDocument]] = []
        first = 1
        for pattern, handler, document in routes:
            groups = re.compile(pattern).groups
            self._handlers.append((first, first + groups, handler, document))
            first += groups

    def delegate_for(self, request: HTTPServerRequest) -> Optional[HTTPMessageDelegate]:
        """A delegate answering ``request``, or None when the RequestHandlers should."""
        if request.method != "POST" or "Content-Encoding" in request.headers:  # gzip bodies arrive undone
            return None
        path = request.path
        match = self._route.fullmatch(path) if "%" not in path else None
        if match is None:
            return None
        groups = match.groups()
        for first, end, handler, document in self._handlers:
            if groups[first - 1] is not None:
                args = groups[first - 1:end - 1]
                answer = handler.fast_answer(self.dataplane, *args)
                if answer is None:
                    return None
                return FastInferenceDelegate(self, request, answer, handler, args[0], document)
        return None


class FastInferenceDelegate(HTTPMessageDelegate):
    """Tornado's delegate for one inference request on the fast path: its body is gathered, then its call
    opens (as a handler's does in ``prepare``) and ``answer(call, body, headers)`` is sent; a failure is
    answered in the error shape of the route's API.

    A client that closes its connection while the call runs cancels it (the model's coroutine sees
    CancelledError), through the call's lifecycle, as for the handlers.
    """

    __slots__ = ("_fast", "_request", "_answer", "_handler", "_model", "_document", "_call", "_chunks")

    def __init__(self, fast: FastPath, request: HTTPServerRequest, answer: Answer, handler: Any, model: str,
                 document: ErrorDocument):
        self._fast, self._request, self._answer, self._handler, self._model = fast, request, answer, handler, model
        self._document = document
        self._call: Optional[Call] = None
        self._chunks: List[bytes] = []

    def data_received(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def finish(self) -> None:
        chunks, request, handler = self._chunks, self._request, self._handler
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._call = call = self._fast.dataplane.open_call(handler.protocol, handler.endpoint,
                                                           lowercase_headers(request.headers), self._model)
        call.watch(asyncio.get_running_loop().create_task(self._run(body)))
        # Tornado watches the connection while an answer is pending; this asks it to tell us too.
        request.connection.set_close_callback(call.client_left)

    def on_connection_close(self) -> None:
        if self._call is not None:
            self._call.client_left()

    async def _run(self, body: bytes) -> None:
        request, call = self._request, self._call
        try:
            reply = await self._answer(call, body, request.headers)
        except asyncio.CancelledError:
            if not call.gone:
                raise
            return self._fast.request_log.finished(call, request, 499, {})
        except Exception as exc:  # noqa: BLE001 - every failure is answered, as RequestHandler does
            return self._send(*error_reply(call, exc, f"{request.method} {request.path}", self._document))
        self._send(200, reply)

    def _send(self, status: int, reply: Reply) -> None:
        request, call = self._request, self._call
        try:
            headers, body = answer_headers(call, request, status, reply, self._fast.compress_response)
        except (ValueError, TypeError) as e:  # a header the model set cannot be sent; nothing was written yet
            status, reply = error_reply(call, e, f"{request.method} {request.path}", self._document)
            headers, body = answer_headers(call, request, status, reply, False)
        call.close(str(status))  # counted before the client can read the answer
        connection = request.connection
        connection.write_headers(ResponseStartLine("HTTP/1.1", status, httputil.responses.get(status, "Unknown")),
                                 headers, body)
        connection.finish()
        self._fast.request_log.finished(call, request, status, headers)
