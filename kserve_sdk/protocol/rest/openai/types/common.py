"""What the OpenAI documents share: the base class (unknown fields accepted), list fields that read null
as empty, ids, usage, the model list, stream options and the error answer."""
import time
import uuid
from typing import Annotated, Any, List, Optional, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

T = TypeVar("T")


def _empty_if_null(value: Any) -> Any:
    return [] if value is None else value


#: A list field that reads ``null`` as an empty list: OpenAI's API and servers such as LitServe send
#: ``"tool_calls": null`` or ``"tokens": null`` where vllm's types want a list (and refuse null).
NullableList = Annotated[List[T], BeforeValidator(_empty_if_null)]


def _empty_object_if_null(value: Any) -> Any:
    return {} if value is None else value


#: An object field that reads ``null`` as an empty object: some servers end a chat stream with
#: ``"delta": null`` where OpenAI's schema (and vllm's types) want an object.
NullableObject = BeforeValidator(_empty_object_if_null)


class OpenAIBaseModel(BaseModel):
    """The base of every OpenAI request and response: fields the API does not define (or that this server
    does not read) are accepted and kept, as the OpenAI API and vllm accept them."""

    model_config = ConfigDict(extra="allow")


def random_uuid() -> str:
    """32 random hex digits: a request's default ``request_id``."""
    return uuid.uuid4().hex


def random_id(prefix: str) -> str:
    """A fresh id of the form ``<prefix>-<32 hex digits>`` (``cmpl-...``, ``chatcmpl-...``)."""
    return f"{prefix}-{random_uuid()}"


def now() -> int:
    """The current time in whole seconds since the epoch: the ``created`` field."""
    return int(time.time())


class PromptTokenUsageInfo(OpenAIBaseModel):
    """Details of the prompt's tokens."""

    cached_tokens: Optional[int] = None


class UsageInfo(OpenAIBaseModel):
    """How many tokens the prompt and the answer took."""

    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: Optional[int] = 0
    prompt_tokens_details: Optional[PromptTokenUsageInfo] = None


class StreamOptions(OpenAIBaseModel):
    """Options of a streamed answer: whether the last chunk carries ``usage``."""

    include_usage: Optional[bool] = True
    continuous_usage_stats: Optional[bool] = False


class Model(OpenAIBaseModel):
    """One served model, as ``GET /v1/models`` lists it (vllm's ``ModelCard``)."""

    id: str
    object: str = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "vllm"
    root: Optional[str] = None
    parent: Optional[str] = None
    max_model_len: Optional[int] = None


class ModelList(OpenAIBaseModel):
    """The answer of ``GET /v1/models``."""

    object: str = "list"
    data: List[Model] = Field(default_factory=list)


class Error(BaseModel):
    """What went wrong: ``code`` is the HTTP status as a string (the answer is sent with it), ``param`` the
    request field the error is about."""

    code: Optional[str] = Field(...)
    message: str
    param: Optional[str] = Field(...)
    type: str


class ErrorResponse(BaseModel):
    """An error answer, ``{"error": {"message", "type", "param", "code"}}``; a model may return it."""

    error: Error
