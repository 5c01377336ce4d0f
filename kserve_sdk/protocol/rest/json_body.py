"""What every JSON REST API says alike about a request body: malformed JSON, a body that is not a JSON object,
and a document pydantic refused (told in one sentence naming the field: ``messages[0].role is required``).

pydantic is not imported here: only the OpenAI and time-series APIs, which load it themselves, hand this
module its errors, and the v2 codec that uses this module stays free of it.
"""
from typing import TYPE_CHECKING, Any, Dict, Tuple, Union

import orjson

from ...errors import InvalidInput

if TYPE_CHECKING:
    from pydantic import ValidationError

_SHOWN_INPUT = 60  # characters of a wrong value quoted in an error message


def loads_json(body: Union[bytes, memoryview]) -> Any:
    """Parse a JSON body; a malformed one is the client's error (InvalidInput)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidInput(f"Unrecognized request format: {e}") from None


def json_object(body: Union[bytes, memoryview], what: str = "the request body") -> Dict[str, Any]:
    """The JSON object a body holds; InvalidInput (400) when it is malformed or another JSON value, saying
    which (``the request body must be a JSON object, got list``)."""
    return require_object(loads_json(body), what)


def require_object(doc: Any, what: str = "the request body", name_type: bool = True) -> Dict[str, Any]:
    """``doc`` when it is a JSON object; InvalidInput naming ``what`` (and ``doc``'s type with ``name_type``)."""
    if not isinstance(doc, dict):
        raise InvalidInput(f"{what} must be a JSON object" + (f", got {type(doc).__name__}" if name_type else ""))
    return doc


def describe_validation_error(error: "ValidationError") -> str:
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
