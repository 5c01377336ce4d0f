"""The restricted groups on REST: a request to a restricted group without its header is answered 403.

:func:`protect_app` plugs the check into an application made by ``handlers/http.py``: every RequestHandler
calls the application's ``access_check`` setting from ``BaseHandler.prepare`` (after its call opened, so the
403 is counted, access-logged and shaped like any answer of its API: OpenAI's for ``/openai/...``); the fast
path of the inference routes hands a request that does not pass to the RequestHandlers, which refuse it.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

from ..errors import PermissionDenied
from .restricted import Restriction, covering, rest_group


def group_of(handler_class: type) -> Optional[str]:
    """The group of a REST handler class (None: it is in none)."""
    return rest_group(getattr(handler_class, "protocol", "rest_v2"), getattr(handler_class, "endpoint", "other"),
                      getattr(handler_class, "restricted_group", None))


class AccessCheck:
    """``access_check(handler)``: raises PermissionDenied when the handler's group is restricted and its
    request lacks the header. The restriction of each handler class is found once."""

    def __init__(self, by_group: Dict[str, Restriction]):
        self._by_group = by_group
        self._of_class: Dict[type, Optional[Restriction]] = {}

    def __call__(self, handler: Any) -> None:
        cls = type(handler)
        try:
            restriction = self._of_class[cls]
        except KeyError:
            restriction = self._of_class[cls] = self._by_group.get(group_of(cls) or "")
        if restriction is not None and not restriction.allows(handler.request.headers.get):
            raise PermissionDenied(restriction.http_message())


class GuardedFastPath:
    """The application's fast path, declining a request that does not pass the restrictions of the fast
    routes' groups (a RequestHandler then answers it, 403 when its own group refuses it)."""

    def __init__(self, fast_path: Any, restrictions: Tuple[Restriction, ...]):
        self._fast_path = fast_path
        self._restrictions = restrictions

    def delegate_for(self, request: Any) -> Any:
        get = request.headers.get
        for restriction in self._restrictions:
            if not restriction.allows(get):
                return None
        return self._fast_path.delegate_for(request)

    def __getattr__(self, name: str) -> Any:  # dataplane, request_log: what the application reads of it
        return getattr(self._fast_path, name)


def protect_app(app: Any, by_group: Dict[str, Restriction]) -> None:
    """Check the restrictions ``by_group`` on every request ``app`` (a ``handlers/http.py`` application)
    answers; nothing when there are none."""
    if not by_group:
        return
    app.settings["access_check"] = AccessCheck(by_group)
    fast_path = getattr(app, "fast_path", None)
    if fast_path is not None:
        routes: Sequence[Any] = app.route_table.fast_routes()
        restrictions = covering(by_group, (group_of(handler) for _, handler, _ in routes))
        if restrictions:
            app.fast_path = GuardedFastPath(fast_path, restrictions)
