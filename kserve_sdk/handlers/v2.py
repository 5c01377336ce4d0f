"""Open Inference Protocol v2 REST: health, metadata, readiness, infer (with the binary extension)."""
from typing import Optional

from ..errors import ModelNotReady, ServerNotReady
from ..protocol.infer_type import InferResponse
from ..protocol.rest_codec import decode_infer_request, dumps, encode_infer_response, parse_json_length
from .base import JSON, BaseHandler

BINARY_HEADER = "Inference-Header-Content-Length"


class ServerMetadataHandler(BaseHandler):
    """``GET /v2``: server name, version and extensions."""

    def get(self) -> None:
        self.send_json(self.dataplane.metadata())


class ServerLiveHandler(BaseHandler):
    """``GET /v2/health/live``."""

    async def get(self) -> None:
        await self.dataplane.live()
        self.send_json({"live": True})


class ServerReadyHandler(BaseHandler):
    """``GET /v2/health/ready``: 200 only when every registered model is ready."""

    async def get(self) -> None:
        if not await self.dataplane.ready():
            raise ServerNotReady()
        self.send_json({"ready": True})


class ListModelsHandler(BaseHandler):
    """``GET /v2/models``: the names of the served models."""

    def get(self) -> None:
        self.send_json({"models": self.dataplane.list_models()})


class ModelMetadataHandler(BaseHandler):
    """``GET /v2/models/<m>[/versions/<v>]``."""

    async def get(self, name: str, version: Optional[str] = None) -> None:
        self.send_json(await self.dataplane.model_metadata(name, version))


class ModelReadyHandler(BaseHandler):
    """``GET /v2/models/<m>[/versions/<v>]/ready``."""

    async def get(self, name: str, version: Optional[str] = None) -> None:
        if not await self.dataplane.model_ready(name):
            raise ModelNotReady(name)
        self.send_json({"name": name, "ready": True})


class InferHandler(BaseHandler):
    """``POST /v2/models/<m>[/versions/<v>]/infer``: JSON or binary tensors in, the same out."""

    async def post(self, name: str, version: Optional[str] = None) -> None:
        await self.dataplane.ready_model(name)
        body = self.request.body
        json_length = parse_json_length(self.request.headers.get(BINARY_HEADER), len(body))
        request = decode_infer_request(body, json_length, name)
        request.model_version = version
        response, response_headers = await self.dataplane.infer(name, request, self.request_headers())
        if isinstance(response, InferResponse):
            payload, out_length = encode_infer_response(response)
        elif isinstance(response, (bytes, bytearray)):
            payload, out_length = bytes(response), None
        else:
            payload, out_length = dumps(response), None
        if out_length is not None:
            self.set_header(BINARY_HEADER, str(out_length))
            self.send_body(payload, "application/octet-stream", response_headers)
        else:
            self.send_body(payload, JSON, response_headers)


class RepositoryHandler(BaseHandler):
    """``POST /v2/repository/models/<m>/load`` and ``.../unload``."""

    async def post(self, name: str, action: str) -> None:
        if action == "load":
            await self.dataplane.load(name)
        else:
            await self.dataplane.unload(name)
        self.send_json({"name": name, action: True})
