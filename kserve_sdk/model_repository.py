"""Name -> model: the models a server answers for, their readiness, load and unload."""
import inspect
from typing import Dict, List, Optional, Tuple

from .constants.constants import MODEL_MOUNT_DIRS
from .errors import ModelNotFound
from .model import BaseKServeModel


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
        """Whether the named model is registered and healthy."""
        model = self.models.get(name)
        if model is None:
            return False
        healthy = model.healthy()
        return bool(await healthy if inspect.isawaitable(healthy) else healthy)

    def update(self, model: BaseKServeModel, name: Optional[str] = None) -> None:
        """Register ``model`` under ``name`` (default: its own name), replacing any model of that name."""
        self.models[name or model.name] = model
        self.states.pop(name or model.name, None)
        self.generation += 1

    async def index(self) -> List[Dict[str, str]]:
        """Every model known to the repository: ``{"name", "state", "reason"?}``, state READY,
        UNAVAILABLE or LOADING."""
        entries = []
        for name in self.models:
            ready = await self.is_model_ready(name)
            entries.append({"name": name, "state": "READY"} if ready
                           else {"name": name, "state": "UNAVAILABLE", "reason": "the model is not ready"})
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
        self.generation += 1
        model.stop()
        if model.engine:
            model.stop_engine()
