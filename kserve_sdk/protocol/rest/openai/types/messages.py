"""The messages of a chat request, as the OpenAI API and vllm's ``chat_utils`` define them: plain dicts
(TypedDicts), so a model reads ``message["role"]`` and ``message["content"]``."""
from typing import Any, Dict, Iterable, List, Literal, Optional, Union

from typing_extensions import Required, TypedDict


class ChatCompletionContentPartTextParam(TypedDict, total=False):
    """A text part of a message's content."""

    type: Required[Literal["text"]]
    text: Required[str]


#: One part of a message's content: text, or another kind (an image URL, audio...) as a dict.
ChatCompletionContentPartParam = Union[ChatCompletionContentPartTextParam, Dict[str, Any]]


class ChatCompletionToolMessageParam(TypedDict, total=False):
    """A tool's answer, sent back to the model."""

    role: Required[Literal["tool"]]
    content: Required[Union[str, List[ChatCompletionContentPartTextParam]]]
    tool_call_id: Required[str]


class ChatCompletionAssistantMessageParam(TypedDict, total=False):
    """An earlier answer of the model, in the conversation."""

    role: Required[Literal["assistant"]]
    content: Optional[Union[str, List[ChatCompletionContentPartParam]]]
    name: str
    refusal: Optional[str]
    tool_calls: Iterable[Dict[str, Any]]


class CustomChatCompletionMessageParam(TypedDict, total=False):
    """A message of any role (``system``, ``developer``, ``user``, ``assistant``, ``tool``...)."""

    role: Required[str]
    content: Union[str, List[ChatCompletionContentPartParam]]
    name: str
    tool_call_id: Optional[str]
    tool_calls: Optional[Iterable[Dict[str, Any]]]
    reasoning_content: Optional[str]


#: One message of a chat request. Every role has the shape of CustomChatCompletionMessageParam, so the
#: messages are validated by it (``role`` required, ``content`` text or a list of parts).
ChatCompletionMessageParam = CustomChatCompletionMessageParam


class ConversationMessage(TypedDict, total=False):
    """A message after a chat template's parsing: its role and text."""

    role: Required[str]
    content: Union[Optional[str], List[Dict[str, str]]]
    tool_call_id: Optional[str]
    name: Optional[str]
    tool_calls: Optional[Iterable[Dict[str, Any]]]
