"""What a model's OpenAI method is handed of the HTTP exchange, apart from its transport: ``raw_request``
(what KServe users read from the Starlette ``Request`` KServe hands them) and ``context["response"]``.

KServe code reads a Starlette request two ways: by attribute (``headers``, ``url``, ``query_params``,
``state``, ``await body()``...) and as a mapping over its ASGI scope (``raw_request["path"]``,
``"upstream_headers" in raw_request``). Both work here; the scope is built only when first asked for,
so a model that reads none of it costs nothing.
"""
from functools import cached_property
from http.cookies import CookieError, SimpleCookie
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit


class Address(NamedTuple):
    """An end of the connection: ``host`` and ``port``."""

    host: str
    port: int


class URL(str):
    """The request's URL as text, with the parts Starlette's URL has (``scheme``, ``netloc``, ``path``,
    ``query``, ``hostname``, ``port``, ``is_secure``)."""

    scheme: str = ""
    netloc: str = ""
    path: str = ""
    query: str = ""

    def __new__(cls, scheme: str, netloc: str, path: str, query: str = "") -> "URL":
        url = super().__new__(cls, f"{scheme}://{netloc}{path}" + (f"?{query}" if query else ""))
        url.scheme, url.netloc, url.path, url.query = scheme, netloc, path, query
        return url

    @property
    def hostname(self) -> Optional[str]:
        """The host, without the port."""
        return urlsplit(self).hostname

    @property
    def port(self) -> Optional[int]:
        """The port, when the URL names one."""
        return urlsplit(self).port

    @property
    def is_secure(self) -> bool:
        """Whether the request came over TLS."""
        return self.scheme in ("https", "wss")


class Headers(Mapping[str, str]):
    """The request headers, read with any case of their names (``headers["Authorization"]``), as
    Starlette's ``Headers``; a view of the dict the model's ``context["headers"]`` holds. ``pairs`` gives
    the headers as they came, a repeated one once per value, for ``getlist`` and ``raw``."""

    __slots__ = ("_lowercase", "_pairs")

    def __init__(self, lowercase: Dict[str, str], pairs: Optional[Callable[[], Iterable[Tuple[str, str]]]] = None):
        self._lowercase, self._pairs = lowercase, pairs

    def __getitem__(self, name: str) -> str:
        return self._lowercase[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lowercase)

    def __len__(self) -> int:
        return len(self._lowercase)

    def getlist(self, name: str) -> List[str]:
        """Every value of header ``name``, in the order they came (none if it is not there)."""
        key = name.lower()
        return [value for header, value in self.items_all() if header == key]

    def items_all(self) -> List[Tuple[str, str]]:
        """(lowercase name, value) of every header, a repeated one once per value; a header the server
        added (a minted ``x-request-id``) last."""
        if self._pairs is None:
            return list(self._lowercase.items())
        pairs = [(name.lower(), value) for name, value in self._pairs()]
        came = {name for name, _ in pairs}
        return pairs + [(name, value) for name, value in self._lowercase.items() if name not in came]

    @property
    def raw(self) -> List[Tuple[bytes, bytes]]:
        """The headers as ASGI has them: (name, value) byte pairs, names lowercase."""
        return [(name.encode("latin-1"), value.encode("latin-1", "replace")) for name, value in self.items_all()]

    def __repr__(self) -> str:
        return f"Headers({self._lowercase!r})"


class QueryParams(Dict[str, str]):
    """The query string's parameters: ``params["k"]`` is the last value of ``k``, ``getlist("k")`` all of
    them, as Starlette's ``QueryParams``."""

    def __init__(self, query: str):
        self._items = parse_qsl(query, keep_blank_values=True)
        super().__init__(self._items)

    def getlist(self, name: str) -> List[str]:
        """Every value of parameter ``name``, in order."""
        return [value for key, value in self._items if key == name]

    def multi_items(self) -> List[Tuple[str, str]]:
        """Every (name, value) pair, in order."""
        return list(self._items)


