"""What a model's OpenAI method is handed of the HTTP exchange, apart from its transport: ``raw_request``
(the parts of Starlette's ``Request`` that KServe users read) and ``context["response"]``."""
from typing import Any, Callable, Dict, NamedTuple, Optional


class Address(NamedTuple):
    """The client's address: ``host`` and ``port``."""

    host: str
    port: int


class URL(str):
    """The request's URL as text, with the parts Starlette's URL has (``path``, ``query``)."""

    path: str = ""
    query: str = ""

    def __new__(cls, full: str, path: str, query: str) -> "URL":
        url = super().__new__(cls, full)
        url.path, url.query = path, query
        return url


class RawRequest:
    """The HTTP request behind a call: ``headers`` (lowercase names), ``url``, ``method``, ``client``,
    ``query_params``, ``await body()``, ``await json()`` and ``await is_disconnected()``."""

    def __init__(self, headers: Dict[str, str], url: URL, method: str, client: Optional[Address], body: bytes,
                 query_params: Dict[str, str], gone: Callable[[], bool]):
        self.headers, self.url, self.method, self.client = headers, url, method, client
        self.query_params = query_params
        self._body, self._gone = body, gone

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


class Response:
    """``context["response"]``: ``headers`` the model sets are sent with the answer (before the first
    chunk of a stream); ``status_code`` is the answer's status."""

    def __init__(self) -> None:
        self.headers: Dict[str, str] = {}
        self.status_code = 200
