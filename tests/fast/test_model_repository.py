"""model_repository.py: models registered by name, looked up, listed with their state, unloaded."""
import asyncio

import pytest

from kserve_sdk.errors import ModelNotFound
from kserve_sdk.model import Model
from kserve_sdk.model_repository import ModelRepository


class Engine(Model):
    """A model with an engine, noting when it is stopped."""

    def __init__(self, name):
        super().__init__(name)
        self.engine, self.stopped = True, []

    def stop_engine(self):
        self.stopped.append("engine")


def test_a_model_is_registered_under_its_name_or_another():
    repository = ModelRepository()
    a, b = Model("a"), Model("b")
    repository.update(a)
    repository.update(b, name="alias")
    assert repository.get_model("a") is a and repository.get_model("alias") is b
    assert repository.get_model("b") is None and repository.get_models() == {"a": a, "alias": b}


def test_registering_replaces_a_model_of_the_same_name_and_its_loading_state():
    repository = ModelRepository()
    repository.states["a"] = ("LOADING", "")
    first, second = Model("a"), Model("a")
    repository.update(first)
    repository.update(second)
    assert repository.get_model("a") is second and "a" not in repository.states


def test_readiness_follows_the_models_health():
    repository = ModelRepository()
    model = Model("a")
    repository.update(model)
    assert asyncio.run(repository.is_model_ready("a")) is False
    model.load()
    assert asyncio.run(repository.is_model_ready("a")) is True
    assert asyncio.run(repository.is_model_ready("nope")) is False


def test_the_index_lists_every_model_and_state():
    repository = ModelRepository()
    ready, idle = Model("ready"), Model("idle")
    ready.load()
    repository.update(ready)
    repository.update(idle)
    repository.states.update({"coming": ("LOADING", ""), "broken": ("UNAVAILABLE", "no file")})
    assert asyncio.run(repository.index()) == [
        {"name": "ready", "state": "READY"},
        {"name": "idle", "state": "UNAVAILABLE", "reason": "the model is not ready"},
        {"name": "coming", "state": "LOADING"},
        {"name": "broken", "state": "UNAVAILABLE", "reason": "no file"},
    ]


def test_unload_stops_and_removes_the_model():
    repository = ModelRepository()
    model = Engine("e")
    model.load()
    repository.update(model)
    repository.unload("e")
    assert repository.get_model("e") is None and model.ready is False and model.stopped == ["engine"]
    with pytest.raises(ModelNotFound, match="Model with name e does not exist."):
        repository.unload("e")


def test_the_base_repository_loads_nothing_on_demand():
    repository = ModelRepository("/somewhere")
    assert repository.models_dir == "/somewhere"
    repository.set_models_dir("/elsewhere")
    assert repository.models_dir == "/elsewhere"
    assert repository.load("x") is False and repository.load_model("x") is False
    assert ModelRepository().models_dir == "/mnt/models"
