"""``OpenAIProxyModel``: serve completions and chat completions by sending them on to another OpenAI server.

KServe 0.21's class of the same name, with its constructor and its six hooks: a subclass changes the
request on its way out (``preprocess_*_request``) and the answer on its way back (``postprocess_*``,
``postprocess_*_chunk``), in place. Beyond KServe's:

- streams work: the upstream's Server-Sent Events come back as chunk objects (the hooks see each one)
  that the server frames again, or, with ``skip_upstream_validation=True`` and no chunk hook, as the
  upstream's own event lines, passed through untouched;
- an upstream 4xx goes back to the client with the upstream's status and OpenAI error body; an
  upstream that cannot be reached is a 503, one that sends nothing for ``timeout`` seconds a 504, and
  an answer that is not OpenAI's a 502, each in OpenAI's error shape;
- the upstream's health is asked at most once a second, not once per request.

``http_client`` is an ``aiohttp.ClientSession`` (KServe's is an ``httpx.AsyncClient``).
"""
import inspect
import time
from http import HTTPStatus
from typing import Any, AsyncIterator, Dict, Optional, Type, Union

import orjson
from pydantic import BaseModel, ValidationError

from ..clients.upstream import UpstreamClient
from ..errors import UpstreamError
from ..protocol.rest.json_body import describe_validation_error
from ..protocol.rest.openai.errors import OpenAIError, create_error_response
from ..protocol.rest.openai.types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionChunk,
    CompletionRequest,
    ErrorResponse,
)
from .model import OpenAIGenerativeModel

COMPLETIONS_ENDPOINT = "/v1/completions"
CHAT_COMPLETIONS_ENDPOINT = "/v1/chat/completions"
#: seconds a health answer of the upstream is trusted
HEALTH_TTL = 1.0
#: request headers sent on to the upstream, so one id follows the request through both servers
FORWARDED_HEADERS = ("x-request-id",)
_UPSTREAM_ERRORS = {503: "ServiceUnavailableError", 504: "GatewayTimeout"}


