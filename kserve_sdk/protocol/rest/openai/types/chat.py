"""``/v1/chat/completions``: the request, the answer, its streamed chunks, the messages and tool calls of
answers, and chat log probabilities, with the field names, defaults and ``object`` values of vllm's types."""
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import Field

from .common import NullableList, NullableObject, OpenAIBaseModel, UsageInfo, now, random_id
from .messages import ChatCompletionMessageParam
from .sampling import SamplingRequest


class FunctionDefinition(OpenAIBaseModel):
    """A function the model may call: its name, what it does and its JSON-schema parameters."""

    name: str
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None


class ChatCompletionToolsParam(OpenAIBaseModel):
    """A tool offered to the model (``{"type": "function", "function": {...}}``)."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class ChatCompletionRequest(SamplingRequest):
    """A chat request: the conversation so far (``messages``) and how to sample the answer."""

    messages: List[ChatCompletionMessageParam]
    model: Optional[str] = None
    logprobs: Optional[bool] = False
    top_logprobs: Optional[int] = 0
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    n: Optional[int] = 1
    tools: Optional[List[ChatCompletionToolsParam]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], Dict[str, Any]]] = "none"
    parallel_tool_calls: Optional[bool] = False
    # chat template parameters
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: Optional[List[Dict[str, str]]] = None
    chat_template: Optional[str] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None


class FunctionCall(OpenAIBaseModel):
    """A call the model makes: the function's name and its arguments as a JSON string."""

    name: str
    arguments: str


class ToolCall(OpenAIBaseModel):
    """One tool call of an answer."""

    id: str = Field(default_factory=lambda: random_id("chatcmpl-tool"))
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaFunctionCall(OpenAIBaseModel):
    """A piece of a function call in a stream."""

    name: Optional[str] = None
    arguments: Optional[str] = None


class DeltaToolCall(OpenAIBaseModel):
    """A piece of a tool call in a stream: every field but ``index`` optional."""

    id: Optional[str] = None
    type: Optional[Literal["function"]] = None
    index: int
    function: Optional[DeltaFunctionCall] = None


class ChatMessage(OpenAIBaseModel):
    """The message of an answer."""

    role: str
    content: Optional[str] = None
    refusal: Optional[str] = None
    tool_calls: NullableList[ToolCall] = Field(default_factory=list)
    reasoning_content: Optional[str] = None


class ChatCompletionLogProb(OpenAIBaseModel):
    """A token, its log probability and its UTF-8 bytes."""

    token: str
    logprob: float = -9999.0
    bytes: Optional[List[int]] = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    """A token of the answer with the most likely tokens at its place."""

    top_logprobs: NullableList[ChatCompletionLogProb] = Field(default_factory=list)


class ChatCompletionLogProbs(OpenAIBaseModel):
    """The log probabilities of an answer's tokens."""

    content: Optional[List[ChatCompletionLogProbsContent]] = None


class ChatCompletionChoice(OpenAIBaseModel):
    """One answer of a chat (vllm's ``ChatCompletionResponseChoice``)."""

    index: int
    message: ChatMessage
    logprobs: Optional[ChatCompletionLogProbs] = None
    finish_reason: Optional[str] = "stop"
    stop_reason: Optional[Union[int, str]] = None


class ChatCompletion(OpenAIBaseModel):
    """The answer of ``/v1/chat/completions`` (vllm's ``ChatCompletionResponse``)."""

    id: str = Field(default_factory=lambda: random_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: List[ChatCompletionChoice]
    system_fingerprint: Optional[str] = None
    usage: UsageInfo


class ChoiceDelta(OpenAIBaseModel):
    """What a chunk adds to the answer's message (vllm's ``DeltaMessage``)."""

    role: Optional[str] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: NullableList[DeltaToolCall] = Field(default_factory=list)


class ChunkChoice(OpenAIBaseModel):
    """A piece of one answer in a stream (vllm's ``ChatCompletionResponseStreamChoice``)."""

    index: int
    delta: Annotated[ChoiceDelta, NullableObject]
    logprobs: Optional[ChatCompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None


class ChatCompletionChunk(OpenAIBaseModel):
    """One event of a streamed chat answer (vllm's ``ChatCompletionStreamResponse``)."""

    id: str = Field(default_factory=lambda: random_id("chatcmpl"))
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now)
    model: str
    choices: List[ChunkChoice]
    usage: Optional[UsageInfo] = Field(default=None)
    system_fingerprint: Optional[str] = None
