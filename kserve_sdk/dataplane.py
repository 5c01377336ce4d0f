"""The one protocol-agnostic data plane behind REST v1, REST v2 and gRPC.

Wire handlers decode a request into a dict (v1) or an InferRequest (v2), call a method here and
encode what it returns. Model lookup, readiness, the response rules of v2 (requested outputs, binary
outputs) and latency logging are applied here once, for every protocol.
"""
import asyncio
import functools
import heapq
import inspect
import time
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import context, metrics, tracing
from .errors import (
    InferenceError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ModelUnavailable,
    ModelVersionNotFound,
    ServerBusy,
    ServerNotReady,
)
from .lifecycle import Call, Timings, timings_of
from .model import InferenceModel, InferenceVerb, Model
from .model_call import CountedStream, Deadline, ModelCall
from .model_repository import UNLOADED, ModelRepository
from .protocol.infer_type import InferRequest, InferResponse
from .protocol.model_repository_extension import ConfigOverride, config_override
from .protocol.tensor import DataDoesNotFit, Tensor, in_shared_memory
from .repository.manager import RepositoryManager, ServingHooks
from .repository.options import RepositoryOptions
from .scheduling import Scheduler, SchedulingPolicy, Ticket
from .scheduling.warmup import warm_up
from .tracing.settings import validated as validated_trace_settings
from .triton import log_settings, statistics
from .triton.model_config import triton_config
from .triton.shared_memory import SharedMemoryRegistry, uses_shared_memory
from .utils.utils import get_predict_response

try:
    from importlib.metadata import version as _pkg_version

    SERVER_VERSION = _pkg_version("kserve-sdk")
except Exception:  # not installed as a distribution (e.g. run from a checkout)
    SERVER_VERSION = "0.1.0"

SERVER_NAME = "kserve-sdk"
SERVER_EXTENSIONS = ["model_repository_extension", "binary_tensor_data", "system_shared_memory", "statistics",
                     "logging", "model_configuration", "trace", "classification"]

#: Model names longer than this are refused (400) unless a model is registered under them.
MAX_MODEL_NAME_LENGTH = 256

#: How many served models the 404 of an unknown model names.
MODELS_NAMED = 10


