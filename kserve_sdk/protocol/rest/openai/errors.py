"""Errors of the OpenAI API at KServe's import path: ``OpenAIError`` for a model to raise, and
``create_error_response`` to build the ``ErrorResponse`` it returns or raises."""
from http import HTTPStatus
from typing import Union

from ..error_response import ErrorResponseException
from .types import Error, ErrorResponse


class OpenAIError(ErrorResponseException):
    """Raise it from a model's method to answer with an ``ErrorResponse`` (its ``error.code`` is the HTTP
    status) or with a message (answered 500, as in KServe)."""

    response: Union[str, ErrorResponse]

    @property
    def http_status(self) -> int:
        """The status it is answered with: the ErrorResponse's ``error.code``; 500 for a message or a code
        that is not an HTTP error status."""
        if isinstance(self.response, ErrorResponse):
            code = self.response.error.code
            if code is not None and code.isdigit() and 400 <= int(code) <= 599:
                return int(code)
        return int(HTTPStatus.INTERNAL_SERVER_ERROR)


def create_error_response(message: str, err_type: str = "BadRequestError", param: str = "",
                          status_code: HTTPStatus = HTTPStatus.BAD_REQUEST) -> ErrorResponse:
    """An ``ErrorResponse`` whose ``error.code`` is ``status_code`` (400 unless told)."""
    return ErrorResponse(error=Error(message=message, type=err_type, param=param, code=str(int(status_code))))
