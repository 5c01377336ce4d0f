"""Serve models that run as Ray Serve deployments: ``RayModel(name, handle)`` (KServe's name and signature).

Each model is a ``kserve_sdk.Model`` subclass decorated with ``@serve.deployment(...)``; it runs in its own
replica processes (fractional CPUs/GPUs, several replicas, a Ray cluster), while one ``ModelServer`` routes
REST and gRPC calls to it by name. Requires the ``ray`` extra: ``pip install kserve-sdk[ray]``.

    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False)
    try:
        serve.start(proxy_location="Disabled")
        handle = serve.run(MyModel.bind("my-model"), name="my-model", route_prefix=None)
        model = RayModel("my-model", handle)
        model.load()                  # waits until the replicas run; ready only when they do
        ModelServer().start([model])
    finally:
        kserve_sdk.ray.shutdown()     # Serve, then Ray, even when the process group was signalled

Unlike KServe's RayModel, ``:explain`` runs the replica's ``explain``; an exception raised in a replica
comes back as itself (not wrapped by Ray), so it is answered with the status a local model would get.
"""
import asyncio
import os
import threading
import time
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

try:
    import ray
    from ray import exceptions as ray_exceptions
    from ray import serve
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kserve_sdk.ray needs Ray Serve: pip install 'kserve-sdk[ray]' (ray[serve]>=2.9)") from e

from .errors import InferenceError, ModelNotReady
from .internals.ray_private import forbid_auto_connect, local_ray_broken
from .logging import logger
from .model import InferenceModel, InferenceVerb
from .protocol.infer_type import InferRequest

_RUNNING = ("HEALTHY", "UPSCALING", "DOWNSCALING")  # running (autoscaling may be adding or removing replicas)
_FAILED = ("DEPLOY_FAILED",)


def _portable(body: Any) -> Any:
    """``body`` made picklable for the trip to a replica: tensors read straight from the request body
    hold memoryviews of it, which are copied to bytes."""
    if isinstance(body, InferRequest):
        for tensor in body.inputs or ():
            raw = getattr(tensor, "_raw_data", None)
            if raw is not None and not isinstance(raw, bytes):
                tensor._raw_data = bytes(raw)
    return body


