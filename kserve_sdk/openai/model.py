"""The OpenAI model family (KServe's ``kserve.protocol.rest.openai``): ``OpenAIModel`` and its two kinds,
``OpenAIGenerativeModel`` (``/v1/completions``, ``/v1/chat/completions``) and ``OpenAIEncoderModel``
(``/v1/embeddings``, ``/v1/rerank``), served under ``KSERVE_OPENAI_ROUTE_PREFIX`` (default ``/openai``).

The request and response types live in ``kserve_sdk.protocol.rest.openai.types`` (pydantic), which this
module does not import, so that a server which serves no OpenAI model never loads pydantic.
"""
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Optional, Union

from ..model import BaseKServeModel

if TYPE_CHECKING:
    from ..protocol.rest.openai.raw_request import RawRequest
    from ..protocol.rest.openai.types import (
        ChatCompletion,
        ChatCompletionRequest,
        Completion,
        CompletionRequest,
        Embedding,
        EmbeddingRequest,
        ErrorResponse,
        Rerank,
        RerankRequest,
    )


class OpenAIModel(BaseKServeModel):
    """A model served over the OpenAI API. Ready as soon as it is made, as in KServe (override ``load``
    and ``healthy`` to say otherwise).

    Each method receives the validated request, ``raw_request`` (the HTTP request as KServe's Starlette
    ``Request``: ``headers``, ``url``, ``client``, ``state``, ``raw_request["path"]`` and the rest of its
    ASGI scope, ``await raw_request.is_disconnected()``) and ``context`` (``context["headers"]``: the request
    headers, lowercase names; ``context["response"].headers``: a dict of headers to send back).
    A method returns the answer object (or a dict of its fields), an ``ErrorResponse`` (sent with its
    ``error.code`` as the HTTP status), or, for a stream, an async generator of chunks: preformatted
    ``"data: {...}\\n\\n"`` strings as in KServe, or chunk objects or dicts, which the server frames.
    """

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True


class OpenAIGenerativeModel(OpenAIModel):
    """A model that writes text: implement ``create_completion`` and ``create_chat_completion``."""

    @abstractmethod
    async def create_completion(self, request: "CompletionRequest", raw_request: Optional["RawRequest"] = None,
                                context: Optional[Dict[str, Any]] = None
                                ) -> Union[AsyncIterator[Any], "Completion", "ErrorResponse"]:
        """Complete ``request.prompt``: a Completion, or with ``request.stream`` an async generator."""

    @abstractmethod
    async def create_chat_completion(self, request: "ChatCompletionRequest",
                                     raw_request: Optional["RawRequest"] = None,
                                     context: Optional[Dict[str, Any]] = None
                                     ) -> Union[AsyncIterator[Any], "ChatCompletion", "ErrorResponse"]:
        """Answer the conversation ``request.messages``: a ChatCompletion, or with ``request.stream`` an
        async generator of chunks."""


class OpenAIEncoderModel(OpenAIModel):
    """A model that encodes text: implement ``create_embedding`` and ``create_rerank``."""

    @abstractmethod
    async def create_embedding(self, request: "EmbeddingRequest", raw_request: Optional["RawRequest"] = None,
                               context: Optional[Dict[str, Any]] = None) -> Union["Embedding", "ErrorResponse"]:
        """Embed ``request.input``: an Embedding."""

    @abstractmethod
    async def create_rerank(self, request: "RerankRequest", raw_request: Optional["RawRequest"] = None,
                            context: Optional[Dict[str, Any]] = None) -> Union["Rerank", "ErrorResponse"]:
        """Rank ``request.documents`` by their relevance to ``request.query``: a Rerank."""
