"""Errors in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, for any exception; this
module needs no pydantic, so a server that serves no OpenAI model answers the routes' 404 without it."""
import sys
from http import HTTPStatus
from typing import Optional, Tuple

from orjson import dumps as orjson_dumps

_ERRORS_MODULE = __name__.rpartition(".")[0] + ".errors"


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status: ``BadRequestError``, ``NotFoundError``..."""
    try:
        name = HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
    except ValueError:
        return "Error"
    return name if name.endswith("Error") else name + "Error"


def error_body(status: int, message: str, param: Optional[str] = None) -> bytes:
    """The OpenAI-shaped error document for ``status`` and ``message``."""
    return orjson_dumps({"error": {"message": message, "type": error_type(status), "param": param,
                                   "code": str(status)}})


def error_answer(exc: BaseException, status: int, message: str) -> Tuple[int, bytes]:
    """The status and body answering ``exc`` (whose status and message the call's failure gave): an
    OpenAIError carrying an ErrorResponse is sent as it is, with ``int(error.code)``; anything else in
    OpenAI's shape, with the field of a request that did not validate as ``param``."""
    errors = sys.modules.get(_ERRORS_MODULE)  # not imported: exc cannot be an OpenAIError
    if errors is not None and isinstance(exc, errors.OpenAIError) and not isinstance(exc.response, str):
        return exc.http_status, exc.response.model_dump_json().encode("utf-8")
    return status, error_body(status, message, getattr(exc, "param", None))
