"""What every HTTP answer is made of, whichever path sends it (fast_path.py's delegate, a RequestHandler,
the body limit of http.py): the ``{"error": ...}`` reply of an exception, the headers every answer
carries (``x-request-id``, ``Server``, ``Date``), model-set header values as text, and gzip (Tornado's
own ``GZipContentEncoding``, which also serves the handlers)."""
import datetime
import numbers
import time
from email.utils import formatdate
from typing import Any, Callable, Dict, NamedTuple, Tuple

from tornado import httputil
from tornado.httputil import HTTPHeaders, HTTPServerRequest
from tornado.web import GZipContentEncoding

from ..dataplane import SERVER_NAME, SERVER_VERSION
from ..lifecycle import Call, Failure
from ..protocol.rest_codec import dumps
from ..tracing import answer_traceparent

JSON = "application/json"
#: The ``Server`` header of every answer.
SERVER = f"{SERVER_NAME}/{SERVER_VERSION}"


class Reply(NamedTuple):
    """An answer apart from its transport: the body, its content type and the other response headers."""

    body: bytes
    content_type: str
    headers: Dict[str, str]


def error_document(status: int, message: str) -> bytes:
    """The JSON body of an error answer: ``{"error": message}``."""
    return dumps({"error": message})


def error_reply(call: Call, exc: BaseException, where: str,
                document: Callable[[int, str], bytes] = error_document) -> Tuple[int, Reply]:
    """The status and ``{"error": ...}`` reply answering ``exc``; the call logs it (``where``: method and path).
    ``document(status, message)`` makes the body, for a protocol whose errors have another shape."""
    failure = call.failed(exc, where)
    return failure.status, Reply(document(failure.status, failure.message), JSON, failure_headers(failure))


def failure_headers(failure: Failure) -> Dict[str, str]:
    """The headers an error answer carries beyond the common ones: ``Retry-After`` for a busy server."""
    return {} if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}


def header_text(name: str, value: Any) -> str:
    """The value a model set for header ``name``, as text (str, bytes, integers and datetimes, as Tornado
    takes them); a line break in it is refused (ValueError), since it would end the header."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        text = value.decode("latin1")
    elif isinstance(value, numbers.Integral):
        return str(value)
    elif isinstance(value, datetime.datetime):
        return httputil.format_timestamp(value)
    else:
        raise TypeError(f"unsupported value {value!r} of the response header {name!r}")
    if "\r" in text or "\n" in text:
        raise ValueError(f"the response header {name!r} holds a line break: {text!r}")
    return text


def answer_headers(call: Call, request: HTTPServerRequest, status: int, reply: Reply,
                   compress: bool) -> Tuple[HTTPHeaders, bytes]:
    """The headers and body of a whole answer sent without a RequestHandler: the reply's own headers, then
    Content-Type, the common headers and, when the client takes it and it pays, gzip."""
    headers = HTTPHeaders()
    for name, value in reply.headers.items():
        headers[name] = header_text(name, value)
    headers["Content-Type"] = reply.content_type
    headers["Server"] = SERVER
    headers["Date"] = http_date()
    headers["x-request-id"] = call.request_id
    if call.span is not None and (traceparent := answer_traceparent(call)):
        headers["traceparent"] = traceparent
    body = reply.body
    headers["Content-Length"] = str(len(body))
    if compress:
        _, headers, body = GZipContentEncoding(request).transform_first_chunk(status, headers, body, True)
    return headers, body


_date_second, _date_text = 0, ""


def http_date() -> str:
    """The ``Date`` header's value, formatted once a second."""
    global _date_second, _date_text
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_text = now, formatdate(now, usegmt=True)
    return _date_text
