"""``OpenAIChatAdapterModel``: a generative model written as completions only. The user writes
``apply_chat_template(request) -> ChatPrompt`` and ``create_completion``; a chat request becomes a
completion request of the template's prompt, and the completion (or each streamed chunk) becomes the chat
answer (``chat.completion``, ``chat.completion.chunk``), as in KServe."""
import functools
import inspect
from abc import abstractmethod
from typing import Any, AsyncIterator, Dict, List, Optional, Union

from orjson import loads as orjson_loads
from pydantic import BaseModel

from ..errors import InvalidInput
from ..protocol.rest.openai.raw_request import RawRequest
from ..protocol.rest.openai.types import (
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
from .model import OpenAIGenerativeModel


class ChatPrompt(BaseModel):
    """What a chat template makes of a conversation: the prompt to complete and the answer's role."""

    response_role: str = "assistant"
    prompt: str


def _token_bytes(token: str) -> List[int]:
    return list(token.encode("utf-8"))


@functools.cache
def _takes_context(method: Any) -> bool:
    """Whether a ``create_completion`` accepts a third argument, ``context``."""
    parameters = list(inspect.signature(method).parameters.values())
    return len(parameters) >= 4 or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)


def _as_chunk(item: Any) -> Optional[CompletionChunk]:
    """A streamed completion item as a CompletionChunk: a KServe ``"data: {...}"`` string, a dict or a
    chunk object; None for the closing ``[DONE]``."""
    if isinstance(item, (str, bytes)):
        text = item.decode("utf-8") if isinstance(item, bytes) else item
        text = text.strip()
        text = text[len("data:"):].strip() if text.startswith("data:") else text
        return None if text == "[DONE]" else CompletionChunk.model_validate(orjson_loads(text))
    if isinstance(item, dict):
        return CompletionChunk.model_validate(item)
    return item


class OpenAIChatAdapterModel(OpenAIGenerativeModel):
    """A generative model whose chat requests are answered by its completions."""

    @abstractmethod
    def apply_chat_template(self, request: ChatCompletionRequest) -> ChatPrompt:
        """The prompt to complete for the conversation ``request.messages`` (may also be ``async``)."""

    @classmethod
    def chat_completion_params_to_completion_params(cls, request: ChatCompletionRequest,
                                                    prompt: str) -> CompletionRequest:
        """The completion request asking what ``request`` asks, for ``prompt``."""
        max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
        return CompletionRequest(
            prompt=prompt, model=request.model, frequency_penalty=request.frequency_penalty,
            logit_bias=request.logit_bias, max_tokens=max_tokens, n=request.n,
            presence_penalty=request.presence_penalty,
            seed=request.seed, stop=request.stop, stream=request.stream, stream_options=request.stream_options,
            temperature=request.temperature, top_p=request.top_p, user=request.user,
            logprobs=request.top_logprobs if request.logprobs else None, request_id=request.request_id)

    @classmethod
    def to_choice_logprobs(cls, logprobs: CompletionLogProbs) -> ChatCompletionLogProbs:
        """Completion log probabilities (parallel lists) as chat ones (one entry per token)."""
        content = []
        for i, token in enumerate(logprobs.tokens):
            top = logprobs.top_logprobs[i] if i < len(logprobs.top_logprobs) else None
            content.append(ChatCompletionLogProbsContent(
                token=token, bytes=_token_bytes(token), logprob=logprobs.token_logprobs[i],
                top_logprobs=[ChatCompletionLogProb(token=t, bytes=_token_bytes(t), logprob=p)
                              for t, p in (top or {}).items()]))
        return ChatCompletionLogProbs(content=content)

    @classmethod
    def _choice_logprobs(cls, choice: Union[CompletionChoice, CompletionChunkChoice]
                         ) -> Optional[ChatCompletionLogProbs]:
        return cls.to_choice_logprobs(choice.logprobs) if choice.logprobs is not None else None

    @classmethod
    def to_chat_completion_choice(cls, completion_choice: CompletionChoice, role: str) -> ChatCompletionChoice:
        """A completion's choice as a chat answer's."""
        return ChatCompletionChoice(index=0, finish_reason=completion_choice.finish_reason,
                                    logprobs=cls._choice_logprobs(completion_choice),
                                    message=ChatMessage(content=completion_choice.text, role=role))

    @classmethod
    def to_chat_completion_chunk_choice(cls, completion_choice: CompletionChunkChoice, role: str) -> ChunkChoice:
        """A streamed completion choice as a chat chunk's."""
        return ChunkChoice(index=0, finish_reason=completion_choice.finish_reason,
                           logprobs=cls._choice_logprobs(completion_choice),
                           delta=ChoiceDelta(content=completion_choice.text, role=role))

    @classmethod
    def completion_to_chat_completion(cls, completion: Completion, role: str) -> ChatCompletion:
        """A completion as a chat answer (its first choice)."""
        choices = [cls.to_chat_completion_choice(completion.choices[0], role)] if completion.choices else []
        return ChatCompletion(id=completion.id, choices=choices, created=completion.created, model=completion.model,
                              object="chat.completion", system_fingerprint=completion.system_fingerprint,
                              usage=completion.usage)

    @classmethod
    def completion_to_chat_completion_chunk(cls, completion: CompletionChunk, role: str) -> ChatCompletionChunk:
        """A streamed completion chunk as a chat chunk (its first choice; its usage kept)."""
        choices = [cls.to_chat_completion_chunk_choice(completion.choices[0], role)] if completion.choices else []
        return ChatCompletionChunk(id=completion.id, choices=choices, created=completion.created,
                                   model=completion.model, object="chat.completion.chunk",
                                   system_fingerprint=getattr(completion, "system_fingerprint", None),
                                   usage=completion.usage)

    async def create_chat_completion(self, request: ChatCompletionRequest, raw_request: Optional[RawRequest] = None,
                                     context: Optional[Dict[str, Any]] = None
                                     ) -> Union[AsyncIterator[str], ChatCompletion, ErrorResponse]:
        """Answer a chat through ``apply_chat_template`` and ``create_completion``; ``n`` must be 1."""
        if request.n != 1:
            raise InvalidInput("n != 1 is not supported")
        chat_prompt = self.apply_chat_template(request)
        if inspect.isawaitable(chat_prompt):
            chat_prompt = await chat_prompt
        params = self.chat_completion_params_to_completion_params(request, chat_prompt.prompt)
        if _takes_context(type(self).create_completion):
            result = await self.create_completion(params, raw_request, context)
        else:  # written for KServe's adapter, which passes (request, raw_request) only
            result = await self.create_completion(params, raw_request)
        if isinstance(result, ErrorResponse):
            return result
        if not request.stream:
            completion = Completion.model_validate(result) if isinstance(result, dict) else result
            return self.completion_to_chat_completion(completion, chat_prompt.response_role)
        return self._chat_chunks(result, chat_prompt.response_role)

    async def _chat_chunks(self, completions: AsyncIterator[Any], role: str) -> AsyncIterator[str]:
        """The completion stream re-emitted as chat chunks, KServe's ``"data: ..."`` strings, ``[DONE]`` last;
        closing this stream closes the completion stream."""
        try:
            async for item in completions:
                chunk = _as_chunk(item)
                if chunk is not None:
                    yield f"data: {self.completion_to_chat_completion_chunk(chunk, role).model_dump_json()}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            close = getattr(completions, "aclose", None)
            if close is not None:
                await close()
