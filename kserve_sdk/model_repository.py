"""Name -> model: the models a server answers for, their readiness, load and unload.

An unloaded model does not vanish: the index lists it UNAVAILABLE with the reason ``unloaded`` (as Triton
does), and the repository keeps the model object so that a later load serves it again.

A model of a model repository (``--model_repository``, kserve_sdk/repository/) may serve several versions
side by side: each is its own model object in ``versions``, and the one of its highest version is also the
name's model, which answers a request naming no version."""
import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from .constants.constants import MODEL_MOUNT_DIRS
from .errors import InvalidInput, ModelNotFound
from .model import BaseKServeModel
from .scheduling.policy import SchedulingPolicy
from .scheduling.warmup import declared_warmups

if TYPE_CHECKING:
    from .protocol.model_repository_extension import ConfigOverride

#: The index's reason for a model whose warm-up requests are running (kserve_sdk/scheduling/warmup.py).
WARMING_UP = "the model is warming up"
#: The index's reason for a model unloaded through the repository API (Triton's word).
UNLOADED = "unloaded"
#: The model attributes a load's config override sets, and a load without one puts back.
CONFIGURED = ("max_batch_size", "max_latency_ms", "scheduling")


class ModelRepository:
    """The models a server serves, by name (KServe's ``ModelRepository``).

    Subclass it and override ``load(name)`` to load models on demand from ``models_dir``.
    """

    #: Bumped by ``update`` and ``unload``: what a cache of facts about the served models compares.
    generation = 0

    def __init__(self, models_dir: str = MODEL_MOUNT_DIRS):
        self.models: Dict[str, BaseKServeModel] = {}
        self.models_dir = models_dir
        # name -> (state, reason) of models that are loading, failed to load or were unloaded (not in self.models)
        self.states: Dict[str, Tuple[str, str]] = {}
        # name -> a model unloaded through the repository API, kept so that a load of that name serves it again
        self.unloaded: Dict[str, BaseKServeModel] = {}
        # name -> (model, its own CONFIGURED attributes) of a model a load's config override changed
        self._own_settings: Dict[str, Tuple[BaseKServeModel, Dict[str, Any]]] = {}
        # name -> why a registered model declaring warm-up requests is not ready yet: WARMING_UP, or how its
        # warm-up failed. It leaves once the warm-up has passed.
        self.warmups: Dict[str, str] = {}
        #: name -> version -> model, for the versions of a repository model served side by side (a repository
        #: model without versions is in ``models`` only).
        self.versions: Dict[str, Dict[str, BaseKServeModel]] = {}

    def load_models(self) -> None:
        """Load every model found under ``models_dir`` (override in a subclass; none by default)."""

    def set_models_dir(self, models_dir: str) -> None:
        """Change the directory models are loaded from."""
        self.models_dir = models_dir

    def get_model(self, name: str) -> Optional[BaseKServeModel]:
        """The model registered under ``name``, or None."""
        return self.models.get(name)

    def get_models(self) -> Dict[str, BaseKServeModel]:
        """All registered models by name."""
        return self.models

    async def is_model_ready(self, name: str) -> bool:
        """Whether the named model is registered, warmed up (when it declares warm-up requests) and healthy."""
        model = self.models.get(name)
        if model is None or name in self.warmups:
            return False
        healthy = model.healthy()
        return bool(await healthy if inspect.isawaitable(healthy) else healthy)

    def update(self, model: BaseKServeModel, name: Optional[str] = None) -> None:
        """Register ``model`` under ``name`` (default: its own name), replacing any model of that name.

        A model that declares warm-up requests (``model.warmup``) is not ready until the server has run
        them; a wrong entry there is a ValueError naming it, and the model is not registered."""
        name = name or model.name
        warmups = declared_warmups(model, name)
        self.models[name] = model
        self.states.pop(name, None)
        self.unloaded.pop(name, None)
        if warmups:
            self.warmups[name] = WARMING_UP
        else:
            self.warmups.pop(name, None)
        self.generation += 1

    def add_version(self, name: str, version: str, model: BaseKServeModel, default: bool) -> None:
        """Serve ``model`` as ``version`` of the repository model ``name`` (``""``: a model without versions),
        replacing the object served as that version; ``default``: it also answers requests naming no
        version. Its warm-up has run already: it is ready."""
        if version:
            self.versions.setdefault(name, {})[version] = model
        if default:
            self.models[name] = model
        self.states.pop(name, None)
        self.unloaded.pop(name, None)
        self.generation += 1

    def remove_version(self, name: str, version: str, model: BaseKServeModel) -> bool:
        """Stop serving ``model`` as ``version`` of ``name`` (nothing happens when another object serves it
        now); whether it was served. The caller stops the model."""
        served = self.versions.get(name)
        removed = served is not None and served.get(version) is model
        if removed:
            del served[version]  # type: ignore[union-attr]  # removed: served is a dict
            if not served:
                del self.versions[name]
        if self.models.get(name) is model:
            del self.models[name]
            removed = True
        self.generation += 1
        return removed

    def state_of(self, name: str) -> Optional[Tuple[str, str]]:
        """(state, reason) of a name the repository knows but does not serve (unloaded, loading, failed to
        load); None for a served model or a name it never knew."""
        return None if name in self.models else self.states.get(name)

    def unloaded_model(self, name: str) -> Optional[BaseKServeModel]:
        """The model unloaded under ``name`` and kept for a later load, or None."""
        return self.unloaded.get(name)

    def configured(self, name: str, model: BaseKServeModel, override: "ConfigOverride",
                   defaults: SchedulingPolicy) -> Dict[str, Any]:
        """The CONFIGURED attributes ``model`` (served or unloaded as ``name``) takes under a load's config
        ``override``, applied over the model's own (not over an earlier override); InvalidInput when they do not
        hold together (its scheduling policy over the server's ``defaults``) or the override names another model."""
        if override.name is not None and override.name != name:
            raise InvalidInput(f"invalid config override: it names model '{override.name}', not '{name}'")
        settings = dict(self._own(name, model))
        if override.max_batch_size is not None:
            settings["max_batch_size"] = override.max_batch_size
        if override.max_queue_delay_microseconds is not None:
            settings["max_latency_ms"] = override.max_queue_delay_microseconds / 1000
        if override.scheduling:
            try:
                policy = dataclasses.replace(_policy(name, settings.get("scheduling")), **override.scheduling)
                policy.over(defaults)
            except (TypeError, ValueError) as e:
                raise InvalidInput(f"invalid config override: {e}") from None
            settings["scheduling"] = policy
        return settings

    def configure(self, name: str, model: BaseKServeModel, override: Optional["ConfigOverride"],
                  defaults: SchedulingPolicy) -> bool:
        """Apply a load's config ``override`` to ``model``, served as ``name`` (see :meth:`configured`); None
        puts back the model's own settings if an earlier override changed them. Whether anything changed."""
        kept = self._own_settings.get(name)
        if kept is not None and kept[0] is not model:  # another model object now: its own settings stand
            del self._own_settings[name]
            kept = None
        if override is None and kept is None:
            return False
        if override is None:
            settings = self._own_settings.pop(name)[1]
        else:
            settings = self.configured(name, model, override, defaults)
            self._own_settings[name] = (model, self._own(name, model))
        for attr in CONFIGURED:
            if attr in settings:
                setattr(model, attr, settings[attr])
            else:  # the model had no such attribute of its own
                getattr(model, "__dict__", {}).pop(attr, None)
        batching_changed = getattr(model, "batching_changed", None)
        if batching_changed is not None:  # Model's batcher took its size and wait when made
            batching_changed()
        return True

    def _own(self, name: str, model: BaseKServeModel) -> Dict[str, Any]:
        """The CONFIGURED attributes ``model`` has of its own (those before any config override)."""
        kept = self._own_settings.get(name)
        if kept is not None and kept[0] is model:
            return kept[1]
        return {attr: getattr(model, attr) for attr in CONFIGURED if hasattr(model, attr)}

    def warming_up(self, name: str) -> bool:
        """Whether the named model waits for its warm-up requests to run."""
        return self.warmups.get(name) == WARMING_UP

    def begin_warmup(self, name: str, model: BaseKServeModel) -> None:
        """The warm-up of ``model``, registered as ``name``, begins: it is not ready until it ends."""
        if self.models.get(name) is model:
            self.warmups[name] = WARMING_UP

    def end_warmup(self, name: str, model: BaseKServeModel, failure: Optional[str]) -> None:
        """The warm-up of ``model`` has passed (``failure`` None) or failed (``failure``: why, the index's
        reason). Nothing changes when another model has been registered under ``name`` meanwhile."""
        if self.models.get(name) is not model:
            return
        if failure is None:
            self.warmups.pop(name, None)
        else:
            self.warmups[name] = failure

    async def index(self) -> List[Dict[str, str]]:
        """Every model known to the repository: ``{"name", "state", "reason"?}``, state READY,
        UNAVAILABLE or LOADING (also while its warm-up runs)."""
        entries = []
        for name in self.models:
            warmup = self.warmups.get(name)
            if warmup is not None:
                entries.append({"name": name, "state": "LOADING" if warmup == WARMING_UP else "UNAVAILABLE",
                                "reason": warmup})
            elif await self.is_model_ready(name):
                entries.append({"name": name, "state": "READY"})
            else:
                entries.append({"name": name, "state": "UNAVAILABLE", "reason": "the model is not ready"})
        for name, (state, reason) in self.states.items():
            if name not in self.models:
                entries.append({"name": name, "state": state, **({"reason": reason} if reason else {})})
        return entries

    def load(self, name: str) -> bool:
        """Load the named model on demand; the base repository cannot, so it returns False."""
        return False

    def load_model(self, name: str) -> bool:
        """KServe's alias of ``load``."""
        return self.load(name)

    def unload(self, name: str) -> None:
        """Stop the named model and take it out of service: the index lists it UNAVAILABLE, ``unloaded``,
        and the model object is kept for a later load (see :meth:`unloaded_model`). Raises ModelNotFound
        if no model of that name is served."""
        model = self.models.pop(name, None)
        if model is None:
            raise ModelNotFound(name)
        for other in self.versions.pop(name, {}).values():  # a repository model's other versions
            if other is not model:
                other.stop()
        self.warmups.pop(name, None)
        self.states[name] = ("UNAVAILABLE", UNLOADED)
        self.unloaded[name] = model
        self.generation += 1
        model.stop()
        if model.engine:
            model.stop_engine()


def _policy(name: str, scheduling: Any) -> SchedulingPolicy:
    """A model's ``scheduling`` attribute (None, a SchedulingPolicy or a dict of its fields) as a policy."""
    if scheduling is None:
        return SchedulingPolicy()
    if isinstance(scheduling, Mapping):
        return SchedulingPolicy.from_mapping(scheduling, f"model '{name}' scheduling")
    if not isinstance(scheduling, SchedulingPolicy):
        raise TypeError(f"model '{name}': scheduling must be a kserve_sdk.SchedulingPolicy or a dict, "
                        f"not {type(scheduling).__name__}")
    return scheduling
