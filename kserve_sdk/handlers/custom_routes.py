"""Routes of a script's own on the REST port: ``ModelServer.add_route`` and the ``@server.route`` decorator.

KServe scripts add routes to the FastAPI ``app`` of ``kserve.model_server``; this server is Tornado, so a
script hands its routes to the ModelServer instead, before ``start``. A route is either a function (async or
plain: a plain one runs in the thread pool) or a :class:`~kserve_sdk.handlers.base.BaseHandler` subclass
(a Tornado RequestHandler with the server's lifecycle). Every route goes through what the built-in ones do:
the request id, the access-log line, ``kserve_requests_total`` and the latency histogram (labelled
``protocol="custom"`` and the route's name as ``endpoint``), errors answered as ``{"error": ...}`` with
their status, and the drain of a stopping server (new calls answered 503, those in flight waited for).
Every worker serves them. The built-in routes come first: a path one of them answers stays theirs.
"""
import asyncio
import functools
import inspect
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import orjson
from tornado.web import RequestHandler

from ..errors import InvalidInput
from ..protocol.rest_codec import dumps
from .api import RestAPI, Route
from .base import JSON, BaseHandler, cancel_on_disconnect

#: The ``protocol`` label of the calls of a script's own routes (metrics and access log).
PROTOCOL = "custom"
#: The HTTP methods a route may answer (Tornado's).
METHODS = frozenset(RequestHandler.SUPPORTED_METHODS)


class RouteRequest:
    """What a route function receives: the request's method, path, query (each name's last value),
    headers (lowercase names, ``x-request-id`` among them) and body; ``json()`` reads the body as JSON."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def json(self) -> Any:
        """The body parsed as JSON; a 400 answer when it is empty or not JSON."""
        if not self.body:
            raise InvalidInput("the request body is empty; send a JSON document")
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as e:
            raise InvalidInput(f"the request body is not JSON: {e}") from None


class RouteResponse:
    """An answer other than 200 with JSON: ``body`` (bytes and str are sent as they are, anything else as
    JSON), ``status``, extra ``headers``, and ``content_type`` (default: JSON, ``text/plain; charset=utf-8``
    for str, ``application/octet-stream`` for bytes)."""

    __slots__ = ("body", "status", "headers", "content_type")

    def __init__(self, body: Any = None, status: int = 200, headers: Optional[Mapping[str, str]] = None,
                 content_type: Optional[str] = None):
        self.body, self.status, self.headers, self.content_type = body, status, dict(headers or {}), content_type

    def encoded(self) -> Tuple[bytes, str]:
        """The body's bytes and content type."""
        if isinstance(self.body, bytes):
            return self.body, self.content_type or "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode(), self.content_type or "text/plain; charset=utf-8"
        return dumps(self.body), self.content_type or JSON


class _Counted:
    """Mixed into every route's handler class: its calls are counted in flight, so the drain of a stopping
    server waits for them, and one arriving during the drain is answered 503."""

    dataplane: Any
    _route_counted = False

    def prepare(self) -> Any:
        self.dataplane.begin_route_call()
        self._route_counted = True
        return super().prepare()  # type: ignore[misc]  # the handler class's own prepare

    def on_finish(self) -> None:
        if self._route_counted:
            self._route_counted = False
            self.dataplane.end_route_call()
        super().on_finish()  # type: ignore[misc]


class _FunctionRoute(_Counted, BaseHandler):
    """The handler of a route function: set up per route by :func:`function_handler`."""

    protocol = PROTOCOL
    function: Callable[..., Any]
    passes_request = True

    @cancel_on_disconnect
    async def answer(self, *path_args: str) -> None:
        request = self.request
        args: Tuple[Any, ...] = ()
        if self.passes_request:
            query = {name: values[-1].decode("utf-8", "replace") for name, values in request.query_arguments.items()}
            args = (RouteRequest(request.method or "", request.path, query, self.request_headers(), request.body),
                    *path_args)
        function = self.function
        if inspect.iscoroutinefunction(function):
            result = await function(*args)
        else:
            result = await asyncio.get_running_loop().run_in_executor(None, functools.partial(function, *args))
            if inspect.isawaitable(result):
                result = await result
        self._send_result(result)

    def _send_result(self, result: Any) -> None:
        """Answer with what the function returned: a RouteResponse as it says, bytes as they are, anything
        else as JSON (a str too, as FastAPI answers it)."""
        if isinstance(result, RouteResponse):
            body, content_type = result.encoded()
            self.set_status(result.status)
            self.send_body(body, content_type, result.headers)
        elif isinstance(result, bytes):
            self.send_body(result, "application/octet-stream")
        else:
            self.send_body(dumps(result))