class State:
    """``raw_request.state``: attributes stored in the scope's ``state`` dict, as Starlette's ``State``."""

    __slots__ = ("_state",)

    def __init__(self, state: Dict[str, Any]):
        object.__setattr__(self, "_state", state)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._state[name]
        except KeyError:
            raise AttributeError(f"'State' object has no attribute '{name}'") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._state[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self._state[name]
        except KeyError:
            raise AttributeError(name) from None


class RawRequest(Mapping[str, Any]):
    """The HTTP request behind a call, as KServe's Starlette ``Request``: ``method``, ``url``, ``headers``
    (any case), ``query_params``, ``cookies``, ``client``, ``state``, ``scope``, ``await body()``,
    ``await json()``, ``stream()``, ``await is_disconnected()``; and ``raw_request[key]`` reads the ASGI
    scope (``type``, ``method``, ``path``, ``query_string``, ``headers``, ``client``, ``server``,
    ``scheme``, ``root_path``, ``state``, and whatever the model or a hook stored in it)."""

    def __init__(self, *, method: str, scheme: str, host: str, path: str, query: str, headers: Dict[str, str],
                 body: bytes, client: Optional[Address], server: Callable[[], Optional[Tuple[str, int]]],
                 gone: Callable[[], bool], http_version: str = "1.1",
                 header_pairs: Optional[Callable[[], Iterable[Tuple[str, str]]]] = None):
        self.method, self.client = method, client
        self.path_params: Dict[str, Any] = {}
        self._header_pairs = header_pairs
        self._scheme, self._host, self._path, self._query = scheme, host, path, query
        self._headers, self._body, self._server, self._gone = headers, body, server, gone
        self._http_version = http_version

    # --- the mapping over the scope -------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.scope[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.scope)

    def __len__(self) -> int:
        return len(self.scope)

    __eq__ = object.__eq__  # one request is itself only, as Starlette's (Mapping would compare scopes)
    __hash__ = object.__hash__

    @cached_property
    def scope(self) -> Dict[str, Any]:
        """The request as an ASGI HTTP scope; a model may store its own keys in it."""
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                "http_version": self._http_version, "method": self.method, "scheme": self._scheme,
                "path": unquote(self._path), "raw_path": self._path.encode("latin-1", "replace"),
                "query_string": self._query.encode("latin-1", "replace"), "root_path": "",
                "headers": self.headers.raw, "client": tuple(self.client) if self.client else None,
                "server": self._server(), "state": {}, "path_params": self.path_params}

    # --- what Starlette's Request has --------------------------------------------------------------------
    @cached_property
    def headers(self) -> Headers:
        """The request headers, read with any case of their names."""
        return Headers(self._headers, self._header_pairs)

    @cached_property
    def url(self) -> URL:
        """The URL the client asked for."""
        return URL(self._scheme, self._host, self._path, self._query)

    @cached_property
    def base_url(self) -> URL:
        """The server's root URL (``http://host:port/``)."""
        return URL(self._scheme, self._host, "/")

    @cached_property
    def query_params(self) -> QueryParams:
        """The query string's parameters."""
        return QueryParams(self._query)

    @cached_property
    def cookies(self) -> Dict[str, str]:
        """The cookies of the ``Cookie`` header, by name."""
        header = self._headers.get("cookie")
        if not header:
            return {}
        try:
            return {name: morsel.value for name, morsel in SimpleCookie(header).items()}
        except CookieError:
            return {}

    @property
    def state(self) -> State:
        """Attributes a model or hook sets for later code (``raw_request.state.user = ...``), kept in the
        scope's ``state``."""
        return State(self.scope["state"])

    async def is_disconnected(self) -> bool:
        """Whether the client has closed its connection (a model may stop generating then)."""
        return self._gone()

    async def body(self) -> bytes:
        """The request body as received."""
        return self._body

    async def json(self) -> Any:
        """The request body as JSON."""
        from orjson import loads

        return loads(self._body)

    async def stream(self):
        """The body in pieces, as Starlette's ``stream()``: here all of it at once, then ``b""``."""
        if self._body:
            yield self._body
        yield b""

    async def close(self) -> None:
        """Nothing to release (Starlette's closes an uploaded form)."""


class Response:
    """``context["response"]``: ``headers`` the model sets are sent with the answer (before the first
    chunk of a stream); ``status_code`` is the answer's status."""

    def __init__(self) -> None:
        self.headers: Dict[str, str] = {}
        self.status_code = 200