def check_model_name(name: str) -> None:
    """Refuse (InvalidInput) names no model can have: empty, very long, path tricks, control characters."""
    if not name:
        raise InvalidInput("the model name is empty")
    if len(name) > MAX_MODEL_NAME_LENGTH:
        raise InvalidInput(f"the model name is {len(name)} characters long; at most {MAX_MODEL_NAME_LENGTH} "
                           "are allowed")
    if "/" in name or "\\" in name:
        raise InvalidInput(f"the model name {name!r} contains a path separator")
    if name in (".", ".."):
        raise InvalidInput(f"{name!r} is not a model name")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInput(f"the model name {name!r} contains a control character")


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _run_maybe_sync(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``: a coroutine function awaited, a plain one run in the thread pool (a model's load)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    return await _maybe_await(await asyncio.get_running_loop().run_in_executor(None, function, *args))


def served_version(model: Any) -> str:
    """The version a model serves: its ``version`` attribute, or "1" for a model without one (the version
    Triton gives a model of a single version). A request naming no version is served too."""
    version = getattr(model, "version", None)
    return "1" if version is None or version == "" else str(version)


def not_in_repository(error: ModelNotFound) -> ModelNotFound:
    """The 404 of a load of a name the repository has no model for (``error``, the name's 404), in the words
    Triton's clients look for ("failed to load")."""
    error.reason = f"failed to load model '{error.model_name}': {error.reason}"
    return error


def unavailable(name: str, state: str, reason: str) -> ModelUnavailable:
    """The 404 of a model the repository knows but does not serve, saying why."""
    if reason == UNLOADED:
        return ModelUnavailable(name, f"was unloaded: load it again (POST /v2/repository/models/{name}/load) to "
                                      "serve it.")
    return ModelUnavailable(name, f"is {state}" + (f": {reason}" if reason else "."))


def repository_config_refused(name: str) -> InvalidInput:
    """The 400 of a load of a model repository's model with a ``config`` override."""
    return InvalidInput(f"failed to load model '{name}': a config override cannot be applied to a model of the "
                        "model repository: set its fields in its model-settings.json")


@functools.cache
def _is_pipeline_model(cls: Any) -> bool:
    """Whether a model class is a Model (whose run_pipeline gives stage timings); remembered per class,
    because issubclass against an abstract base class is slow."""
    return issubclass(cls, Model)


def not_a_v2_response(model_name: str, response: Any) -> InferenceError:
    """The error for a model that answered a v2 call with something v2 cannot carry (e.g. a v1 dict)."""
    shape = "a dict without an \"outputs\" list" if isinstance(response, dict) else type(response).__name__
    return InferenceError(f"model '{model_name}' returned {shape}, which is not a v2 inference response: return "
                          "an InferResponse (kserve_sdk.utils.utils.get_predict_response builds one) or arrays")


def encode_model_answer(model_name: str, encode: Callable[..., Any], *args: Any) -> Any:
    """``encode(*args)`` (a protocol's encoder of an answer), where an answer the model built that cannot be
    written is the model's fault (HTTP 500, gRPC INTERNAL); an InvalidInput (a requested output the model
    does not have) stays the client's."""
    try:
        return encode(*args)
    except DataDoesNotFit as e:  # values of an output its datatype cannot hold
        raise e.as_model_error(model_name) from None
    except InvalidInput:
        raise
    except (TypeError, ValueError, OverflowError, UnicodeError) as e:
        raise InferenceError(f"model '{model_name}' returned a response that cannot be encoded: "
                             f"{type(e).__name__}: {e}") from None


class _VersionWarmup:
    """What :func:`~kserve_sdk.scheduling.warmup.warm_up` asks of the data plane, for a model repository's version
    that is not served yet: its requests run on that model object, and the registry is left alone (the version
    is served once they have passed)."""

    def __init__(self, dataplane: "DataPlane", model: Any):
        self._dataplane, self._model = dataplane, model
        self.model_registry = self
        self.infer = dataplane.infer

    @property
    def draining(self) -> bool:
        return self._dataplane.draining

    def get_model(self, name: str) -> Any:
        return self._model

    def begin_warmup(self, name: str, model: Any) -> None:
        """Nothing to mark: the version is not served during its warm-up."""

    def end_warmup(self, name: str, model: Any, failure: Optional[str]) -> None:
        """Nothing to mark: the repository serves the version, or not, by the warm-up's outcome."""


class DataPlane:
    """Health, metadata, inference and explanation over a model repository."""

    def __init__(self, model_registry: ModelRepository, enable_latency_logging: bool = True,
                 max_concurrent_requests: Optional[int] = None, request_timeout_seconds: Optional[float] = None,
                 allow_client_shm: bool = False, scheduling: Optional[SchedulingPolicy] = None):
        self._model_registry = model_registry
        #: Inference calls this worker answers at once; more are refused with ServerBusy (None: no limit).
        self.max_concurrent_requests = max_concurrent_requests or None
        #: Seconds a unary inference call may take before it is cancelled (None: no limit).
        self.request_timeout_seconds = request_timeout_seconds or None
        #: Each model's queue under its scheduling policy over ``scheduling``, the server's defaults.
        self.scheduler = Scheduler(scheduling, self.request_timeout_seconds)
        self.enable_latency_logging = enable_latency_logging
        self.draining = False
        self._in_flight = 0
        self._route_calls = 0  # calls of the script's own routes in flight (handlers/custom_routes.py)
        self._idle: Optional[asyncio.Event] = None
        self._model_calls: Dict[str, int] = {}  # calls in flight per model, so unload can wait for them
        self._unloading: set = set()
        #: System shared-memory regions clients registered (Triton's extension).
        self.shared_memory = SharedMemoryRegistry(allow_client_shm)
        #: The model repository served beside the registered models (``--model_repository``), if any.
        self.repository: Optional[RepositoryManager] = None
        # id(model) -> its key in the scheduler, for the versions of repository models (each its own queue)
        self._queue_keys: Dict[int, str] = {}
        # Set by the server with --workers N: called after a local change (model load/unload, shared-memory
        # registration) as (op, name, args) to pass it to every worker, which apply it with apply_change.
        self.share_change: Optional[Callable[[str, str, Dict[str, Any]], Awaitable[None]]] = None
        #: op -> what applies it here as ``apply(name, args)`` (a coroutine function or a plain one);
        #: a feature that shares its changes between workers adds its op with :meth:`on_change`.
        self._change_appliers: Dict[str, Callable[[str, Dict[str, Any]], Any]] = {
            "load": lambda name, args: self.load_here(name, args.get("config")),
            "unload": lambda name, args: self.unload_here(name),
            "shm_register": lambda name, args: self.shared_memory.register(
                name, args["key"], args["offset"], args["byte_size"]),
            "shm_unregister": lambda name, args: self.shared_memory.unregister(name),
            "log_settings": lambda name, args: log_settings.apply(args),
            "trace_settings": lambda name, args: tracing.settings.set_scope(name, args["scope"]),
        }

    # --- request lifecycle ------------------------------------------------------------------------
    def begin_request(self, model_name: str) -> None:
        """Count an inference call in flight; refused (503 / UNAVAILABLE) once the server is draining."""
        if self.draining:
            raise ServerNotReady("The server is shutting down.")
        if self.max_concurrent_requests is not None and self._in_flight >= self.max_concurrent_requests:
            raise ServerBusy(self.max_concurrent_requests)
        self._in_flight += 1
        self._model_calls[model_name] = self._model_calls.get(model_name, 0) + 1

    def end_request(self, model_name: str) -> None:
        """An inference call counted by ``begin_request`` has ended."""
        self._in_flight -= 1
        left = self._model_calls[model_name] - 1
        if left:
            self._model_calls[model_name] = left
        else:  # no key kept per model name ever called (a repository may serve thousands)
            del self._model_calls[model_name]
        if self._in_flight == 0 and self._idle is not None and not self._route_calls:
            self._idle.set()

    def begin_route_call(self) -> None:
        """Count a call of one of the script's own routes in flight, so that a stopping server waits for it as
        for an inference call; refused (503) once the server is draining."""
        if self.draining:
            raise ServerNotReady("The server is shutting down.")
        self._route_calls += 1

    def end_route_call(self) -> None:
        """A call counted by ``begin_route_call`` has ended."""
        self._route_calls -= 1
        if self._route_calls == 0 and self._in_flight == 0 and self._idle is not None:
            self._idle.set()

    def calls_in_flight(self) -> int:
        """How many inference calls are being answered now."""
        return self._in_flight

    async def drain(self, timeout: float) -> bool:
        """Refuse new calls and wait up to ``timeout`` s for those in flight; True when none is left."""
        self.draining = True
        if self.repository is not None:
            self.repository.close()  # no more rescans or loads
        if self._in_flight == 0 and not self._route_calls:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def open_call(self, protocol: str, endpoint: str, headers: Optional[Dict[str, str]] = None,
                  model_name: Optional[str] = None) -> Call:
        """Start the lifecycle of one call (see :mod:`kserve_sdk.lifecycle`): request id, in-flight gauge,
        timings; ``headers`` are the request's, lowercase, as the model receives them."""
        return Call(protocol, endpoint, headers, model_name, self.model_label)

    def model_label(self, name: Optional[str]) -> str:
        """The model name for metric labels: registered names (and the model repository's) only, so clients
        cannot mint labels."""
        if not name:
            return ""
        if self._model_registry.get_model(name) is not None:
            return name
        return name if self.repository is not None and self.repository.knows(name) else ""

    @property
    def model_registry(self) -> ModelRepository:
        """The repository of served models."""
        return self._model_registry

    # --- health and metadata ------------------------------------------------------------------------
    @staticmethod
    async def live() -> Dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "alive"}

    @staticmethod
    def metadata() -> Dict[str, Any]:
        """Server metadata: name, version and protocol extensions."""
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": SERVER_EXTENSIONS}

    async def ready(self) -> bool:
        """Readiness: not draining, at least one model is registered (or a model repository is served, its
        start-up loads done) and every registered model is ready."""
        if self.draining:
            return False
        repository = self.repository
        if repository is not None and not repository.ready:
            return False
        names = list(self._model_registry.get_models())
        if not names and repository is None:
            return False
        for name in names:
            if not await self._model_registry.is_model_ready(name):
                return False
        return await _predictor_ready(context.get_predictor_config(), None)

    def list_models(self) -> List[str]:
        """Names of the registered models."""
        return list(self._model_registry.get_models())

    def get_model_from_registry(self, name: str, version: Optional[str] = None) -> Any:
        """The model registered as ``name`` (an :class:`~kserve_sdk.model.InferenceModel`) if it serves
        ``version`` (see :meth:`check_version`; a model repository's model serving versions side by side: the
        object of that version); ModelNotFound if there is none (ModelUnavailable, a 404 too, for one the
        repository knows but does not serve: unloaded, loading, failed to load). Nothing is loaded: see
        :meth:`get_model` for the awaitable form (KServe's)."""
        registry = self._model_registry
        if version:
            versions = registry.versions.get(name)
            if versions is not None:
                found = versions.get(version)
                if found is not None:
                    return found
                if self.repository is not None:  # another spelling ("01"), or a version not loaded
                    return self.repository.served_model(name, version)
        model = registry.get_model(name)
        if model is None:
            check_model_name(name)
            if self.repository is not None and self.repository.knows(name):
                return self.repository.served_model(name, version)
            state = self._model_registry.state_of(name)
            if state is not None:
                raise unavailable(name, *state)
            raise self.unknown_model(name)
        if version:
            self.check_version(name, model, version)
        return model

    async def get_model(self, name: str, version: Optional[str] = None) -> Any:
        """The model served as ``name`` (KServe's ``await dataplane.get_model(name)``): what
        :meth:`get_model_from_registry` returns, except that a model of a model repository loaded on demand
        (``--model_control_mode lazy``) is loaded first. ModelNotFound (404) when there is none; the model
        may still be warming up (:meth:`model_ready` says whether it is ready)."""
        try:
            return self.get_model_from_registry(name, version)
        except (ModelNotFound, ModelNotReady):
            repository = self.repository
            if repository is None or not repository.knows(name):
                raise
            return await repository.acquire(name, version)

    def unknown_model(self, name: str) -> ModelNotFound:
        """The 404 of a name no model has: Triton's and KServe's sentences, then the names of up to
        :data:`MODELS_NAMED` served models (alphabetically) so the client sees what it could have asked for."""
        error = ModelNotFound(name)
        served = self._model_registry.get_models()
        first = heapq.nsmallest(MODELS_NAMED, served)
        more = len(served) - len(first)
        named = ", ".join(first) + (f" and {more} more" if more else "") if first else "none"
        error.reason = f"{error.reason} Models served: {named}."
        return error

    def _repository_of(self, name: str) -> Optional[RepositoryManager]:
        """The model repository serving ``name``, if it does."""
        repository = self.repository
        return repository if repository is not None and repository.knows(name) else None

    @staticmethod
    def check_version(name: str, model: Any, version: Optional[str]) -> None:
        """ModelVersionNotFound (404) unless the model serves ``version``: none asked, or the one of
        :func:`served_version` (compared as numbers when both are: "01" is 1)."""
        if not version:
            return
        served = served_version(model)
        if version != served and not (version.isascii() and version.isdigit() and served.isdigit()
                                      and int(version) == int(served)):
            raise ModelVersionNotFound(name, version, served)

    async def model_ready(self, model_name: str, version: Optional[str] = None,
                          disable_predictor_health_check: bool = False) -> bool:
        """Whether the named model is ready: False also for a model the repository knows but does not serve
        (unloaded, loading, failed to load) and while it is being unloaded; ModelNotFound for a name it never
        knew, ModelVersionNotFound for a version the model does not serve.

        With ``--enable_predictor_health_check``, a transformer's model is ready only when its predictor's model
        of the same name is too, unless ``disable_predictor_health_check`` (KServe's second argument: a bool
        given in ``version``'s place, ``model_ready(name, True)``, as KServe's routes call it, is read as that)."""
        if isinstance(version, bool):
            version, disable_predictor_health_check = None, version
        if self._model_registry.state_of(model_name) is not None:
            return False
        if self._repository_of(model_name) is not None:
            try:  # a repository model's version is served once loaded and warmed up
                self.get_model_from_registry(model_name, version)
            except (ModelUnavailable, ModelNotReady):
                return False
            return True
        model = self.get_model_from_registry(model_name, version)
        if model_name in self._unloading or not await self._model_registry.is_model_ready(model_name):
            return False
        return disable_predictor_health_check is True or await self.predictor_ready(model, model_name)

    @staticmethod
    async def predictor_ready(model: Any, model_name: str) -> bool:
        """True unless ``model`` is a transformer started with ``--enable_predictor_health_check`` whose
        predictor's model ``model_name`` is not ready."""
        return await _predictor_ready(getattr(model, "predictor_config", None), model_name)

    async def ready_model(self, name: str, version: Optional[str] = None, load: bool = True) -> InferenceModel:
        """The named model if it can serve (``version`` too, when given): ModelNotFound (ModelUnavailable,
        ModelVersionNotFound) / ModelNotReady otherwise. A model of the model repository in ``lazy`` mode is
        loaded first, unless ``load`` is False."""
        try:
            model = self.get_model_from_registry(name, version)
        except (ModelNotFound, ModelNotReady):
            repository = self.repository
            if not (load and repository is not None and repository.knows(name)):
                raise
            model = await repository.acquire(name, version)
        registry = self._model_registry
        if name in self._unloading:
            raise ModelNotReady(name, "It is being unloaded.")
        if name not in registry.versions and not await registry.is_model_ready(name):
            raise ModelNotReady(name, registry.warmups.get(name))
        return model

    async def model_metadata(self, model_name: str, version: Optional[str] = None) -> Dict[str, Any]:
        """v2 model metadata: name, versions (the model's ``version``, none for a model without one),
        platform and tensor descriptions."""
        repository = self._repository_of(model_name)
        if repository is not None:  # loaded first in lazy mode
            model = await self.ready_model(model_name, version)
            versions = [v for v in repository.versions_served(model_name) if v]
        else:
            model = self.get_model_from_registry(model_name, version)
            versions = [served_version(model)] if getattr(model, "version", None) not in (None, "") else []
        return {
            "name": model_name,
            "versions": versions,
            "platform": "",
            "inputs": await _maybe_await(model.get_input_types()),
            "outputs": await _maybe_await(model.get_output_types()),
        }

    async def model_config(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        """Triton's model configuration of the named model (see :mod:`kserve_sdk.triton.model_config`)."""
        in_repository = self._repository_of(name) is not None
        model = await self.ready_model(name, version) if in_repository \
            else self.get_model_from_registry(name, version)
        scheduling = self.scheduler.policy_of(self._queue_key(name, model), model).triton_config(name)
        return triton_config(name, await _maybe_await(model.get_input_types()),
                             await _maybe_await(model.get_output_types()), getattr(model, "max_batch_size", None),
                             getattr(model, "max_latency_ms", 0.0), scheduling)

    # --- Triton's logging extension -----------------------------------------------------------------
    @staticmethod
    def log_settings() -> Dict[str, Any]:
        """The log settings in force (see :mod:`kserve_sdk.triton.log_settings`)."""
        return log_settings.current()

    async def update_log_settings(self, changes: Any) -> Dict[str, Any]:
        """Check ``changes`` (InvalidInput names a wrong one), apply them here, then in every worker;
        returns every setting now in force."""
        checked = log_settings.checked(changes)
        settings = log_settings.apply(checked)
        if self.share_change is not None:
            await self.share_change("log_settings", "", checked)
        return settings

    # --- Triton's trace extension -------------------------------------------------------------------
    def trace_settings(self, model_name: str = "") -> Dict[str, Any]:
        """The trace settings in force for ``model_name`` (the global ones for "")."""
        if model_name:
            self.get_model_from_registry(model_name)
        return tracing.settings.view(model_name)

    async def update_trace_settings(self, model_name: str, update: Any) -> Dict[str, Any]:
        """Change the trace settings of ``model_name`` (the global ones for "") in every worker; InvalidInput
        names a bad setting. Returns the settings now in force."""
        if model_name:
            self.get_model_from_registry(model_name)
        settings = tracing.settings
        scope = settings.updated(model_name, validated_trace_settings(update, settings.tracing_on))
        settings.set_scope(model_name, scope)
        if self.share_change is not None:
            await self.share_change("trace_settings", model_name, {"scope": scope})
        return settings.view(model_name)

    def model_statistics(self, name: str = "", version: str = "") -> Dict[str, List[Dict[str, Any]]]:
        """Triton's statistics for one model (every served model when ``name`` is empty), summed over workers:
        counts and cumulative times of successes, failures and the pre/predict/postprocess stages."""
        if name:
            self.get_model_from_registry(name, version)
        return statistics.statistics([name] if name else sorted(self.list_models()), version)

    # --- inference ----------------------------------------------------------------------------------
    async def infer(self, model_name: str, request: Any, headers: Optional[Dict[str, str]] = None,
                    model: Optional[InferenceModel] = None, call: Optional[Call] = None
                    ) -> Tuple[Any, Dict[str, str]]:
        """Run a predict call: ``request`` is a dict (v1) or an InferRequest (v2).

        Returns ``(response, response_headers)``. For v2, the response is an InferResponse carrying the
        request's output choices, or whatever dict/bytes the model returned. ``model`` is what
        :meth:`ready_model` returned for this call (asked with the request's version), when the caller has
        asked already; ``call`` is the adapter's :class:`~kserve_sdk.lifecycle.Call`, whose timings the
        stages fill.
        """
        return await self._call(model_name, request, headers, InferenceVerb.PREDICT, model, call)

    async def explain(self, model_name: str, request: Any, headers: Optional[Dict[str, str]] = None,
                      model: Optional[InferenceModel] = None, call: Optional[Call] = None
                      ) -> Tuple[Any, Dict[str, str]]:
        """Run an explain call; same shapes as :meth:`infer`."""
        return await self._call(model_name, request, headers, InferenceVerb.EXPLAIN, model, call)

    async def _call(self, model_name: str, request: Any, headers: Optional[Dict[str, str]],
                    verb: InferenceVerb, model: Optional[InferenceModel],
                    call: Optional[Call]) -> Tuple[Any, Dict[str, str]]:
        headers = {} if headers is None else headers
        v2 = isinstance(request, InferRequest)
        if model is None:
            model = await self.ready_model(model_name, request.model_version or None if v2 else None)
        repository = self.repository
        if repository is not None:
            repository.begin(model)  # used now, and not evicted while the call runs
        try:
            shm = v2 and uses_shared_memory(request)
            if shm:
                self.shared_memory.read_inputs(request)
            model_call = self.model_call(model_name, call, headers, model, request.parameters if v2 else None)
            answer = self._run_model(model, request, headers, verb, model_call.timings)
            staged = model_call.ticket is not None and _is_pipeline_model(type(model)) \
                and model.runs_one_thread_stage(verb)  # type: ignore[attr-defined]  # a Model, checked
            response, response_headers = await model_call.run(answer, staged=staged)
            if v2:
                response = self._as_v2_response(model_name, request, response)
                if (shm or repository is not None) and isinstance(response, InferResponse):
                    if shm:
                        self.shared_memory.write_outputs(request, response)
                    if repository is not None and response.model_version is None:
                        response.model_version = self._version_answering(model)
            return response, response_headers or {}
        finally:
            if repository is not None:
                repository.end(model)

    def model_call(self, model_name: str, call: Optional[Call], headers: Optional[Dict[str, str]] = None,
                   model: Any = None, parameters: Optional[Dict[str, Any]] = None) -> ModelCall:
        """Begin one call of the model (see :mod:`kserve_sdk.model_call`): refused while draining or at
        ``--max_concurrent_requests``; ``call`` is the protocol's :class:`~kserve_sdk.lifecycle.Call`. Its
        place in the model's queue and its deadline follow the model's scheduling policy and what the client
        asked for: the v2 ``parameters`` ``priority`` and ``timeout``, else the headers ``x-kserve-priority``
        and ``x-kserve-timeout-us``."""
        if headers is None:
            headers = call.headers if call is not None else {}
        if model is None:
            model = self._model_registry.get_model(model_name)
        ticket, deadline = self._admit(model_name, model, parameters, headers, call)
        return ModelCall(self, model_name, timings_of(call), headers, ticket, deadline)

    def _admit(self, model_name: str, model: Any, parameters: Optional[Dict[str, Any]], headers: Dict[str, str],
               call: Optional[Call]) -> Tuple[Optional[Ticket], Optional[Deadline]]:
        """The call's place in its model's queue and its deadline, both counted from its arrival."""
        return self.scheduler.admit(self._queue_key(model_name, model), model, parameters, headers,
                                    call.started if call is not None else None)

    def _version_answering(self, model: Any) -> Optional[str]:
        """The version of a repository model that answered a request naming none (None for other models)."""
        version = getattr(model, "version", None)
        return version if version and id(model) in self._queue_keys else None

    def _queue_key(self, model_name: str, model: Any) -> str:
        """The model's key in the scheduler: its name, or for a version of a repository model served beside
        others, ``name/version`` (each version has its own queue)."""
        return self._queue_keys.get(id(model), model_name) if self._queue_keys else model_name

    @staticmethod
    def _run_model(model: Any, request: Any, headers: Dict[str, str], verb: InferenceVerb,
                   timings: Timings) -> Awaitable[Tuple[Any, Dict[str, str]]]:
        if _is_pipeline_model(type(model)):  # type: ignore[arg-type]  # mypy: type[Any] is not Hashable
            return model.run_pipeline(request, headers, verb, timings)  # its coroutine, not one more around it
        return DataPlane._run_callable(model, request, headers, verb, timings)

    @staticmethod
    async def _run_callable(model: Any, request: Any, headers: Dict[str, str], verb: InferenceVerb,
                            timings: Timings) -> Tuple[Any, Dict[str, str]]:
        response, response_headers = await _maybe_await(model(request, headers=headers, verb=verb))
        timings.executions += 1
        return response, response_headers

    async def stream(self, model_name: str, request: Any, headers: Dict[str, str],
                     response_headers: Optional[Dict[str, str]] = None, protocol: str = "",
                     call: Optional[Call] = None) -> AsyncIterator[Any]:
        """One request in, the model's responses out (many when ``predict`` is an async generator).

        Errors before the first response are raised from the first ``__anext__``; the model's generator is
        closed at once when the caller stops iterating (a client that went away). ``call`` is the
        adapter's :class:`~kserve_sdk.lifecycle.Call` (its protocol names the stream in metrics).
        """
        version = request.model_version if isinstance(request, InferRequest) else None
        model: Any = await self.ready_model(model_name, version or None)
        if isinstance(request, InferRequest) and uses_shared_memory(request):
            self.shared_memory.read_inputs(request)
            if any(in_shared_memory(wanted) for wanted in request.request_outputs or ()):
                raise InvalidInput("streamed responses cannot be written to shared memory: request the outputs "
                                   "without shared_memory_region")
        response_headers = {} if response_headers is None else response_headers
        timings = timings_of(call)
        # a Model, or another InferenceModel with Model.stream's signature (kserve_sdk.ray.RayModel), streams
        streams = callable(getattr(model, "stream", None))
        items = model.stream(request, headers, response_headers, timings) if streams else None
        protocol = call.protocol if call is not None else protocol
        ticket, deadline = self._admit(model_name, model,
                                       request.parameters if isinstance(request, InferRequest) else None, headers, call)
        repository = self.repository
        if repository is not None:
            repository.begin(model)  # a repository model is not evicted, nor stopped by a reload, mid-stream
        try:
            async for item in self.counted_stream(model_name, items, headers, protocol, timings, model, request,
                                                  deadline=deadline, ticket=ticket):
                yield self._as_v2_response(model_name, request, item) if isinstance(request, InferRequest) else item
        finally:
            if repository is not None:
                repository.end(model)

    async def stream_in(self, model_name: str, requests: AsyncIterator[Any], headers: Dict[str, str],
                        protocol: str = "", call: Optional[Call] = None) -> AsyncIterator[Any]:
        """A stream of requests in, through the model's ``predict_stream``, responses out."""
        model: Any = await self.ready_model(model_name)
        seen: List[Any] = [None]

        async def remembered():  # answers take their output choices from the latest request consumed
            async for request in requests:
                if isinstance(request, InferRequest) and request.model_version:
                    self.check_version(model_name, model, request.model_version)
                seen[0] = request
                yield request

        items = model.stream_in(remembered(), headers)
        protocol = call.protocol if call is not None else protocol
        ticket, deadline = self._admit(model_name, model, None, headers, call)
        repository = self.repository
        if repository is not None:
            repository.begin(model)
        try:
            async for item in self.counted_stream(model_name, items, headers, protocol, timings_of(call),
                                                  deadline=deadline, ticket=ticket):
                yield self._as_v2_response(model_name, seen[0], item) if isinstance(seen[0], InferRequest) else item
        finally:
            if repository is not None:
                repository.end(model)

    def counted_stream(self, model_name: str, items: Optional[AsyncGenerator[Any, None]], headers: Dict[str, str],
                       protocol: str, timings: Timings, model: Any = None, request: Any = None,
                       watch: Optional[Any] = None, deadline: Optional[Deadline] = None,
                       begun: Optional[ModelCall] = None, ticket: Optional[Ticket] = None) -> CountedStream:
        """A model's stream of answers as one model call (:class:`~kserve_sdk.model_call.CountedStream`:
        iterate it, or ``pump`` it). ``items`` None: ``model(request)`` answers once. ``watch`` (a protocol's
        own per-chunk metrics) has ``seen(item)`` called for each answer and ``ended()`` once the stream is
        over; ``deadline`` bounds the wait for the first answer; ``begun``: the model call the stream
        continues (a method that returned the stream), holding its slot; ``ticket``: the place in the model's
        queue a stream not yet begun waits in for its slot."""
        return CountedStream(self, model_name, items, headers, protocol, timings, model, request, watch, deadline,
                             begun, ticket)

    @staticmethod
    def _as_v2_response(model_name: str, request: InferRequest, response: Any) -> Any:
        """Apply the request's output choices; wrap arrays/lists a v2 model returned, and read a dict in
        v2's response shape (``{"outputs": [...]}``) as an InferResponse, so every protocol answers it alike.
        Other dicts pass (a CloudEvent's data may be any JSON); the v2 codecs refuse them with
        :func:`not_a_v2_response`."""
        if isinstance(response, (np.ndarray, list)):
            return get_predict_response(request, response, model_name)
        if isinstance(response, dict) and isinstance(response.get("outputs"), list):
            try:
                response = InferResponse.from_rest(response)
            except InvalidInput as e:
                raise InferenceError(f"model '{model_name}' returned a v2 response that cannot be read: {e}") from None
        if isinstance(response, InferResponse):
            for output in response.outputs:
                problem = output.content_problem() if isinstance(output, Tensor) else "it is not an InferOutput"
                if problem is not None:
                    raise InferenceError(f"model '{model_name}' returned output "
                                         f"'{getattr(output, 'name', output)}' that is malformed: {problem}")
            if response._requested_outputs is None:
                response._requested_outputs = request.request_outputs
            response._use_binary_outputs = request.use_binary_outputs
            if response.id is None:
                response.id = request.id
            if response.model_name is None:
                response.model_name = model_name
            if response.model_version is None and request.model_version:
                response.model_version = request.model_version
            return response
        if isinstance(response, (dict, bytes, str)):
            return response
        raise not_a_v2_response(model_name, response)

    # --- repository ---------------------------------------------------------------------------------
    async def repository_index(self) -> List[Dict[str, str]]:
        """Every model the repository knows, with its state (READY, UNAVAILABLE, LOADING) and reason; and every
        version of every model of the model repository (``--model_repository``), loaded or not."""
        entries = await self._model_registry.index()
        repository = self.repository
        if repository is None:
            return entries
        return [entry for entry in entries if not repository.knows(entry["name"])] + repository.index()

    # --- the model repository (--model_repository) ----------------------------------------------------------
    def open_repository(self, options: RepositoryOptions) -> None:
        """Serve the model repository ``options`` describe beside the registered models (which keep their
        names): it is read now, its problems logged once, before workers fork; :meth:`start_repository` loads
        it on each worker's event loop. RepositoryError when it cannot be read."""
        hooks = ServingHooks(self._serve_version, self._withdraw_version, self._warm_up_version, self._forget_name)
        self.repository = RepositoryManager.open(options, hooks, self._model_registry.get_models())

    @staticmethod
    def _forget_name(name: str) -> None:
        """A repository model none of whose versions is loaded: its metric series and statistics let go of
        their memory (the files keep the counts)."""
        metrics.forget_model(name)
        statistics.forget_model(name)

    def start_repository(self) -> None:
        """Begin loading the model repository's models as its control mode says (on the running loop)."""
        if self.repository is not None:
            self.repository.start()

    def _serve_version(self, name: str, version: str, model: Any, default: bool) -> None:
        key = f"{name}/{version}" if version else name
        try:
            self.scheduler.policy_of(key, model)
        except (ValueError, TypeError) as e:
            raise ValueError(f"its scheduling policy is wrong: {e}") from None
        model.enable_latency_logging = self.enable_latency_logging
        self._queue_keys[id(model)] = key
        self._model_registry.add_version(name, version, model, default)

    def _withdraw_version(self, name: str, version: str, model: Any) -> None:
        key = self._queue_keys.pop(id(model), name)
        if self._model_registry.remove_version(name, version, model):
            self.scheduler.forget(key, ModelNotReady(name, "It is being unloaded."))

    async def _warm_up_version(self, name: str, model: Any) -> Optional[str]:
        version = getattr(model, "version", "")
        self._queue_keys[id(model)] = f"{name}/{version}" if version else name
        return await warm_up(_VersionWarmup(self, model), name, model)  # type: ignore[arg-type]  # what it uses

    async def load(self, name: str, parameters: Optional[Mapping[str, Any]] = None) -> None:
        """Load a model through the repository's ``load(name)`` (sync ones run in the thread pool), in
        this worker and then in every other.

        ``parameters`` are the load request's (Triton's): ``config``, a model configuration as JSON, whose
        ``max_batch_size``, ``dynamic_batching`` (queue delay, priorities, default queue policy) and
        ``instance_group`` count are applied over the model's own settings (a load without it puts them
        back); ``file:`` parameters are refused; others are ignored. A bad one is InvalidInput, and nothing
        changes.

        A repository whose ``load`` returns False serves again the model it unloaded under that name, or
        leaves the served one in place; for a name it has no model for, the load is ModelNotFound. A load
        that raises leaves the model UNAVAILABLE with the error as reason and is answered as an
        InferenceError. Other models are unaffected.
        """
        check_model_name(name)
        config = (parameters or {}).get("config")
        if config is not None and self._repository_of(name) is not None:
            raise repository_config_refused(name)
        self._override(name, parameters)  # file: parameters and a config that is not a string are refused here
        await self.load_here(name, config)
        if self.share_change is not None:
            await self.share_change("load", name, {} if config is None else {"config": config})

    async def unload(self, name: str, timeout: float = 60.0) -> None:
        """Unload a model here and then in every other worker (see :meth:`unload_here`)."""
        await self.unload_here(name, timeout)
        if self.share_change is not None:
            await self.share_change("unload", name, {})

    async def load_here(self, name: str, config: Optional[str] = None) -> None:
        """Load a model in this process only (``config``: the load's config override, as JSON), then run the
        warm-up requests of a model new or loaded again, or whose warm-up failed (it is ready once they pass; a
        failing one fails the load, and the model stays registered, not ready, with the failure as reason)."""
        if await self._load_from_repository(name, config):
            return
        override = self._override(name, None if config is None else {"config": config})
        registry = self._model_registry
        served, state = registry.get_model(name), registry.states.get(name)
        registry.states[name] = ("LOADING", "")
        try:
            loaded = await _run_maybe_sync(registry.load, name) or served is not None or await self._load_again(name)
        except Exception as e:
            registry.states[name] = ("UNAVAILABLE", f"{type(e).__name__}: {e}")
            raise InferenceError(f"failed to load model '{name}': {type(e).__name__}: {e}") from None
        if not loaded:
            registry.states.pop(name, None)
            if state is not None:
                registry.states[name] = state
            raise not_in_repository(self.unknown_model(name))
        registry.states.pop(name, None)
        model = registry.get_model(name)
        if model is None:
            return
        if registry.configure(name, model, override, self.scheduler.defaults):
            self.scheduler.forget(name, ModelNotReady(name, "Its configuration changed while the call waited; "
                                                            "retry."))
        self._check_policy(name, model)
        # a model new or loaded again warms up; one left in place only when its warm-up failed before
        again = model is not served or (name in registry.warmups and not registry.warming_up(name))
        failure = await warm_up(self, name, model) if again else None
        if failure is not None:
            raise InferenceError(f"failed to load model '{name}': {failure}")

    async def _load_from_repository(self, name: str, config: Optional[str]) -> bool:
        """Load ``name`` from the model repository's folder when it holds it (and no model of the server's own
        code has that name); whether it did."""
        repository, registry = self.repository, self._model_registry
        if repository is None:
            return False
        if not repository.knows(name) and (registry.get_model(name) is not None or name in registry.unloaded
                                           or name in registry.states):
            return False
        if config is not None:
            raise repository_config_refused(name)
        return await repository.load(name)

    def _override(self, name: str, parameters: Optional[Mapping[str, Any]]) -> Optional[ConfigOverride]:
        """The config override of a load's ``parameters``, checked against the model it would change (the one
        served or unloaded as ``name``); InvalidInput names what is wrong, before anything changes."""
        registry = self._model_registry
        try:
            override = config_override(parameters)
            model = registry.get_model(name) or registry.unloaded_model(name)
            if override is not None and model is not None:
                registry.configured(name, model, override, self.scheduler.defaults)
        except InvalidInput as e:
            raise InvalidInput(f"failed to load model '{name}': {e}") from None
        return override

    async def _load_again(self, name: str) -> bool:
        """Serve again the model unloaded as ``name``, as the server first served it: its ``load()`` (in the
        thread pool when plain), ``start()`` and engine. False when no model was unloaded under that name."""
        model: Any = self._model_registry.unloaded_model(name)
        if model is None:
            return False
        await _run_maybe_sync(model.load)
        if not getattr(model, "ready", True):
            raise RuntimeError(f"model '{name}' is not ready after its load()")
        model.start()
        if model.engine:
            await model.start_engine()
        self._model_registry.update(model, name)
        return True

    def _check_policy(self, name: str, model: Any) -> None:
        """A loaded model's scheduling policy must hold together: else the model is unloaded again, UNAVAILABLE
        in the index with the fault as reason, and the load fails naming it."""
        try:
            self.scheduler.policy_of(name, model)
        except (ValueError, TypeError) as e:
            reason = f"its scheduling policy is wrong: {e}"
            self._model_registry.unload(name)
            self._model_registry.states[name] = ("UNAVAILABLE", reason)
            raise InvalidInput(f"failed to load model '{name}': {reason}") from None

    async def unload_here(self, name: str, timeout: float = 60.0) -> None:
        """Stop a model in this process once its calls in flight have finished (up to ``timeout`` s); new
        calls to it are refused meanwhile. It stays in the index, UNAVAILABLE (``unloaded``), until a load
        serves it again. A model the repository knows but does not serve (unloaded already, loading, failed
        to load) is left as it is; a name it never knew is ModelNotFound. Every version of a model of the model
        repository is unloaded, each once its calls have ended."""
        repository = self._repository_of(name)
        if repository is not None:
            await repository.unload(name)
            return
        if self._model_registry.state_of(name) is not None:
            return
        self.get_model_from_registry(name)
        self._unloading.add(name)
        self.scheduler.forget(name, ModelNotReady(name, "It is being unloaded."))
        try:
            deadline = time.monotonic() + timeout
            while self._model_calls.get(name, 0) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            self._model_registry.unload(name)
        finally:
            self._unloading.discard(name)

    def on_change(self, op: str, apply: Callable[[str, Dict[str, Any]], Any]) -> None:
        """Apply the changes ``op`` that other workers share (``share_change(op, name, args)``) by calling
        ``apply(name, args)`` here; it may be a coroutine function. When the workers' control directory is
        compacted, only the last change of each (``op``, name) is kept (server/workers.py): a worker that
        starts later applies that one alone, so a change must carry the whole state it sets."""
        self._change_appliers[op] = apply

    async def apply_change(self, op: str, name: str, args: Dict[str, Any]) -> None:
        """Apply a change another worker made (see ``share_change``) in this process; an op nothing
        registered is ignored."""
        apply = self._change_appliers.get(op)
        if apply is not None:
            await _maybe_await(apply(name, args))

    # --- system shared memory -----------------------------------------------------------------------
    async def register_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes at ``offset`` of shared-memory object ``key`` as region ``name``,
        in every worker."""
        self.shared_memory.register(name, key, offset, byte_size)
        if self.share_change is not None:
            await self.share_change("shm_register", name, {"key": key, "offset": offset, "byte_size": byte_size})

    async def unregister_shared_memory(self, name: str = "") -> None:
        """Forget region ``name`` (all regions when empty), in every worker."""
        self.shared_memory.unregister(name)
        if self.share_change is not None:
            await self.share_change("shm_unregister", name, {})

    def shared_memory_status(self, name: str = "") -> List[Dict[str, Any]]:
        """The registered regions (only ``name`` when given): name, key, offset, byte_size."""
        return self.shared_memory.status(name)


async def _predictor_ready(config: Any, model_name: Optional[str]) -> bool:
    """True unless ``config`` asks for the predictor's health (``--enable_predictor_health_check`` on a
    transformer) and the predictor (its model ``model_name``, or the server when None) is not ready."""
    if config is None or not config.predictor_health_check or not config.predictor_host:
        return True
    from .clients.forward import predictor_ready  # a transformer's clients load only when it asks

    return await predictor_ready(config, model_name)
