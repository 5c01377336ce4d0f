"""Forecast requests from JSON bytes and forecast answers to a status and JSON bytes.

A body that does not validate is the client's error, told in one sentence naming the field, e.g.
``inputs[0].frequency: Input should be 'second', 'S', ... (got 'fortnight')``.
"""
from http import HTTPStatus
from typing import Tuple, Union

from pydantic import ValidationError

from ....errors import InvalidInput
from ..json_body import describe_validation_error, field_path, json_object
from .types import ErrorResponse, ForecastRequest, ForecastResponse

__all__ = ["decode_forecast_request", "encode_forecast_result", "describe_validation_error", "field_path"]


def decode_forecast_request(body: bytes) -> ForecastRequest:
    """The ForecastRequest a JSON body holds; InvalidInput (400) naming the first wrong field otherwise."""
    if not body:
        raise InvalidInput("the request body is empty")
    doc = json_object(body, "a forecast request")
    try:
        return ForecastRequest.model_validate(doc)
    except ValidationError as e:
        raise InvalidInput(f"invalid forecast request: {describe_validation_error(e)}") from None


def encode_forecast_result(result: Union[ForecastResponse, ErrorResponse]) -> Tuple[int, bytes]:
    """The HTTP status and JSON body answering a forecast: 200 with the ForecastResponse, or an
    ErrorResponse with its ``error.code`` as the status (400 when it has none, and then in the body too;
    500 when the code is not an HTTP error status)."""
    if isinstance(result, ForecastResponse):
        return int(HTTPStatus.OK), result.model_dump_json().encode("utf-8")
    code = result.error.code
    if code is None:
        result = result.model_copy(update={"error": result.error.model_copy(update={"code": "400"})})
        status = int(HTTPStatus.BAD_REQUEST)
    else:
        status = int(code) if code.isdigit() and 400 <= int(code) <= 599 else int(HTTPStatus.INTERNAL_SERVER_ERROR)
    return status, result.model_dump_json().encode("utf-8")
