"""``/v1/completions``: the request, the answer, its streamed chunks and their log probabilities, with the
field names, defaults and ``object`` values of vllm's types (which KServe re-exports)."""
from typing import Annotated, Dict, List, Literal, Optional, Union

from pydantic import BeforeValidator, Field

from .common import NullableList, OpenAIBaseModel, UsageInfo, now, random_id
from .sampling import SamplingRequest


class CompletionRequest(SamplingRequest):
    """A completion request: the ``prompt`` to continue and how to sample the answer."""

    model: Optional[str] = None
    prompt: Union[List[int], List[List[int]], str, List[str]]
    echo: Optional[bool] = False
    logprobs: Optional[int] = None
    max_tokens: Optional[int] = 16
    n: Annotated[int, BeforeValidator(lambda n: 1 if n is None else n)] = 1  # the API's "integer or null"
    suffix: Optional[str] = None
    add_special_tokens: bool = True


class CompletionLogProbs(OpenAIBaseModel):
    """Log probabilities of a completion's tokens: one entry per token in each list."""

    text_offset: NullableList[int] = Field(default_factory=list)
    token_logprobs: NullableList[Optional[float]] = Field(default_factory=list)
    tokens: NullableList[str] = Field(default_factory=list)
    top_logprobs: NullableList[Optional[Dict[str, float]]] = Field(default_factory=list)


class _CompletionChoiceFields(OpenAIBaseModel):
    index: int
    text: str
    logprobs: Optional[CompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None


class CompletionChoice(_CompletionChoiceFields):
    """One completion of the prompt (vllm's ``CompletionResponseChoice``)."""


class Completion(OpenAIBaseModel):
    """The answer of ``/v1/completions`` (vllm's ``CompletionResponse``)."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: List[CompletionChoice]
    system_fingerprint: Optional[str] = None
    usage: UsageInfo


class CompletionChunkChoice(_CompletionChoiceFields):
    """A piece of one completion in a stream (vllm's ``CompletionResponseStreamChoice``)."""


class CompletionChunk(OpenAIBaseModel):
    """One event of a streamed completion (vllm's ``CompletionStreamResponse``); the last may carry usage."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: str = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: List[CompletionChunkChoice]
    usage: Optional[UsageInfo] = Field(default=None)
    system_fingerprint: Optional[str] = None
