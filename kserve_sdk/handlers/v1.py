"""KServe v1 REST: ``/v1/models``, ``/v1/models/<m>``, ``:predict`` and ``:explain``."""
from functools import partial

from ..errors import InvalidInput, ModelNotReady
from ..protocol.rest_codec import loads_json
from .api import MODEL, RestAPI
from .base import BaseHandler, cancel_on_disconnect
from .cloudevents import decode_cloudevent
from .inference import call_v1
from .streaming import V1StreamingPredict


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

    @classmethod
    def fast_answer(cls, dataplane, name: str):
        """What fast_path.py calls as ``(call, body, headers)``; None for a model whose predict streams,
        which this handler answers."""
        model = dataplane.model_registry.get_model(name)
        if cls.verb == "predict" and getattr(model, "streams_responses", bool)():
            return None
        return partial(call_v1, dataplane, cls.verb, name)

    @cancel_on_disconnect
    async def post(self, name: str) -> None:
        model = await self.dataplane.ready_model(name)
        body = self.request.body
        if not body:
            raise InvalidInput("the request body is empty")
        event = decode_cloudevent(body, self.request.headers)
        if self.verb == "predict" and event is None and getattr(model, "streams_responses", bool)():
            return await self.stream_v1(name, loads_json(body))
        self.send_reply(await call_v1(self.dataplane, self.verb, name, self.call, body, self.request.headers, event))


class ExplainHandler(PredictHandler):
    """``POST /v1/models/<m>:explain``."""

    verb = endpoint = "explain"


#: KServe v1 REST. ``:predict`` and ``:explain`` come before the model's readiness, whose pattern would
#: take ``<m>:predict`` as a model's name.
API = RestAPI("v1", [
    (r"/v1/models", ListModelsHandler),
    (rf"/v1/models/{MODEL}:predict", PredictHandler),
    (rf"/v1/models/{MODEL}:explain", ExplainHandler),
    (rf"/v1/models/{MODEL}", ModelReadyHandler),
], untraced=("model_ready",))
