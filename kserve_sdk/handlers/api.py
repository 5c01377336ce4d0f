"""What one REST API declares, so that the HTTP application (http.py) serves it without naming it.

A REST API (KServe v1, Open Inference Protocol v2, the SSE streams, OpenAI, time series, the OpenAPI
documents, Triton's extensions, or one of a script's own) is a module holding a :class:`RestAPI`:

- its **routes**: ``(pattern, handler class)`` pairs, tried in order (the first whose pattern matches the
  whole path answers it). A handler's ``protocol`` and ``endpoint`` attributes are the metric and
  access-log labels of its calls, its first path group the model's name;
- its **error shape**: ``error_document(status, message) -> bytes``, the body of an error answer given
  before any of its handlers runs (the 413 of ``--max_body_size``; its handlers' own errors use their
  ``error_document`` method);
- the **endpoints never traced** (health, readiness, metrics, ...).

The server serves ``model_server.REST_APIS``, in that list's order; :class:`RouteTable` is that list as
one application serves it. Nothing here costs a request anything: the table is made once per application.
"""
import re
from typing import Any, Callable, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from .responder import error_document as plain_error_document

#: ``(pattern, handler class)``: Tornado's route-table entry.
Route = Tuple[str, type]
#: ``(protocol, endpoint, model name or None)``: the labels of a call.
Labels = Tuple[str, str, Optional[str]]
#: ``error_document(status, message) -> bytes``: an error answer's body.
ErrorDocument = Callable[[int, str], bytes]

#: Path pieces the APIs share: a model's name, and an optional ``/versions/<v>`` after it.
MODEL = r"([^/]+?)"
VERSION = r"(?:/versions/([^/]+))?"


class Options(NamedTuple):
    """What the server was started with that decides an API's routes."""

    enable_docs_url: bool = False


class RestAPI:
    """One REST API: its routes, its error body's shape, and the endpoints whose calls are never traced.

    ``routes`` is a list of ``(pattern, handler class)``, or a function of the server's :class:`Options`
    returning one (for routes that depend on a flag or the environment, read when the application is made).
    """

    __slots__ = ("name", "_routes", "error_document", "untraced")

    def __init__(self, name: str, routes: Union[Sequence[Route], Callable[[Options], Sequence[Route]]],
                 error_document: ErrorDocument = plain_error_document, untraced: Iterable[str] = ()):
        self.name = name
        self._routes = routes
        self.error_document = error_document
        self.untraced: FrozenSet[str] = frozenset(untraced)

    def routes(self, options: Options) -> List[Route]:
        """The route-table entries of this API for a server started with ``options``."""
        return list(self._routes(options) if callable(self._routes) else self._routes)

    def mount(self, options: Options) -> "MountedAPI":
        """This API with its routes made for one application."""
        return MountedAPI(self, self.routes(options))

    def __repr__(self) -> str:
        return f"RestAPI({self.name!r})"


class MountedAPI:
    """A :class:`RestAPI` with its routes as one application serves them."""

    __slots__ = ("api", "routes", "_patterns")

    def __init__(self, api: RestAPI, routes: List[Route]):
        self.api, self.routes = api, routes
        self._patterns = [(re.compile(pattern), handler) for pattern, handler in routes]

    def labels_of(self, path: str) -> Optional[Labels]:
        """The labels of a request to ``path`` if one of this API's routes matches it, else None: the
        ``protocol`` and ``endpoint`` of that route's handler and its first path group (the model)."""
        for pattern, handler in self._patterns:
            match = pattern.fullmatch(path)
            if match is not None:
                return (getattr(handler, "protocol", "rest_v2"), getattr(handler, "endpoint", "other"),
                        match.group(1) if pattern.groups else None)
        return None


class RouteTable:
    """A list of APIs as one application serves them: their routes in the list's order, and what an answer
    given before any handler runs is labelled and shaped like."""

    def __init__(self, apis: Iterable[RestAPI], options: Options, not_found: type):
        self.apis = [api.mount(options) for api in apis]
        self.routes: List[Route] = [route for api in self.apis for route in api.routes]
        self._not_found: Labels = (getattr(not_found, "protocol", "rest_v2"),
                                   getattr(not_found, "endpoint", "other"), None)

    def answer_for(self, path: str) -> Tuple[Labels, ErrorDocument]:
        """The labels and error shape of an answer to ``path`` given before any handler runs (the body
        limit's 413): those of the first API, in the list's order, whose routes match it; for a path no
        route matches, the labels of the not-found handler and the plain ``{"error": ...}`` shape."""
        for api in self.apis:
            labels = api.labels_of(path)
            if labels is not None:
                return labels, api.api.error_document
        return self._not_found, plain_error_document

    def untraced(self) -> FrozenSet[str]:
        """The endpoints the APIs declare never traced, and the not-found handler's (what no route matched)."""
        return frozenset({self._not_found[1]}).union(*(api.api.untraced for api in self.apis))

    def fast_routes(self) -> List[Tuple[str, Any, ErrorDocument]]:
        """``(pattern, handler, error document)`` of the routes whose handler has a ``fast_answer``
        (served by fast_path.py), in order."""
        return [(pattern, handler, api.api.error_document) for api in self.apis for pattern, handler in api.routes
                if hasattr(handler, "fast_answer")]