class OpenAIProxyModel(OpenAIGenerativeModel):
    """A generative model whose answers come from another server speaking OpenAI's API.

    Args:
        name: the model name clients send in ``model``.
        predictor_url: the upstream's address with scheme, host and port, e.g. ``http://my-backend:9000``
            (``/v1/completions`` and ``/v1/chat/completions`` are added to it; a KServe or kserve_sdk
            upstream: ``http://host:port/openai``).
        http_client: an ``aiohttp.ClientSession`` to send through; by default the model's own pooled one.
        skip_upstream_validation: trust the upstream's answers instead of validating them (faster);
            its streams are then passed through as they come when no chunk hook is overridden.
        health_endpoint: the path, added to ``predictor_url``, whose 200 means the upstream is healthy
            (``/health`` for vLLM and TGI, ``/v1/models/<name>`` for KServe); None: always healthy.
        timeout: seconds the upstream may stay silent (before its answer, or between two chunks).
        connect_timeout: seconds to open a connection to the upstream.
    """

    def __init__(self, name: str, predictor_url: str, http_client: Any = None, skip_upstream_validation: bool = False,
                 health_endpoint: Optional[str] = "/health", timeout: float = 30.0, connect_timeout: float = 5.0):
        super().__init__(name)
        self.predictor_url = predictor_url
        self.skip_upstream_validation = skip_upstream_validation
        base = predictor_url.rstrip("/")
        self._completions_endpoint = base + COMPLETIONS_ENDPOINT
        self._chat_completions_endpoint = base + CHAT_COMPLETIONS_ENDPOINT
        self._health_endpoint = base + health_endpoint if health_endpoint else None
        self._http_client = UpstreamClient(http_client, connect_timeout=connect_timeout, read_timeout=timeout)
        self._health = (0.0, False)  # (when asked, the answer)
        self.ready = True

    # --- the hooks (KServe's): each changes its object in place ------------------------------------
    def preprocess_completion_request(self, request: CompletionRequest, raw_request: Any = None) -> None:
        """Change a completion request before it is sent upstream."""

    def postprocess_completion(self, completion: Completion, request: CompletionRequest,
                               raw_request: Any = None) -> None:
        """Change a whole completion (``stream`` false) before it goes to the client."""

    def postprocess_completion_chunk(self, completion: CompletionChunk, request: CompletionRequest,
                                     raw_request: Any = None) -> None:
        """Change one streamed completion chunk before it goes to the client."""

    def preprocess_chat_completion_request(self, request: ChatCompletionRequest, raw_request: Any = None) -> None:
        """Change a chat completion request before it is sent upstream."""

    def postprocess_chat_completion(self, chat_completion: ChatCompletion, request: ChatCompletionRequest,
                                    raw_request: Any = None) -> None:
        """Change a whole chat completion (``stream`` false) before it goes to the client."""

    def postprocess_chat_completion_chunk(self, chat_completion_chunk: ChatCompletionChunk,
                                          request: ChatCompletionRequest, raw_request: Any = None) -> None:
        """Change one streamed chat completion chunk before it goes to the client."""

    # --- the two endpoints ---------------------------------------------------------------------------
    async def create_completion(self, request: CompletionRequest, raw_request: Any = None,
                                context: Optional[Dict[str, Any]] = None
                                ) -> Union[Completion, AsyncIterator[Any]]:
        """Send the completion request upstream; the upstream's completion, or its stream."""
        await _call_hook(self.preprocess_completion_request, request, raw_request)
        if request.stream:
            return await self._stream(self._completions_endpoint, request, raw_request, context, CompletionChunk,
                                      "postprocess_completion_chunk")
        completion = await self.generate_completion(request, raw_request, context)
        await _call_hook(self.postprocess_completion, completion, request, raw_request)
        return self._outgoing(completion)

    async def create_chat_completion(self, request: ChatCompletionRequest, raw_request: Any = None,
                                     context: Optional[Dict[str, Any]] = None
                                     ) -> Union[ChatCompletion, AsyncIterator[Any]]:
        """Send the chat completion request upstream; the upstream's chat completion, or its stream."""
        await _call_hook(self.preprocess_chat_completion_request, request, raw_request)
        if request.stream:
            return await self._stream(self._chat_completions_endpoint, request, raw_request, context,
                                      ChatCompletionChunk, "postprocess_chat_completion_chunk")
        chat_completion = await self.generate_chat_completion(request, raw_request, context)
        await _call_hook(self.postprocess_chat_completion, chat_completion, request, raw_request)
        return self._outgoing(chat_completion)

    async def generate_completion(self, request: CompletionRequest, raw_request: Any = None,
                                  context: Optional[Dict[str, Any]] = None) -> Completion:
        """The upstream's answer to a completion request (``stream`` false), hooks not applied."""
        body = await self._post(self._completions_endpoint, request, raw_request, context)
        return self._parse(Completion, body)

    async def generate_chat_completion(self, request: ChatCompletionRequest, raw_request: Any = None,
                                       context: Optional[Dict[str, Any]] = None) -> ChatCompletion:
        """The upstream's answer to a chat completion request (``stream`` false), hooks not applied."""
        body = await self._post(self._chat_completions_endpoint, request, raw_request, context)
        return self._parse(ChatCompletion, body)

    async def healthy(self) -> bool:
        """Whether the upstream's health endpoint answers 200 (asked at most once a second)."""
        if not self._health_endpoint:
            return self.ready
        asked, answer = self._health
        if time.monotonic() - asked < HEALTH_TTL:
            return answer
        try:
            answer = await self._http_client.get_status(self._health_endpoint) == 200
        except UpstreamError:
            answer = False
        self._health = (time.monotonic(), answer)
        return answer

    # --- sending and reading -------------------------------------------------------------------------
    def _headers(self, raw_request: Any, context: Optional[Dict[str, Any]]) -> Dict[str, str]:
        headers = dict(_upstream_headers(raw_request))
        incoming = (context or {}).get("headers") or {}
        for key in FORWARDED_HEADERS:
            value = incoming.get(key)
            if value and key not in headers:
                headers[key] = value
        headers["Content-Type"] = "application/json"
        return headers

    async def _post(self, url: str, request: BaseModel, raw_request: Any, context: Optional[Dict[str, Any]]) -> bytes:
        try:
            status, answer = await self._http_client.post(url, _body(request), self._headers(raw_request, context))
        except UpstreamError as e:
            raise _transport_error(e) from None
        if status >= 400:
            raise upstream_error(status, answer)
        return answer

    async def _stream(self, url: str, request: BaseModel, raw_request: Any, context: Optional[Dict[str, Any]],
                      chunk_type: Type[BaseModel], hook_name: str) -> AsyncIterator[Any]:
        """Open the upstream stream (its failures are raised here, before the answer starts) and return
        its chunks: parsed objects through the hook ``hook_name``, or, when there is nothing to check or
        change, the upstream's event lines as they are."""
        headers = {**self._headers(raw_request, context), "Accept": "text/event-stream"}
        try:
            status, answer, lines = await self._http_client.post_stream(url, _body(request), headers)
        except UpstreamError as e:
            raise _transport_error(e) from None
        if lines is None:
            raise upstream_error(status, answer)
        if self.skip_upstream_validation and not _overridden(self, hook_name):
            return _passed_through(lines)
        return self._chunks(lines, chunk_type, getattr(self, hook_name), request, raw_request)

    async def _chunks(self, lines: AsyncIterator[bytes], chunk_type: Type[BaseModel], hook: Any,
                      request: BaseModel, raw_request: Any) -> AsyncIterator[Any]:
        try:
            async for data in _event_data(lines):
                chunk = self._parse(chunk_type, data)
                await _call_hook(hook, chunk, request, raw_request)
                yield self._outgoing(chunk)
        finally:
            await lines.aclose()

    def _parse(self, kind: Type[BaseModel], body: bytes) -> Any:
        """The upstream's JSON as ``kind``: validated, or built as is with ``skip_upstream_validation``.
        An error the upstream sent instead (mid-stream, its last event) is raised with its own code."""
        try:
            doc = orjson.loads(body)
            if isinstance(doc, dict) and "error" in doc:
                raise upstream_error(None, body)
            if self.skip_upstream_validation:
                return kind.model_construct(**doc)
            return kind.model_validate(doc)
        except (ValidationError, orjson.JSONDecodeError, TypeError) as e:
            why = describe_validation_error(e) if isinstance(e, ValidationError) else str(e) or type(e).__name__
            raise OpenAIError(create_error_response(f"the upstream's answer is not a {kind.__name__}: {why}",
                                                    err_type="BadGateway",
                                                    status_code=HTTPStatus.BAD_GATEWAY)) from None

    def _outgoing(self, answer: BaseModel) -> Any:
        """What goes to the client: the object, or with ``skip_upstream_validation`` (whose objects are
        built unvalidated, their nested parts left as the upstream's dicts) its fields as plain data."""
        if self.skip_upstream_validation:
            return answer.model_dump(mode="json", exclude_none=True, warnings=False)
        return answer


