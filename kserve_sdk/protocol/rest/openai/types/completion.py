"""``/v1/completions``: the request, the answer, its streamed chunks and their log probabilities, with the
field names, defaults and ``object`` values of vllm's types (which KServe re-exports)."""
from typing import Dict, List, Literal, Optional, Union

from pydantic import Field

from .common import OpenAIBaseModel, StreamOptions, UsageInfo, now, random_id, random_uuid
from .response_format import ResponseFormat


class CompletionRequest(OpenAIBaseModel):
    """A completion request: the ``prompt`` to continue and how to sample the answer."""

    model: Optional[str] = None
    prompt: Union[List[int], List[List[int]], str, List[str]]
    best_of: Optional[int] = None
    echo: Optional[bool] = False
    frequency_penalty: Optional[float] = 0.0
    logit_bias: Optional[Dict[str, float]] = None
    logprobs: Optional[int] = None
    max_tokens: Optional[int] = 16
    n: int = 1
    presence_penalty: Optional[float] = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = Field(default_factory=list)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    suffix: Optional[str] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    user: Optional[str] = None
    # sampling parameters beyond OpenAI's, as vllm names them
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    stop_token_ids: Optional[List[int]] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    add_special_tokens: bool = True
    response_format: Optional[ResponseFormat] = None
    priority: int = 0
    request_id: str = Field(default_factory=random_uuid)


class CompletionLogProbs(OpenAIBaseModel):
    """Log probabilities of a completion's tokens: one entry per token in each list."""

    text_offset: List[int] = Field(default_factory=list)
    token_logprobs: List[Optional[float]] = Field(default_factory=list)
    tokens: List[str] = Field(default_factory=list)
    top_logprobs: List[Optional[Dict[str, float]]] = Field(default_factory=list)


class CompletionChoice(OpenAIBaseModel):
    """One completion of the prompt (vllm's ``CompletionResponseChoice``)."""

    index: int
    text: str
    logprobs: Optional[CompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None


class Completion(OpenAIBaseModel):
    """The answer of ``/v1/completions`` (vllm's ``CompletionResponse``)."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: List[CompletionChoice]
    system_fingerprint: Optional[str] = None
    usage: UsageInfo


class CompletionChunkChoice(OpenAIBaseModel):
    """A piece of one completion in a stream (vllm's ``CompletionResponseStreamChoice``)."""

    index: int
    text: str
    logprobs: Optional[CompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None


class CompletionChunk(OpenAIBaseModel):
    """One event of a streamed completion (vllm's ``CompletionStreamResponse``); the last may carry usage."""

    id: str = Field(default_factory=lambda: random_id("cmpl"))
    object: str = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: List[CompletionChunkChoice]
    usage: Optional[UsageInfo] = Field(default=None)
    system_fingerprint: Optional[str] = None