def _check_path(path: str) -> None:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"a route's path must start with '/': {path!r}")
    try:
        re.compile(path)
    except re.error as e:
        raise ValueError(f"the route path {path!r} is not a valid regular expression: {e}") from None


def _checked_methods(methods: Sequence[str]) -> List[str]:
    if isinstance(methods, str):
        methods = [methods]
    upper = [method.upper() for method in methods]
    unknown = sorted(set(upper) - METHODS)
    if unknown or not upper:
        raise ValueError(f"a route's methods are among {', '.join(sorted(METHODS))}; got {list(methods)!r}")
    return upper


def _passes_request(function: Callable[..., Any], path: str, name: str) -> bool:
    """Whether ``function`` takes the request (then one argument per group of ``path`` after it) rather than
    nothing; a TypeError names a function that takes neither."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: given the request
        return True
    if not signature.parameters:
        return False
    groups = re.compile(path).groups
    try:
        signature.bind(None, *[""] * groups)
    except TypeError:
        raise TypeError(f"route function {name} must take no arguments, or the request then one argument per "
                        f"group of its path {path!r} ({groups})") from None
    return True


def function_handler(path: str, function: Callable[..., Any], methods: Sequence[str], name: str) -> type:
    """The handler class answering ``methods`` of ``path`` with ``function``."""
    attributes: Dict[str, Any] = {"endpoint": name, "function": staticmethod(function),
                                  "passes_request": _passes_request(function, path, name)}
    for method in _checked_methods(methods):
        attributes[method.lower()] = _FunctionRoute.answer
    return type(f"Route_{name}", (_FunctionRoute,), attributes)


def class_handler(handler: type, name: str) -> type:
    """``handler`` (a BaseHandler subclass) with its calls counted for the drain, labelled ``custom`` and
    ``name`` unless it names its own ``protocol`` / ``endpoint``."""
    if not (isinstance(handler, type) and issubclass(handler, BaseHandler)):
        kind = "a plain tornado RequestHandler" if isinstance(handler, type) and issubclass(handler, RequestHandler) \
            else repr(handler)
        raise TypeError(f"a route's handler is a function or a subclass of kserve_sdk.handlers.base.BaseHandler "
                        f"(a RequestHandler with the server's request id, metrics and error answers); got {kind}")
    own = [klass for klass in handler.__mro__ if klass not in BaseHandler.__mro__]
    attributes: Dict[str, Any] = {}
    if not any("protocol" in klass.__dict__ for klass in own):
        attributes["protocol"] = PROTOCOL
    if not any("endpoint" in klass.__dict__ for klass in own):
        attributes["endpoint"] = name
    return type(handler.__name__, (_Counted, handler), attributes)


class CustomRoutes:
    """The routes a script added, in the order it added them: one REST API served after the built-in ones."""

    def __init__(self) -> None:
        self.routes: List[Route] = []
        self.frozen = False

    def add(self, path: str, handler: Union[Callable[..., Any], type], methods: Optional[Sequence[str]] = None,
            name: Optional[str] = None) -> None:
        """Serve ``handler`` at ``path`` (see :meth:`kserve_sdk.model_server.ModelServer.add_route`)."""
        if self.frozen:
            raise RuntimeError("routes are added before ModelServer.start(); this server is serving already")
        _check_path(path)
        if any(known == path for known, _ in self.routes):
            raise ValueError(f"the route {path!r} is added twice")
        if isinstance(handler, type):
            if methods is not None:
                raise TypeError("methods are for a route function; a handler class answers the methods it defines")
            made = class_handler(handler, name or handler.__name__)
        elif callable(handler):
            made = function_handler(path, handler, ["GET"] if methods is None else methods,
                                    name or str(getattr(handler, "__name__", "route")))
        else:
            raise TypeError(f"a route's handler is a function or a BaseHandler subclass; got {handler!r}")
        self.routes.append((path, made))

    def apis(self) -> List[RestAPI]:
        """The REST API of these routes (none when there are none); no route can be added after."""
        self.frozen = True
        return [RestAPI("custom", list(self.routes))] if self.routes else []
