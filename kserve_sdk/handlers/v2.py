"""Open Inference Protocol v2 REST: health, metadata, readiness, infer (with the binary extension), and the
model repository. (Triton's other extensions are kserve_sdk/triton/api.py; the streams, streaming.py.)"""
from functools import partial
from typing import Any, Dict, Optional

from ..errors import InvalidInput, ModelNotReady, ServerNotReady
from ..protocol.rest.json_body import json_object
from ..protocol.rest_codec import loads_json
from .api import MODEL, VERSION, RestAPI
from .base import BaseHandler, cancel_on_disconnect
from .inference import infer_v2


class ServerMetadataHandler(BaseHandler):
    """``GET /v2``: server name, version and extensions."""

    endpoint = "server_metadata"

    def get(self) -> None:
        self.send_json(self.dataplane.metadata())


class ServerLiveHandler(BaseHandler):
    """``GET /v2/health/live``."""

    endpoint = "live"

    async def get(self) -> None:
        await self.dataplane.live()
        self.send_json({"live": True})


class ServerReadyHandler(BaseHandler):
    """``GET /v2/health/ready``: 200 only when every registered model is ready."""

    endpoint = "ready"

    async def get(self) -> None:
        if not await self.dataplane.ready():
            raise ServerNotReady()
        self.send_json({"ready": True})


class ListModelsHandler(BaseHandler):
    """``GET /v2/models``: the names of the served models."""

    endpoint = "models"

    def get(self) -> None:
        self.send_json({"models": self.dataplane.list_models()})


class ModelMetadataHandler(BaseHandler):
    """``GET /v2/models/<m>[/versions/<v>]``."""

    endpoint = "model_metadata"

    async def get(self, name: str, version: Optional[str] = None) -> None:
        self.send_json(await self.dataplane.model_metadata(name, version))


class ModelReadyHandler(BaseHandler):
    """``GET /v2/models/<m>[/versions/<v>]/ready``: 200 when ready; 503 while it is not ready yet (warming up,
    being unloaded, a lazy repository model not loaded yet: asking does not load it), 404 for a model the
    repository does not serve (unloaded, never known) or a version it does not serve."""

    endpoint = "model_ready"

    async def get(self, name: str, version: Optional[str] = None) -> None:
        model = await self.dataplane.ready_model(name, version, load=False)
        if not await self.dataplane.predictor_ready(model, name):  # --enable_predictor_health_check
            raise ModelNotReady(name)
        self.send_json({"name": name, "ready": True})


class InferHandler(BaseHandler):
    """``POST /v2/models/<m>[/versions/<v>]/infer``: JSON or binary tensors in, the same out."""

    endpoint = "infer"

    @staticmethod
    def fast_answer(dataplane, name: str, version: Optional[str] = None):
        """What fast_path.py calls as ``(call, body, headers)`` to answer this route without the handler."""
        return partial(infer_v2, dataplane, name, version)

    @cancel_on_disconnect
    async def post(self, name: str, version: Optional[str] = None) -> None:
        self.send_reply(await infer_v2(self.dataplane, name, version, self.call, self.request.body,
                                       self.request.headers))


def load_parameters(body: bytes) -> Optional[Dict[str, Any]]:
    """The ``parameters`` object of a repository load request's body (``{"parameters": {"config": "..."}}``);
    None for an empty body or one without it."""
    if not body.strip():
        return None
    parameters = json_object(body, "a repository load request's body").get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidInput("the 'parameters' of a repository load request must be a JSON object")
    return parameters


class RepositoryHandler(BaseHandler):
    """``POST /v2/repository/models/<m>/load`` (its body's ``parameters``: Triton's ``config`` override) and
    ``.../unload``."""

    endpoint = "repository"

    async def post(self, name: str, action: str) -> None:
        if action == "load":
            await self.dataplane.load(name, load_parameters(self.request.body))
        else:
            await self.dataplane.unload(name)
        self.send_json({"name": name, action: True})


class RepositoryIndexHandler(BaseHandler):
    """``GET|POST /v2/repository/index``: every model with its state (READY, UNAVAILABLE, LOADING, UNLOADING) and
    reason; a model repository's model once per version (``version``), a version never loaded without a state."""

    endpoint = "repository_index"

    async def get(self) -> None:
        self.send_json(await self.dataplane.repository_index())

    async def post(self) -> None:
        ready_only = False
        if self.request.body:
            doc = loads_json(self.request.body)
            ready_only = bool(doc.get("ready")) if isinstance(doc, dict) else False
        entries = await self.dataplane.repository_index()
        self.send_json([e for e in entries if e.get("state") == "READY"] if ready_only else entries)


#: Open Inference Protocol v2. Model metadata comes last of the ``/v2/models/<m>`` routes: the others end
#: with a word its pattern would not take; it would take ``/v2/models/stats``, which is why Triton's API
#: comes before this one in the server's list.
API = RestAPI("v2", [
    (r"/v2", ServerMetadataHandler),
    (r"/v2/health/live", ServerLiveHandler),
    (r"/v2/health/ready", ServerReadyHandler),
    (r"/v2/models", ListModelsHandler),
    (rf"/v2/models/{MODEL}{VERSION}/infer", InferHandler),
    (rf"/v2/models/{MODEL}{VERSION}/ready", ModelReadyHandler),
    (rf"/v2/models/{MODEL}{VERSION}", ModelMetadataHandler),
    (r"/v2/repository/index", RepositoryIndexHandler),
    (rf"/v2/repository/models/{MODEL}/(load|unload)", RepositoryHandler),
], untraced=("live", "ready", "model_ready"))
