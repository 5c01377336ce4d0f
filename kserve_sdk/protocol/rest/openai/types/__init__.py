"""The OpenAI API's request and response documents (KServe's ``kserve.protocol.rest.openai.types``), as
pydantic models with the names KServe gives vllm's types, and their field names, defaults and ``object``
values, so model code written for KServe builds and reads them unchanged.

Importing this package imports pydantic: a server imports it only when it serves an OpenAI model.
"""
from .chat import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionLogProb,
    ChatCompletionLogProbs,
    ChatCompletionLogProbsContent,
    ChatCompletionRequest,
    ChatCompletionToolsParam,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    DeltaFunctionCall,
    DeltaToolCall,
    FunctionCall,
    FunctionDefinition,
    ToolCall,
)
from .common import (
    Error,
    ErrorResponse,
    Model,
    ModelList,
    OpenAIBaseModel,
    PromptTokenUsageInfo,
    StreamOptions,
    UsageInfo,
)
from .completion import (
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionLogProbs,
    CompletionRequest,
)
from .embedding import (
    Embedding,
    EmbeddingChatRequest,
    EmbeddingCompletionRequest,
    EmbeddingRequest,
    EmbeddingResponseData,
)
from .messages import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartParam,
    ChatCompletionContentPartTextParam,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ConversationMessage,
    CustomChatCompletionMessageParam,
)
from .rerank import Rerank, RerankDocument, RerankRequest, RerankResult, RerankUsage
from .response_format import JsonSchemaResponseFormat, ResponseFormat
from .sampling import SamplingRequest

__all__ = [
    # KServe's names
    "ChatCompletion", "ChatCompletionChoice", "ChatCompletionChunk", "CompletionChunk", "CompletionChunkChoice",
    "ChatMessage", "ChatCompletionLogProb", "ChatCompletionLogProbs", "ChoiceDelta", "ChunkChoice", "Completion",
    "CompletionChoice", "ChatCompletionRequest", "CompletionRequest", "ChatCompletionContentPartParam",
    "CustomChatCompletionMessageParam", "ChatCompletionMessageParam", "ChatCompletionToolMessageParam",
    "ChatCompletionContentPartTextParam", "ChatCompletionAssistantMessageParam", "ConversationMessage", "Error",
    "ErrorResponse", "CompletionLogProbs", "UsageInfo", "ChatCompletionLogProbsContent", "Embedding",
    "EmbeddingCompletionRequest", "EmbeddingRequest", "EmbeddingResponseData", "Model", "ModelList",
    "RerankRequest", "Rerank",
    # the parts they are made of
    "OpenAIBaseModel", "PromptTokenUsageInfo", "StreamOptions", "ResponseFormat", "JsonSchemaResponseFormat",
    "ChatCompletionToolsParam", "FunctionDefinition", "FunctionCall", "ToolCall", "DeltaFunctionCall",
    "DeltaToolCall", "EmbeddingChatRequest", "RerankDocument", "RerankResult", "RerankUsage", "SamplingRequest",
]
