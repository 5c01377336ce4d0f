"""KServe v1 REST: ``/v1/models``, ``/v1/models/<m>``, ``:predict`` and ``:explain``."""
from typing import Any, Tuple

from ..errors import InvalidInput, ModelNotReady
from ..protocol.infer_type import InferResponse
from ..protocol.rest_codec import dumps, encode_infer_response, loads_json
from .base import JSON, BaseHandler, cancel_on_disconnect, encoded
from .streaming import V1StreamingPredict
from .cloudevents import decode_cloudevent


def encode_v1_response(response: Any) -> Tuple[bytes, str]:
    """The body and content type for whatever a v1 model returned."""
    if isinstance(response, (bytes, bytearray, memoryview)):
        return bytes(response), "application/octet-stream"
    if isinstance(response, str):
        return response.encode("utf-8"), "text/plain; charset=utf-8"
    if isinstance(response, InferResponse):
        body, json_length = encode_infer_response(response)
        return body, JSON
    return dumps(response), JSON


class ListModelsHandler(BaseHandler):
    """``GET /v1/models``: the names of the served models."""

    protocol, endpoint = "rest_v1", "models"

    def get(self) -> None:
        self.send_json({"models": self.dataplane.list_models()})


class ModelReadyHandler(BaseHandler):
    """``GET /v1/models/<m>``: ``{"name", "ready": true}``, 503 when not ready, 404 when unknown."""

    protocol, endpoint = "rest_v1", "model_ready"

    async def get(self, name: str) -> None:
        if not await self.dataplane.model_ready(name):
            raise ModelNotReady(name)
        self.send_json({"name": name, "ready": True})


class PredictHandler(V1StreamingPredict):
    """``POST /v1/models/<m>:predict`` (and ``:explain`` through ``verb``); a model whose predict yields
    answers with a chunked stream."""

    protocol, endpoint = "rest_v1", "predict"

    verb = "predict"

    @cancel_on_disconnect
    async def post(self, name: str) -> None:
        model = await self.dataplane.ready_model(name)
        body = self.request.body
        if not body:
            raise InvalidInput("the request body is empty")
        event = decode_cloudevent(body, self.request.headers)
        request = loads_json(body) if event is None else event[0]
        if self.verb == "predict" and event is None and getattr(model, "streams_responses", bool)():
            return await self.stream_v1(name, request)
        call = self.dataplane.infer if self.verb == "predict" else self.dataplane.explain
        response, response_headers = await call(name, request, self.request_headers())
        if event is not None:
            return self.send_cloudevent(response, event, name, response_headers)
        payload, content_type = encoded(name, encode_v1_response, response)
        self.send_body(payload, content_type, response_headers)


class ExplainHandler(PredictHandler):
    """``POST /v1/models/<m>:explain``."""

    verb = endpoint = "explain"
