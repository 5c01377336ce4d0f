"""The headers of a RequestHandler's answer, read by the access log once the answer is sent.

Reaches into Tornado: ``RequestHandler._headers``, the answer's headers as sent (after gzip).

Why: Tornado has no public getter for them, and the access log needs ``Content-Length`` and
``x-request-id``; reading the dict costs nothing.

Plain path (``KSERVE_SDK_INTERNALS=off``): :class:`HeaderRecorder`, a mixin of the server's handlers,
keeps its own copy of what goes through the public ``set_header`` / ``add_header`` /
``clear_header`` / ``clear``. A gzipped answer then logs its uncompressed length, and a handler
without the mixin (the docs' static files) logs none.
"""
from typing import Any, Mapping

from tornado.httputil import HTTPHeaders

from . import ENABLED


def response_headers(handler) -> Mapping[str, str]:
    """The answer's headers of ``handler`` (a Tornado RequestHandler); empty when unknown."""
    if ENABLED:
        return handler._headers
    return getattr(handler, "recorded_headers", None) or HTTPHeaders()


class _Recording:
    """Keeps ``recorded_headers``: the headers set through RequestHandler's public methods."""

    recorded_headers: HTTPHeaders

    def clear(self) -> None:
        self.recorded_headers = HTTPHeaders()
        super().clear()

    def set_header(self, name: str, value: Any) -> None:
        super().set_header(name, value)
        self.recorded_headers[name] = str(value)

    def add_header(self, name: str, value: Any) -> None:
        super().add_header(name, value)
        self.recorded_headers.add(name, str(value))

    def clear_header(self, name: str) -> None:
        super().clear_header(name)
        if name in self.recorded_headers:
            del self.recorded_headers[name]


class _NotRecording:
    """Nothing: with the tricks on, the headers are read from the handler itself."""


#: Put first among a RequestHandler's bases; it records the headers only with the tricks off.
HeaderRecorder = _NotRecording if ENABLED else _Recording
