"""OpenAI requests from JSON bytes, and answers and stream events to bytes (errors: error_body.py).

A body that does not validate is the client's error (400), told in one sentence naming the field, which is
also the error's ``param``: ``messages[0].role is required``.
"""
from typing import Any, Dict, Optional, Type

from orjson import dumps as orjson_dumps
from pydantic import BaseModel, ValidationError

from ....errors import InvalidInput
from ..json_body import describe_validation_error, field_path, json_object, loads_json
from . import types

#: endpoint -> the request type its body is read as (embeddings: by whether it has ``messages``)
_REQUEST_TYPES: Dict[str, Type[BaseModel]] = {
    "completions": types.CompletionRequest,
    "chat_completions": types.ChatCompletionRequest,
    "rerank": types.RerankRequest,
}

DONE_EVENT = b"data: [DONE]\n\n"


class InvalidField(InvalidInput):
    """A request field that does not validate: its path is the OpenAI error's ``param``."""

    def __init__(self, reason: str, param: Optional[str]):
        super().__init__(reason)
        self.param = param


def decode_request(endpoint: str, body: bytes) -> BaseModel:
    """The request of ``endpoint`` a JSON body holds; InvalidInput (400) naming the first wrong field."""
    if not body:
        raise InvalidInput("the request body is empty")
    doc = json_object(body)
    kind: Type[BaseModel]
    if endpoint == "embeddings":
        kind = types.EmbeddingChatRequest if "messages" in doc else types.EmbeddingCompletionRequest
    else:
        kind = _REQUEST_TYPES[endpoint]
    try:
        return kind.model_validate(doc)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        param = field_path(first["loc"]) or None
        raise InvalidField(f"invalid request: {describe_validation_error(e)}", param) from None


def encode_answer(answer: Any) -> bytes:
    """A model's whole answer (a response object, or a dict of its fields) as JSON; TypeError for anything
    else."""
    if isinstance(answer, BaseModel):
        return answer.model_dump_json(exclude_none=True).encode("utf-8")
    if not isinstance(answer, dict):
        raise TypeError(f"the answer is a {type(answer).__name__}, not an OpenAI response object or a dict")
    return orjson_dumps(answer)


def encode_event(item: Any) -> bytes:
    """One streamed item as a Server-Sent Event: a preformatted ``"data: ..."`` string as is (KServe's
    contract), any other text, a chunk object or a dict framed here; the model's own ``[DONE]`` is dropped,
    since the server sends it last (after an error event too)."""
    if type(item) is str and item.startswith("data: {"):  # KServe's contract: a chunk, preformatted
        return item.encode("utf-8")
    if isinstance(item, str):
        item = item.encode("utf-8")
    if isinstance(item, (bytes, bytearray)):
        if item.startswith(b"data:"):
            return b"" if item.strip() == DONE_EVENT.strip() else bytes(item)
        return b"data: " + bytes(item).strip() + b"\n\n"
    if isinstance(item, BaseModel):
        return b"data: " + item.model_dump_json(exclude_none=True).encode("utf-8") + b"\n\n"
    return b"data: " + orjson_dumps(item) + b"\n\n"


def usage_of(item: Any) -> Optional[Dict[str, Any]]:
    """The ``usage`` an answer or a streamed chunk carries (as a dict), or None; a preformatted string is
    read only when it names a usage that is not null."""
    if isinstance(item, BaseModel):
        usage = getattr(item, "usage", None)
        return usage.model_dump() if isinstance(usage, BaseModel) else usage
    if isinstance(item, dict):
        return item.get("usage")
    if isinstance(item, (str, bytes)):
        text = item.decode("utf-8", "replace") if isinstance(item, bytes) else item
        if '"usage"' not in text or '"usage":null' in text or '"usage": null' in text:
            return None
        start = text.find("{")
        try:
            return loads_json(text[start:].encode("utf-8")).get("usage") if start >= 0 else None
        except (InvalidInput, AttributeError):
            return None
    return None
