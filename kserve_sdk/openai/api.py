"""The OpenAI API over REST (KServe's routes, under ``KSERVE_OPENAI_ROUTE_PREFIX``, default ``/openai``):
``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/rerank``; ``GET /v1/models``
and ``/v1/models/<id>``. The body's ``model`` names the served model. The routes answer whenever an OpenAI
model is served, one loaded later through the repository API included; otherwise they are no route (404).

Errors are in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``; a stream is Server-Sent
Events ending with ``data: [DONE]``.
"""
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from tornado.web import HTTPError

from ..dataplane import encode_model_answer
from ..errors import ModelNotFound
from ..handlers.api import Options, RestAPI
from ..handlers.base import cancel_on_disconnect
from ..handlers.streaming import StreamingHandler, sse_event
from ..protocol.rest.openai import error_body  # no pydantic: a plain server's 404s are written with it
from .dataplane import OpenAIAPI, not_an_openai_model, openai_call, openai_models, resolve_model_name, serves_openai

_STARTED = int(time.time())


def route_prefix() -> str:
    """``KSERVE_OPENAI_ROUTE_PREFIX`` (default ``/openai``), with a leading slash."""
    prefix = os.environ.get("KSERVE_OPENAI_ROUTE_PREFIX", "/openai").rstrip("/")
    return prefix if not prefix or prefix.startswith("/") else f"/{prefix}"


def error_document(status: int, message: str) -> bytes:
    """An error answer's body in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``."""
    return error_body.error_body(status, message)


class _OpenAIHandler(StreamingHandler):
    """What the OpenAI routes share: no route unless an OpenAI model is served, errors in OpenAI's shape."""

    protocol = "openai"

    def prepare(self) -> None:
        super().prepare()
        if not serves_openai(self.dataplane.model_registry):
            raise HTTPError(404, f"no route for {self.request.method} {self.request.path}")

    def error_document(self, status: int, message: str) -> bytes:
        return error_document(status, message)

    def failure_answer(self, exc: BaseException, failure: Any) -> Tuple[int, bytes]:
        return error_body.error_answer(exc, failure.status, failure.message)


class _InferenceHandler(_OpenAIHandler):
    """``POST`` of one OpenAI endpoint: the request validated, the model's method, the answer or stream."""

    @cancel_on_disconnect
    async def post(self) -> None:
        api = OpenAIAPI.load()
        request = api.codec.decode_request(self.endpoint, self.request.body)
        call = self.open_call()
        name = call.model_name = resolve_model_name(self.dataplane.model_registry, request.model)
        if request.model is None:
            request.model = name
        raw_request, context = self._exchange()
        answer = await openai_call(self.dataplane, self.endpoint, name, request, raw_request, context, call)
        if isinstance(answer, api.types.ErrorResponse):
            raise api.errors.OpenAIError(answer)  # answered by write_error, with its code as the status
        if hasattr(answer, "__aiter__"):  # a stream (sent as one even if the client did not ask for it)
            return await self._send_chunks(answer, context)
        body = encode_model_answer(name, api.codec.encode_answer, answer)
        if getattr(request, "stream", False):  # one answer to a stream request: its only event
            return await self._send_chunks(_one(b"data: " + body + b"\n\n"), context)
        self.set_status(context["response"].status_code)
        self.send_body(body, headers=context["response"].headers)

    async def _send_chunks(self, chunks: Any, context: Dict[str, Any]) -> None:
        codec = OpenAIAPI.codec
        await self.send_stream(chunks, codec.encode_event, sse_event, "text/event-stream",
                               context["response"].headers, trailer=codec.DONE_EVENT)

    def _exchange(self) -> Tuple[Any, Dict[str, Any]]:
        """The ``raw_request`` and ``context`` the model's method is handed."""
        kinds = OpenAIAPI.raw_request
        request, call = self.request, self.call
        host, port = _peer(request)
        raw = kinds.RawRequest(method=request.method, scheme=request.protocol, host=request.host,
                               path=request.path, query=request.query, headers=call.headers, body=request.body,
                               client=kinds.Address(host, port) if host else None,
                               server=lambda: _server(request), gone=lambda: call.gone,
                               http_version=request.version.rpartition("/")[2],
                               header_pairs=request.headers.get_all)
        return raw, {"headers": call.headers, "response": kinds.Response()}


