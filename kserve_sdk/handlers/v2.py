"""Open Inference Protocol v2 REST: health, metadata, readiness, infer (with the binary extension)."""
from functools import partial
from typing import Optional

from ..errors import InvalidInput, ModelNotReady, ServerNotReady
from ..protocol.rest_codec import loads_json
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
    """``GET /v2/models/<m>[/versions/<v>]/ready``."""

    endpoint = "model_ready"

    async def get(self, name: str, version: Optional[str] = None) -> None:
        if not await self.dataplane.model_ready(name):
            raise ModelNotReady(name)
        self.send_json({"name": name, "ready": True})


class ModelConfigHandler(BaseHandler):
    """``GET /v2/models/<m>[/versions/<v>]/config``: Triton's model configuration."""

    endpoint = "model_config"

    async def get(self, name: str, version: Optional[str] = None) -> None:
        self.send_json(await self.dataplane.model_config(name, version))


class TraceSettingHandler(BaseHandler):
    """``GET|POST /v2[/models/<m>]/trace/setting``: Triton's trace settings (kserve_sdk/tracing/settings.py),
    global or a model's, read or changed with a JSON object."""

    endpoint = "trace_setting"

    def get(self, name: Optional[str] = None) -> None:
        self.send_json(self.dataplane.trace_settings(name or ""))

    async def post(self, name: Optional[str] = None) -> None:
        update = loads_json(self.request.body or b"{}")
        self.send_json(await self.dataplane.update_trace_settings(name or "", update))


class LoggingHandler(BaseHandler):
    """``GET|POST /v2/logging``: Triton's log settings, read or changed in every worker."""

    endpoint = "logging"

    def get(self) -> None:
        self.send_json(self.dataplane.log_settings())

    async def post(self) -> None:
        if not self.request.body.strip():
            raise InvalidInput('POST /v2/logging takes the settings to change as a JSON object, such as '
                               '{"log_verbose_level": 1}')
        self.send_json(await self.dataplane.update_log_settings(loads_json(self.request.body)))


class ModelStatisticsHandler(BaseHandler):
    """``GET /v2/models[/<m>[/versions/<v>]]/stats``: Triton's per-model statistics."""

    endpoint = "model_statistics"

    def get(self, name: Optional[str] = None, version: Optional[str] = None) -> None:
        self.send_json(self.dataplane.model_statistics(name or "", version or ""))


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


class RepositoryHandler(BaseHandler):
    """``POST /v2/repository/models/<m>/load`` and ``.../unload``."""

    endpoint = "repository"

    async def post(self, name: str, action: str) -> None:
        if action == "load":
            await self.dataplane.load(name)
        else:
            await self.dataplane.unload(name)
        self.send_json({"name": name, action: True})


class RepositoryIndexHandler(BaseHandler):
    """``GET|POST /v2/repository/index``: every model with its state (READY, UNAVAILABLE, LOADING)."""

    endpoint = "repository_index"

    async def get(self) -> None:
        self.send_json(await self.dataplane.repository_index())

    async def post(self) -> None:
        ready_only = False
        if self.request.body:
            doc = loads_json(self.request.body)
            ready_only = bool(doc.get("ready")) if isinstance(doc, dict) else False
        entries = await self.dataplane.repository_index()
        self.send_json([e for e in entries if e["state"] == "READY"] if ready_only else entries)


class SharedMemoryStatusHandler(BaseHandler):
    """``GET /v2/systemsharedmemory[/region/<r>]/status``: the registered regions."""

    endpoint = "shm_status"

    def get(self, region: str = "") -> None:
        self.send_json(self.dataplane.shared_memory_status(region or ""))


class SharedMemoryRegisterHandler(BaseHandler):
    """``POST /v2/systemsharedmemory/region/<r>/register`` with ``{"key", "offset", "byte_size"}``."""

    endpoint = "shm_register"

    async def post(self, region: str) -> None:
        doc = loads_json(self.request.body or b"null")
        if not isinstance(doc, dict) or "key" not in doc or "byte_size" not in doc:
            raise InvalidInput('register a region with a JSON object {"key": ..., "offset": ..., "byte_size": ...}')
        await self.dataplane.register_shared_memory(region, doc["key"], doc.get("offset", 0), doc["byte_size"])
        self.send_json({})


class SharedMemoryUnregisterHandler(BaseHandler):
    """``POST /v2/systemsharedmemory[/region/<r>]/unregister``: forget one region, or all of them."""

    endpoint = "shm_unregister"

    async def post(self, region: str = "") -> None:
        await self.dataplane.unregister_shared_memory(region or "")
        self.send_json({})
