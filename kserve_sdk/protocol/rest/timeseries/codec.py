"""Forecast requests from JSON bytes and forecast answers to a status and JSON bytes.

A body that does not validate is the client's error, told in one sentence naming the field, e.g.
``inputs[0].frequency: Input should be 'second', 'S', ... (got 'fortnight')``.
"""
from http import HTTPStatus
from typing import Any, Tuple, Union

from pydantic import ValidationError

from ....errors import InvalidInput
from ...rest_codec import loads_json
from .types import ErrorResponse, ForecastRequest, ForecastResponse

_SHOWN_INPUT = 60  # characters of a wrong value quoted in an error message


def decode_forecast_request(body: bytes) -> ForecastRequest:
    """The ForecastRequest a JSON body holds; InvalidInput (400) naming the first wrong field otherwise."""
    if not body:
        raise InvalidInput("the request body is empty")
    doc = loads_json(body)
    if not isinstance(doc, dict):
        raise InvalidInput(f"a forecast request must be a JSON object, got {type(doc).__name__}")
    try:
        return ForecastRequest.model_validate(doc)
    except ValidationError as e:
        raise InvalidInput(f"invalid forecast request: {describe_validation_error(e)}") from None


def describe_validation_error(error: ValidationError) -> str:
    """The first problem pydantic found as ``<field path>: <what is wrong>``, with how many more there are."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = field_path(first["loc"]) or "the document"
    if first["type"] == "missing":
        sentence = f"{where} is required"
    else:
        sentence = f"{where}: {first['msg']} (got {_shown(first.get('input'))})"
    others = len({field_path(p["loc"]) for p in problems[1:]} - {field_path(first["loc"])})
    return sentence + (f"; and {others} more problem{'s' * (others > 1)}" if others else "")


def field_path(loc: Tuple[Union[str, int], ...]) -> str:
    """A pydantic error location as a path a person reads: ``inputs[0].series[3]``.

    The names pydantic adds for the branches of a union (``list[float]``) are left out.
    """
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" not in part:
            path += f".{part}" if path else part
    return path


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_INPUT else text[:_SHOWN_INPUT - 3] + "..."


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
