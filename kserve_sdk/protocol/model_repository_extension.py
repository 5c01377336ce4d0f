"""KServe's ``ModelRepositoryExtension``: list, load and unload the models of a ``ModelRepository``.

The server answers the v2 repository routes through its data plane (which also spreads a load or unload
to every worker); this class is for code written against KServe's import path
``kserve.protocol.model_repository_extension``, with KServe's method names and answers.
"""
import inspect
from typing import TYPE_CHECKING, Dict, List, Optional

from ..errors import ModelNotFound, ModelNotReady

if TYPE_CHECKING:  # only named here: this package is the wire vocabulary, below the model layer
    from ..model_repository import ModelRepository


class ModelRepositoryExtension:
    """The v2 model repository extension over ``model_registry``, in this process."""

    def __init__(self, model_registry: "ModelRepository"):
        self._model_registry = model_registry

    async def index(self, filter_ready: Optional[bool] = False) -> List[Dict[str, str]]:
        """Every registered model as ``{"name", "state": "Ready" | "NotReady", "reason": ""}``; with
        ``filter_ready`` only the ready ones."""
        entries = []
        for name in list(self._model_registry.get_models()):
            ready = await self._model_registry.is_model_ready(name)
            if ready or not filter_ready:
                entries.append({"name": name, "state": "Ready" if ready else "NotReady", "reason": ""})
        return entries

    async def load(self, model_name: str) -> None:
        """Load the named model through the repository's ``load`` (sync or async). Raises ModelNotReady
        when loading fails or the model is not ready afterwards."""
        try:
            loaded = self._model_registry.load(model_name)
            if inspect.isawaitable(loaded):
                await loaded
        except Exception as e:
            raise ModelNotReady(model_name, f"Error type: {type(e).__name__} error msg: {e}") from e
        if not await self._model_registry.is_model_ready(model_name):
            raise ModelNotReady(model_name)

    async def unload(self, model_name: str) -> None:
        """Stop and remove the named model. Raises ModelNotFound when there is none."""
        try:
            self._model_registry.unload(model_name)
        except KeyError:
            raise ModelNotFound(model_name) from None