class RayModel(InferenceModel):
    """A model served by a Ray Serve deployment, called through its ``DeploymentHandle``.

    Args:
        name: the name clients use in URLs.
        handle: the ``DeploymentHandle`` of a deployment whose class is a ``kserve_sdk.Model`` subclass
            (``serve.run(...)`` returns it; ``serve.get_deployment_handle(deployment, app)`` finds one).
        load_timeout: how long ``load()`` waits for the replicas, in seconds.
    """

    def __init__(self, name: str, handle: Any, load_timeout: float = 300.0):
        super().__init__(name)
        self.handle = handle
        self.load_timeout = load_timeout
        self._streams = False
        self._stream_handle: Any = None
        self._pid = os.getpid()

    # --- lifecycle ----------------------------------------------------------------------------------
    def _deployment_status(self) -> Tuple[Optional[str], str]:
        """(status name, message) of the handle's deployment; (None, "") while Serve does not list it yet."""
        app_name = getattr(self.handle, "app_name", None)
        deployment_name = getattr(self.handle, "deployment_name", None)
        app = serve.status().applications.get(app_name) if app_name is not None else None
        if app is None:
            return None, ""
        deployment = app.deployments.get(deployment_name)
        if deployment is None:
            return None, app.message or ""
        status = getattr(deployment.status, "value", deployment.status)
        return str(status), deployment.message or app.message or ""

    def load(self) -> bool:
        """Wait until every replica of the deployment runs (up to ``load_timeout`` s), then ask one through
        the handle whether its model is loaded. Ready only then; on failure logged and not ready.

        The replicas load in their constructor (call ``self.load()`` in ``__init__``, as KServe's samples
        do): Serve counts a replica as running once its constructor has returned.
        """
        self.ready = False
        deadline = time.monotonic() + self.load_timeout
        status, message = None, ""
        while time.monotonic() < deadline:
            status, message = self._deployment_status()
            if status in _RUNNING or status in _FAILED:
                break
            time.sleep(0.1)
        if status not in _RUNNING:
            logger.error("Ray deployment of model %s is not running (%s): %s", self.name,
                         status or "not deployed", message or f"waited {self.load_timeout:g}s")
            return False
        try:
            remaining = max(1.0, deadline - time.monotonic())
            loaded = self.handle.healthy.remote().result(timeout_s=remaining)
            self._streams = bool(self.handle.streams_responses.remote().result(timeout_s=remaining))
        except Exception as e:
            logger.error("Ray deployment of model %s did not answer: %s", self.name, self._unwrap(e))
            return False
        if not loaded:
            logger.error("Ray deployment of model %s runs but its model is not ready: load it in the "
                         "deployment's __init__ (self.load())", self.name)
            return False
        self.ready = True
        return self.ready

    def start(self) -> None:
        """A Ray driver does not survive a fork: with ``--workers N`` the model is not ready (use replicas)."""
        if os.getpid() != self._pid:
            logger.error("model %s is served by Ray and cannot be used in a forked worker: run the server with "
                         "--workers 1 and scale with the deployment's num_replicas", self.name)
            self.ready = False

    # --- calls --------------------------------------------------------------------------------------
    def _unwrap(self, e: BaseException) -> BaseException:
        """The exception a replica raised, as itself; Ray's own failures as the status they deserve."""
        cause = getattr(e, "cause", None)
        if isinstance(e, ray_exceptions.RayTaskError) and isinstance(cause, Exception):
            return cause
        unavailable = tuple(cls for cls in (
            getattr(ray_exceptions, "RayActorError", None), getattr(ray_exceptions, "ActorUnavailableError", None),
            getattr(serve.exceptions, "BackPressureError", None),
            getattr(serve.exceptions, "DeploymentUnavailableError", None)) if isinstance(cls, type))
        if isinstance(e, unavailable):
            return ModelNotReady(self.name, f"Its Ray replicas are unavailable: {type(e).__name__}: {e}")
        if isinstance(e, ray_exceptions.RayError):
            return InferenceError(f"Ray call to model {self.name} failed: {type(e).__name__}: {e}")
        return e

    async def _remote(self, method: Optional[str], *args: Any, **kwargs: Any) -> Any:
        """Await ``method`` (``None``: ``__call__``) of a replica, raising what the replica raised."""
        target = self.handle if method is None else getattr(self.handle, method)
        try:
            return await target.remote(*args, **kwargs)
        except Exception as e:
            cause = self._unwrap(e)
            if cause is e:
                raise
            raise cause from None

    async def __call__(self, body: Any, headers: Optional[Dict[str, str]] = None,
                       verb: InferenceVerb = InferenceVerb.PREDICT) -> Tuple[Any, Dict[str, str]]:
        """The replica's pipeline (preprocess -> predict or explain -> postprocess): ``(response, headers)``."""
        return await self._remote(None, _portable(body), headers=dict(headers or {}), verb=verb)

    async def get_input_types(self) -> List[Dict]:
        """The replica's input tensor descriptions (v2 model metadata)."""
        return await self._remote("get_input_types")

    async def get_output_types(self) -> List[Dict]:
        """The replica's output tensor descriptions (v2 model metadata)."""
        return await self._remote("get_output_types")

    # --- streaming ----------------------------------------------------------------------------------
    def streams_responses(self) -> bool:
        """Whether the replica's ``predict`` is an async generator (read by ``load()``)."""
        return self._streams

    def streams_requests(self) -> bool:
        """A Ray handle cannot stream requests into a replica: a gRPC stream's requests are answered one by one."""
        return False

    async def stream(self, body: Any, headers: Dict[str, str], response_headers: Dict[str, str],
                     timings: Dict[str, float]) -> AsyncIterator[Any]:
        """The replica's ``Model.stream`` through a streaming handle; closing this generator cancels the call
        in the replica. Response headers the replica sets while streaming are not passed back."""
        if self._stream_handle is None:
            self._stream_handle = self.handle.options(stream=True)
        items = self._stream_handle.stream.remote(_portable(body), dict(headers), {}, {})
        done = False
        try:
            while True:
                try:
                    item = await items.__anext__()
                except StopAsyncIteration:
                    done = True
                    return
                except Exception as e:
                    done = True
                    cause = self._unwrap(e)
                    if cause is e:
                        raise
                    raise cause from None
                yield item
        finally:
            if not done:
                items.cancel()
                await asyncio.sleep(0)


def shutdown(apps: Optional[List[str]] = None, timeout: float = 20.0) -> None:
    """Remove the Serve applications, then disconnect from Ray (which stops a Ray that ``ray.init()``
    started here). ``apps``: delete only these applications (on a shared cluster); ``None``: shut Serve
    down. Serve is skipped when the local Ray lost a process already (the whole process group was
    signalled) and is given ``timeout`` s otherwise; no new Ray may be auto-started afterwards."""
    def remove() -> None:
        if apps is None:
            serve.shutdown()
        else:
            for name in apps:
                serve.delete(name)

    if ray.is_initialized() and not local_ray_broken(ray):
        thread = threading.Thread(target=remove, name="serve-shutdown", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline and not local_ray_broken(ray):
            thread.join(0.1)
        if thread.is_alive():
            logger.warning("Ray Serve did not shut down (%s); stopping Ray",
                           "Ray's processes were stopped" if local_ray_broken(ray) else f"waited {timeout:g}s")
    else:
        logger.warning("Ray's processes were stopped; stopping the rest")
    forbid_auto_connect(ray)  # Serve's threads must not start a new Ray once this one stops
    ray.shutdown()
