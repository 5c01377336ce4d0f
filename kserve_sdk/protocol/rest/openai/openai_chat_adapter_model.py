"""KServe's module ``kserve.protocol.rest.openai.openai_chat_adapter_model``: ``OpenAIChatAdapterModel`` (the
same class as ``kserve_sdk.protocol.rest.openai.OpenAIChatAdapterModel``) and the names the module imports.
"""
from ....errors import InvalidInput
from . import OpenAIChatAdapterModel
from .openai_model import AsyncMappingIterator, ChatPrompt, OpenAIGenerativeModel
from .types import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionLogProb,
    ChatCompletionLogProbs,
    ChatCompletionLogProbsContent,
    ChatCompletionRequest,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionLogProbs,
    CompletionRequest,
    ErrorResponse,
)

__all__ = [
    "OpenAIChatAdapterModel", "AsyncMappingIterator", "ChatPrompt", "InvalidInput", "OpenAIGenerativeModel",
    "ChatCompletion", "ChatCompletionChoice", "ChatCompletionChunk", "ChatCompletionLogProb",
    "ChatCompletionLogProbs", "ChatCompletionLogProbsContent", "ChatCompletionRequest", "ChatMessage",
    "ChoiceDelta", "ChunkChoice", "Completion", "CompletionChoice", "CompletionChunk", "CompletionChunkChoice",
    "CompletionLogProbs", "CompletionRequest", "ErrorResponse",
]