def _peer(request: Any) -> Tuple[Optional[str], int]:
    address = getattr(request.connection, "context", None)
    address = getattr(address, "address", None)
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return request.remote_ip, 0


def _server(request: Any) -> Optional[Tuple[str, int]]:
    """The server's end of the connection (the ASGI scope's ``server``), or None (a Unix socket)."""
    stream = getattr(request.connection, "stream", None)
    try:
        local = stream.socket.getsockname()
    except (AttributeError, OSError):
        return None
    return (str(local[0]), int(local[1])) if isinstance(local, tuple) and len(local) >= 2 else None


async def _one(answer: Any):
    yield answer


class CompletionsHandler(_InferenceHandler):
    """``POST {prefix}/v1/completions``."""

    endpoint = "completions"


class ChatCompletionsHandler(_InferenceHandler):
    """``POST {prefix}/v1/chat/completions``."""

    endpoint = "chat_completions"


class EmbeddingsHandler(_InferenceHandler):
    """``POST {prefix}/v1/embeddings``."""

    endpoint = "embeddings"


class RerankHandler(_InferenceHandler):
    """``POST {prefix}/v1/rerank``."""

    endpoint = "rerank"


class ModelsHandler(_OpenAIHandler):
    """``GET {prefix}/v1/models`` (the OpenAI models served) and ``GET {prefix}/v1/models/<id>`` (one)."""

    endpoint = "models"

    async def get(self, name: Optional[str] = None) -> None:
        api = OpenAIAPI.load()
        encode_answer, Model, ModelList = api.codec.encode_answer, api.types.Model, api.types.ModelList
        served = openai_models(self.dataplane.model_registry)
        if name is None:
            cards = [Model(id=model_id, created=_STARTED, owned_by="kserve") for model_id in served]
            return self.send_body(encode_answer(ModelList(data=cards)))
        if name not in served:
            raise ModelNotFound(name) if self.dataplane.model_registry.get_model(name) is None \
                else not_an_openai_model(name)
        await self.dataplane.ready_model(name)
        self.send_body(encode_answer(Model(id=name, created=_STARTED, owned_by="kserve")))


class UnknownPathHandler(_OpenAIHandler):
    """Any other path under the prefix: 404 in OpenAI's error shape, whatever the method."""

    def prepare(self) -> None:
        super().prepare()
        raise HTTPError(404, f"no route for {self.request.method} {self.request.path}")


#: path after the prefix -> handler, of the inference routes
_INFERENCE_ROUTES = {"/v1/completions": CompletionsHandler, "/v1/chat/completions": ChatCompletionsHandler,
                     "/v1/embeddings": EmbeddingsHandler, "/v1/rerank": RerankHandler}


def routes(options: Options) -> List[Tuple[str, type]]:
    """The route-table entries of the OpenAI API under ``KSERVE_OPENAI_ROUTE_PREFIX`` (always in the table;
    they answer only while an OpenAI model is served), the last one taking every other path under the prefix
    (none with an empty prefix, where the other paths are KServe's, whose API comes first in the list)."""
    p = route_prefix()
    table = [(rf"{p}{path}", handler) for path, handler in _INFERENCE_ROUTES.items()]
    table += [(rf"{p}/v1/models", ModelsHandler), (rf"{p}/v1/models/([^/]+?)", ModelsHandler)]
    return table + [(rf"{re.escape(p)}(?:/.*)?", UnknownPathHandler)] if p else table


#: The OpenAI API: its routes, its error shape (a 413 on its paths is in it too), and its unknown paths
#: (``other``) never traced.
API = RestAPI("openai", routes, error_document, untraced=("other",))
