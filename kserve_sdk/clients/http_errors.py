"""The REST client's errors as KServe's code catches them: httpx's exception types too, when httpx is installed.

KServe's ``InferenceRESTClient`` is built on httpx: an error answer raises ``httpx.HTTPStatusError`` (with
``.request`` and ``.response``), a server it cannot reach ``httpx.ConnectError``, a slow one an
``httpx.TimeoutException``. Ours is built on aiohttp and raises :class:`~kserve_sdk.errors.UpstreamError`
(the server answers a transformer's caller with its status). :func:`kserve_type` makes a class that is both,
so ``except httpx.HTTPStatusError`` and ``except UpstreamError`` both catch it. httpx is not one of our
dependencies: it is imported the first time an error is raised, and without it the errors are ours alone.
"""
import functools
from typing import Mapping, Optional, Tuple

#: how aiohttp received the body; it has undone them, so the httpx response made of the body must not say so
_WIRE_HEADERS = frozenset({"content-encoding", "transfer-encoding"})

#: an answer as the client read it: (status, headers, body)
Answer = Tuple[int, Mapping[str, str], bytes]


@functools.cache
def kserve_type(ours: type, httpx_name: str) -> type:
    """A subclass of ``ours`` and of ``httpx.<httpx_name>``, named as httpx names it; ``ours`` itself when
    httpx is not installed."""
    try:
        import httpx
    except ImportError:
        return ours
    theirs = getattr(httpx, httpx_name)
    doc = f"{ours.__name__} that is also httpx.{httpx_name}, the type KServe's REST client raises here."
    return type(httpx_name, (ours, theirs), {"__module__": __name__, "__doc__": doc})


def attach_exchange(error: Exception, method: str, url: str, body: Optional[bytes] = None,
                    headers: Optional[Mapping[str, str]] = None, answer: Optional[Answer] = None) -> Exception:
    """Give an error of a :func:`kserve_type` class httpx's ``.request`` (what was sent) and, with ``answer``,
    ``.response`` (what came back), as httpx fills them. An error of our type alone is returned as it is."""
    if type(error).__module__ != __name__:
        return error
    import httpx

    request = httpx.Request(method, url, headers=dict(headers or {}), content=body)
    Exception.__init__(error, str(error))  # httpx's errors carry their message as args[0]
    error.request = request  # type: ignore[attr-defined]
    if answer is not None:
        status, answer_headers, content = answer
        kept = [(k, v) for k, v in answer_headers.items() if k.lower() not in _WIRE_HEADERS]
        error.response = httpx.Response(status, headers=kept, content=content,  # type: ignore[attr-defined]
                                        request=request)
    return error

