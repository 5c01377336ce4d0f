"""``/v1/embeddings``: the requests (a text ``input``, or chat ``messages``) and the answer, with vllm's
field names and defaults."""
from typing import List, Literal, Optional, Union

from pydantic import Field

from .common import OpenAIBaseModel, UsageInfo, now, random_id, random_uuid
from .messages import ChatCompletionMessageParam


class _EmbeddingOptions(OpenAIBaseModel):
    model: Optional[str] = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = None
    user: Optional[str] = None
    truncate_prompt_tokens: Optional[int] = None
    priority: int = 0
    request_id: str = Field(default_factory=random_uuid)
    normalize: Optional[bool] = None


class EmbeddingCompletionRequest(_EmbeddingOptions):
    """Embed ``input``: a text, a list of texts, or token ids."""

    input: Union[List[int], List[List[int]], str, List[str]]
    add_special_tokens: bool = True


class EmbeddingChatRequest(_EmbeddingOptions):
    """Embed a conversation (``messages``) after its chat template."""

    messages: List[ChatCompletionMessageParam]
    add_special_tokens: bool = False


#: An embeddings request: of texts, or (with ``messages``) of a conversation.
EmbeddingRequest = Union[EmbeddingCompletionRequest, EmbeddingChatRequest]


class EmbeddingResponseData(OpenAIBaseModel):
    """One input's embedding: a list of floats, or base64 text with ``encoding_format="base64"``."""

    index: int
    object: str = "embedding"
    embedding: Union[List[float], str]


class Embedding(OpenAIBaseModel):
    """The answer of ``/v1/embeddings`` (vllm's ``EmbeddingResponse``)."""

    id: str = Field(default_factory=lambda: random_id("embd"))
    object: str = "list"
    created: int = Field(default_factory=now)
    model: str
    data: List[EmbeddingResponseData]
    usage: UsageInfo
