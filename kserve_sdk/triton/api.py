"""Triton's protocol extensions over REST: model statistics, model configuration, trace settings, log
settings, system shared memory and CUDA shared memory (answered without a GPU: cuda_shared_memory.py). (The
repository extension's routes are v2's, handlers/v2.py.)"""
from typing import Optional

from ..errors import InvalidInput
from ..handlers.api import MODEL, VERSION, RestAPI
from ..handlers.base import BaseHandler
from ..protocol.rest_codec import loads_json
from . import cuda_shared_memory

REGION = r"([^/]+)"


class ModelStatisticsHandler(BaseHandler):
    """``GET /v2/models[/<m>[/versions/<v>]]/stats``: Triton's per-model statistics."""

    endpoint = "model_statistics"

    def get(self, name: Optional[str] = None, version: Optional[str] = None) -> None:
        self.send_json(self.dataplane.model_statistics(name or "", version or ""))


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


class CudaSharedMemoryStatusHandler(BaseHandler):
    """``GET /v2/cudasharedmemory[/region/<r>]/status``: none is registered on a server without GPUs."""

    endpoint = "cuda_shm_status"

    def get(self, region: str = "") -> None:
        self.send_json(cuda_shared_memory.status(self.dataplane.shared_memory.allowed, region))


class CudaSharedMemoryRegisterHandler(BaseHandler):
    """``POST /v2/cudasharedmemory/region/<r>/register``: refused, this server has no GPU."""

    endpoint = "cuda_shm_register"

    def post(self, region: str) -> None:
        cuda_shared_memory.register(self.dataplane.shared_memory.allowed, region)


class CudaSharedMemoryUnregisterHandler(BaseHandler):
    """``POST /v2/cudasharedmemory[/region/<r>]/unregister``: succeeds, as there is nothing to forget."""

    endpoint = "cuda_shm_unregister"

    def post(self, region: str = "") -> None:
        cuda_shared_memory.unregister(self.dataplane.shared_memory.allowed, region)
        self.send_json({})


#: Triton's extensions. ``/v2/models/stats`` (every model's statistics) comes before v2's model metadata in
#: the server's list, whose pattern would take ``stats`` as a model's name.
API = RestAPI("triton", [
    (r"/v2/models/stats", ModelStatisticsHandler),
    (rf"/v2/models/{MODEL}{VERSION}/stats", ModelStatisticsHandler),
    (rf"/v2/models/{MODEL}{VERSION}/config", ModelConfigHandler),
    (r"/v2/trace/setting", TraceSettingHandler),
    (rf"/v2/models/{MODEL}/trace/setting", TraceSettingHandler),
    (r"/v2/logging", LoggingHandler),
    (r"/v2/systemsharedmemory/status", SharedMemoryStatusHandler),
    (rf"/v2/systemsharedmemory/region/{REGION}/status", SharedMemoryStatusHandler),
    (rf"/v2/systemsharedmemory/region/{REGION}/register", SharedMemoryRegisterHandler),
    (r"/v2/systemsharedmemory/unregister", SharedMemoryUnregisterHandler),
    (rf"/v2/systemsharedmemory/region/{REGION}/unregister", SharedMemoryUnregisterHandler),
    (r"/v2/cudasharedmemory/status", CudaSharedMemoryStatusHandler),
    (rf"/v2/cudasharedmemory/region/{REGION}/status", CudaSharedMemoryStatusHandler),
    (rf"/v2/cudasharedmemory/region/{REGION}/register", CudaSharedMemoryRegisterHandler),
    (r"/v2/cudasharedmemory/unregister", CudaSharedMemoryUnregisterHandler),
    (rf"/v2/cudasharedmemory/region/{REGION}/unregister", CudaSharedMemoryUnregisterHandler),
], untraced=("trace_setting",))
