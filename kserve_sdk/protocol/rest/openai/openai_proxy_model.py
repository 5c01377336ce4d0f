"""KServe's module ``kserve.protocol.rest.openai.openai_proxy_model``: ``OpenAIProxyModel`` (the same class as
``kserve_sdk.protocol.rest.openai.OpenAIProxyModel``), the two upstream paths, ``error_handler`` and the names
the module imports.
"""
import functools
import sys
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Optional, TypeVar

from pydantic import ValidationError

from ....errors import UpstreamError
from ....logging import logger
from . import OpenAIProxyModel
from .errors import OpenAIError, create_error_response
from .openai_model import AsyncMappingIterator, OpenAIGenerativeModel
from .types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionChunk,
    CompletionRequest,
    ErrorResponse,
)

__all__ = [
    "CHAT_COMPLETIONS_ENDPOINT", "COMPLETIONS_ENDPOINT", "OpenAIProxyModel", "error_handler", "OpenAIError",
    "create_error_response", "AsyncMappingIterator", "OpenAIGenerativeModel", "ChatCompletion",
    "ChatCompletionChunk", "ChatCompletionRequest", "Completion", "CompletionChunk", "CompletionRequest",
    "ErrorResponse", "logger",
]

#: The paths OpenAIProxyModel adds to its ``predictor_url``.
COMPLETIONS_ENDPOINT = "/v1/completions"
CHAT_COMPLETIONS_ENDPOINT = "/v1/chat/completions"

#: the OpenAI error type of an upstream that could not be reached (503) or did not answer in time (504)
_TRANSPORT_TYPES = {HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError", HTTPStatus.GATEWAY_TIMEOUT:
                    "GatewayTimeout"}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def error_handler(f: F) -> F:
    """Decorate an async method that calls an upstream OpenAI server (KServe's decorator): the httpx errors it
    raises become the OpenAIError answering them. An upstream's error answer goes back as its own OpenAI
    error body (502 when it is not one), a timeout is a 504, an upstream that cannot be reached a 503, any
    other httpx error a 500. kserve_sdk's UpstreamError becomes an OpenAIError of its status too."""
    @functools.wraps(f)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await f(*args, **kwargs)
        except Exception as e:
            error = _as_openai_error(e)
            if error is None:
                raise
            raise error from e

    return wrapper  # type: ignore[return-value]


def _as_openai_error(exc: Exception) -> Optional[OpenAIError]:
    """The OpenAIError answering an upstream failure, or None for an exception that is not one."""
    httpx = sys.modules.get("httpx")  # an httpx error was raised by code that imported httpx
    if httpx is not None and isinstance(exc, httpx.HTTPError):
        return _httpx_error(httpx, exc)
    if isinstance(exc, UpstreamError):
        status = HTTPStatus(exc.http_status)
        return OpenAIError(create_error_response(str(exc), err_type=_TRANSPORT_TYPES.get(status, "BadGateway"),
                                                 status_code=status))
    return None


def _httpx_error(httpx: Any, exc: Any) -> OpenAIError:
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            return OpenAIError(ErrorResponse.model_validate_json(exc.response.content))
        except ValidationError:
            logger.warning("the upstream's error answer is not an OpenAI error: %r", exc.response.content[:500])
            return OpenAIError(create_error_response(
                f"Received invalid response from upstream: {exc.response.text}", err_type="BadGateway",
                status_code=HTTPStatus.BAD_GATEWAY))
    if isinstance(exc, httpx.TimeoutException):
        return OpenAIError(create_error_response(f"Timed out when communicating with upstream: {exc}",
                                                 err_type="GatewayTimeout", status_code=HTTPStatus.GATEWAY_TIMEOUT))
    if isinstance(exc, httpx.NetworkError):
        return OpenAIError(create_error_response(f"Failed to communicate with upstream: {exc}",
                                                 err_type="ServiceUnavailableError",
                                                 status_code=HTTPStatus.SERVICE_UNAVAILABLE))
    return OpenAIError(create_error_response(f"Upstream request failed: {exc}", err_type="InternalServerError",
                                             status_code=HTTPStatus.INTERNAL_SERVER_ERROR))
