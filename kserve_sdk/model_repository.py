"""Name -> model: the models a server answers for, their readiness, load and unload."""
import inspect
from typing import Dict, List, Optional, Tuple

from .constants.constants import MODEL_MOUNT_DIRS
from .errors import ModelNotFound
from .model import BaseKServeModel
from .scheduling.warmup import declared_warmups

#: The index's reason for a model whose warm-up requests are running (kserve_sdk/scheduling/warmup.py).
WARMING_UP = "the model is warming up"


class ModelRepository:
    """The models a server serves, by name (KServe's ``ModelRepository``).

    Subclass it and override ``load(name)`` to load models on demand from ``models_dir``.
    """

    #: Bumped by ``update`` and ``unload``: what a cache of facts about the served models compares.
    generation = 0

    def __init__(self, models_dir: str = MODEL_MOUNT_DIRS):
        self.models: Dict[str, BaseKServeModel] = {}
        self.models_dir = models_dir
        # name -> (state, reason) of models that are loading or failed to load (not in self.models)
        self.states: Dict[str, Tuple[str, str]] = {}
        # name -> why a registered model declaring warm-up requests is not ready yet: WARMING_UP, or how its
        # warm-up failed. It leaves once the warm-up has passed.
        self.warmups: Dict[str, str] = {}

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
        if warmups:
            self.warmups[name] = WARMING_UP
        else:
            self.warmups.pop(name, None)
        self.generation += 1

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
        """Stop and remove the named model. Raises ModelNotFound if there is none."""
        model = self.models.pop(name, None)
        if model is None:
            raise ModelNotFound(name)
        self.warmups.pop(name, None)
        self.generation += 1
        model.stop()
        if model.engine:
            model.stop_engine()