def upstream_error(status: Optional[int], body: bytes) -> OpenAIError:
    """An upstream's error answer (``status`` None: an error event of its stream) as the OpenAIError
    that sends it on: its own OpenAI error body when it has one, with the upstream's status as the
    code, else a 502 quoting what it said."""
    try:
        response = ErrorResponse.model_validate_json(body)
    except ValidationError:
        text = body.decode("utf-8", errors="replace").strip()[:500]
        said = f"answered {int(status)}" if status else "ended its stream"
        return OpenAIError(create_error_response(
            f"the upstream {said} without an OpenAI error: {text}", err_type="BadGateway",
            status_code=HTTPStatus.BAD_GATEWAY))
    if status and response.error.code != str(int(status)):
        response.error.code = str(int(status))  # the status the client gets is the upstream's
    return OpenAIError(response)


def _body(request: BaseModel) -> bytes:
    """The request as sent upstream: the fields the client set (KServe's choice)."""
    return request.model_dump_json(exclude_unset=True, exclude_none=True).encode()


def _transport_error(exc: UpstreamError) -> OpenAIError:
    status = HTTPStatus(exc.http_status)
    return OpenAIError(create_error_response(str(exc), err_type=_UPSTREAM_ERRORS.get(status, "BadGateway"),
                                             status_code=status))


async def _event_data(lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of a Server-Sent Event stream, up to ``[DONE]``."""
    async for line in lines:
        if not line.startswith(b"data:"):
            continue  # blank separators, comments, event names
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield data


async def _passed_through(lines: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The upstream's events re-framed one by one, unparsed, ending with ``[DONE]``."""
    try:
        async for data in _event_data(lines):
            yield "data: " + data.decode() + "\n\n"
        yield "data: [DONE]\n\n"
    finally:
        await lines.aclose()


def _upstream_headers(raw_request: Any) -> Dict[str, str]:
    """Headers a middleware or hook put under ``raw_request["upstream_headers"]`` (KServe's convention)."""
    try:
        return dict(raw_request["upstream_headers"]) if raw_request is not None else {}
    except (KeyError, TypeError):
        return {}


def _overridden(model: Any, name: str) -> bool:
    return getattr(type(model), name) is not getattr(OpenAIProxyModel, name)


async def _call_hook(hook: Any, *args: Any) -> None:
    result = hook(*args)
    if inspect.isawaitable(result):
        await result

