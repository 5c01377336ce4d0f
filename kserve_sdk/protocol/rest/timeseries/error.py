"""Errors of the time-series API at KServe's import path: ``TimeSeriesError`` for a forecasting model to
raise, and ``create_error_response`` to build the ``ErrorResponse`` it returns or raises."""
from http import HTTPStatus
from typing import Union

from ..error_response import ErrorResponseException
from .types import Error, ErrorResponse


class TimeSeriesError(ErrorResponseException):
    """Raise it from ``forecast`` to answer with an ``ErrorResponse`` (its ``error.code`` is the HTTP
    status) or with a message (answered 400)."""

    response: Union[str, ErrorResponse]


def create_error_response(message: str, err_type: str = "BadRequestError", param: str = "",
                          status_code: HTTPStatus = HTTPStatus.BAD_REQUEST) -> ErrorResponse:
    """An ``ErrorResponse`` whose ``error.code`` is ``status_code`` (400 unless told)."""
    return ErrorResponse(error=Error(message=message, type=err_type, param=param, code=str(int(status_code))))
