"""Model states in the data plane, in process: an unloaded model kept, listed UNAVAILABLE and served again by a
load; the unknown-model and version errors; a load's config override read (protocol/model_repository_extension.py),
checked, applied over the model's own settings and put back; the changes other workers replay."""
import asyncio
from typing import Any

import pytest

from kserve_sdk import SchedulingPolicy
from kserve_sdk.dataplane import DataPlane, served_version
from kserve_sdk.errors import InvalidInput, ModelNotFound, ModelUnavailable, ModelVersionNotFound
from kserve_sdk.model import InferenceModel, Model
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.protocol.model_repository_extension import ConfigOverride, config_override


class Counted(Model):
    """Counts its load() and start() calls."""

    def __init__(self, name: str, **kwargs: Any):
        super().__init__(name, **kwargs)
        self.loads = self.starts = 0
        self.load()

    def load(self) -> bool:
        self.loads += 1
        self.ready = True
        return True

    def start(self) -> None:
        self.starts += 1

    def predict(self, payload, headers=None):
        return {"predictions": [self.loads]}


def plane(*models: Any) -> DataPlane:
    repository = ModelRepository()
    for model in models:
        repository.update(model)
    return DataPlane(repository, enable_latency_logging=False)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# --- unload and load again ----------------------------------------------------------------------------------------
def test_an_unloaded_model_is_kept_listed_and_served_again_by_a_load():
    model = Counted("m")
    dataplane = plane(model)
    run(dataplane.unload("m"))
    assert run(dataplane.repository_index()) == [{"name": "m", "state": "UNAVAILABLE", "reason": "unloaded"}]
    assert run(dataplane.model_ready("m")) is False and model.ready is False
    with pytest.raises(ModelUnavailable) as caught:
        dataplane.get_model_from_registry("m")
    assert str(caught.value) == ("Request for unknown model: 'm' has no available versions. Model m was unloaded: "
                                 "load it again (POST /v2/repository/models/m/load) to serve it.")
    assert caught.value.http_status == 404 and caught.value.grpc_code == "NOT_FOUND"
    run(dataplane.unload("m"))  # unloading it again changes nothing
    run(dataplane.load("m"))
    assert dataplane.get_model_from_registry("m") is model and (model.loads, model.starts) == (2, 1)
    assert run(dataplane.model_ready("m")) is True
    assert run(dataplane.repository_index()) == [{"name": "m", "state": "READY"}]


def test_a_model_whose_load_fails_again_stays_unavailable_with_the_reason():
    class Fragile(Counted):
        def load(self) -> bool:
            if self.loads:
                raise OSError("the weights are gone")
            return super().load()

    dataplane = plane(Fragile("m"))
    run(dataplane.unload("m"))
    with pytest.raises(Exception, match="failed to load model 'm': OSError: the weights are gone"):
        run(dataplane.load("m"))
    assert run(dataplane.repository_index()) == [
        {"name": "m", "state": "UNAVAILABLE", "reason": "OSError: the weights are gone"}]
    with pytest.raises(ModelUnavailable, match="Model m is UNAVAILABLE: OSError: the weights are gone"):
        dataplane.get_model_from_registry("m")


def test_a_load_of_a_served_model_leaves_it_in_place():
    model = Counted("m")
    dataplane = plane(model)
    run(dataplane.load("m"))
    assert dataplane.get_model_from_registry("m") is model and model.loads == 1


def test_a_name_never_known_stays_unknown():
    dataplane = plane(Counted("m"))
    message = "Request for unknown model: 'nope' is not found. Model with name nope does not exist. Models served: m."
    for call in (dataplane.model_ready("nope"), dataplane.unload("nope"), dataplane.ready_model("nope")):
        with pytest.raises(ModelNotFound) as caught:
            run(call)
        assert str(caught.value) == message
    with pytest.raises(ModelNotFound) as caught:
        run(dataplane.load("nope"))
    assert str(caught.value) == f"failed to load model 'nope': {message}"
    assert run(dataplane.repository_index()) == [{"name": "m", "state": "READY"}]


# --- versions ----------------------------------------------------------------------------------------------------
def test_the_version_served_is_the_models_own_or_one():
    versioned = Counted("v")
    versioned.version = 3  # type: ignore[attr-defined]
    assert (served_version(Counted("m")), served_version(versioned)) == ("1", "3")


@pytest.mark.parametrize("version,served", [(None, True), ("", True), ("1", True), ("01", True), ("2", False),
                                            ("abc", False), ("1.0", False)])
def test_a_model_without_a_version_serves_none_and_one(version, served):
    dataplane = plane(Counted("m"))
    if served:
        assert run(dataplane.model_ready("m", version)) is True
    else:
        with pytest.raises(ModelVersionNotFound, match=f"Model 'm' has no version '{version}'; versions served: 1."):
            run(dataplane.model_ready("m", version))


def test_a_version_error_uses_tritons_words_for_numbers_and_for_the_rest():
    assert str(ModelVersionNotFound("m", "7", "1")) == (
        "Request for unknown model: 'm' version 7 is not found. Model 'm' has no version '7'; versions served: 1.")
    assert str(ModelVersionNotFound("m", "x", "2")).startswith(
        "failed to get model version from specified version string 'x': it is not a number.")


# --- the config override ---------------------------------------------------------------------------------------
def test_the_config_override_reads_tritons_fields():
    override = config_override({"config": '{"max_batch_size": "16", "dynamic_batching": {"priority_levels": 2, '
                                          '"default_priority_level": "1", "max_queue_delay_microseconds": 2000, '
                                          '"default_queue_policy": {"timeout_action": 1, "max_queue_size": 5, '
                                          '"allow_timeout_override": false, "default_timeout_microseconds": 7}}, '
                                          '"instance_group": [{"name": "g", "kind": "KIND_CPU"}], "name": "m", '
                                          '"input": [], "backend": "python"}', "other": True})
    assert override == ConfigOverride("m", 16, 2000, {
        "priority_levels": 2, "default_priority_level": 1, "default_timeout_microseconds": 7, "max_queue_size": 5,
        "timeout_action": "DELAY", "allow_timeout_override": False, "instance_count": 1})
    assert config_override({"other": "ignored"}) is None and config_override(None) is None


@pytest.mark.parametrize("parameters,message", [
    ({"file:1/model.onnx": b"x"}, "file: overrides are not supported"),
    ({"config": b"{}"}, "the load parameter 'config' must be a string holding the model configuration as JSON, "
                        "got bytes"),
    ({"config": "{"}, "invalid config override: it is not JSON"),
    ({"config": '{"max_batch_size": true}'}, "max_batch_size must be an integer from 0 to 2147483647, got True"),
    ({"config": '{"max_batch_size": 2147483648}'}, "max_batch_size must be an integer from 0 to 2147483647"),
    ({"config": '{"dynamic_batching": []}'}, "invalid config override: dynamic_batching must be a JSON object, "
                                             "got a list"),
    ({"config": '{"dynamic_batching": {"default_queue_policy": {"max_queue_size": 4294967296}}}'},
     "dynamic_batching.default_queue_policy.max_queue_size must be an integer from 0 to 4294967295"),
    ({"config": '{"instance_group": {"count": 1}}'}, "invalid config override: instance_group must be a list"),
    ({"config": '{"instance_group": [{"count": 0}]}'}, "instance_group[0].count must be 1 or more, got 0"),
    ({"config": '{"instance_group": [{"gpus": [0]}]}'}, "instance_group[0].gpus cannot be applied by this server; "
                                                        "instance_group[0] takes name, kind, count"),
    ({"config": '{"name": 5}'}, "invalid config override: name must be a string, got 5"),
    ({"config": '{"output": {}}'}, "invalid config override: output must be a list"),
])
def test_a_bad_load_parameter_is_refused_naming_it(parameters, message):
    with pytest.raises(InvalidInput) as caught:
        config_override(parameters)
    assert message in str(caught.value)


def test_an_override_applies_over_the_models_own_settings_and_a_plain_load_puts_them_back():
    model = Counted("m", max_batch_size=8)
    model.scheduling = SchedulingPolicy(instance_count=1, max_queue_size=3)
    dataplane = plane(model)
    run(dataplane.load("m", {"config": '{"max_batch_size": 4, "dynamic_batching": {"priority_levels": 2}}'}))
    assert model.max_batch_size == 4
    assert model.scheduling == SchedulingPolicy(instance_count=1, max_queue_size=3, priority_levels=2)
    assert dataplane.scheduler.policy_of("m", model).priority_levels == 2
    # a second override starts again from the model's own settings, not from the first override
    run(dataplane.load("m", {"config": '{"dynamic_batching": {"default_queue_policy": {"max_queue_size": 9}}}'}))
    assert model.max_batch_size == 8 and model.scheduling == SchedulingPolicy(instance_count=1, max_queue_size=9)
    run(dataplane.load("m"))
    assert model.max_batch_size == 8 and model.scheduling == SchedulingPolicy(instance_count=1, max_queue_size=3)
    assert model.max_latency_ms == 10.0


def test_a_plain_load_takes_away_the_attributes_an_override_gave_a_model_without_them():
    class Bare(InferenceModel):
        def __init__(self, name: str):
            super().__init__(name)
            self.ready = True

        async def __call__(self, body, headers=None, verb=None):
            return body, {}

    model = Bare("m")
    dataplane = plane(model)
    run(dataplane.load("m", {"config": '{"max_batch_size": 4, "instance_group": [{"count": 2}]}'}))
    assert model.max_batch_size == 4 and model.scheduling == SchedulingPolicy(instance_count=2)
    assert run(dataplane.model_config("m"))["instance_group"][0]["count"] == 2
    run(dataplane.load("m"))
    assert not hasattr(model, "max_batch_size") and not hasattr(model, "scheduling")
    assert "instance_group" not in run(dataplane.model_config("m"))


def test_a_bad_override_changes_nothing():
    model = Counted("m", max_batch_size=8)
    dataplane = plane(model)
    with pytest.raises(InvalidInput) as caught:
        run(dataplane.load("m", {"config": '{"max_batch_size": 2, "dynamic_batching": {"priority_levels": 1, '
                                           '"default_priority_level": 2}}'}))
    assert str(caught.value) == ("failed to load model 'm': invalid config override: default_priority_level 2 is "
                                 "above priority_levels 1")
    assert model.max_batch_size == 8 and getattr(model, "scheduling", None) is None and model.loads == 1


def test_an_override_reaches_an_unloaded_model_when_it_is_loaded_again():
    model = Counted("m")
    dataplane = plane(model)
    run(dataplane.unload("m"))
    run(dataplane.load("m", {"config": '{"max_batch_size": 6}'}))
    assert dataplane.get_model_from_registry("m") is model and model.max_batch_size == 6


# --- what other workers replay ---------------------------------------------------------------------------------
def test_other_workers_replay_an_unload_and_a_load_with_its_override():
    origin, replica = plane(Counted("m")), plane(Counted("m"))
    shared = []

    async def share(op, name, args):
        shared.append((op, name, args))

    origin.share_change = share
    run(origin.unload("m"))
    run(origin.load("m", {"config": '{"max_batch_size": 5}', "ignored": 1}))
    assert shared == [("unload", "m", {}), ("load", "m", {"config": '{"max_batch_size": 5}'})]
    run(replica.apply_change(*shared[0]))
    assert run(replica.repository_index()) == [{"name": "m", "state": "UNAVAILABLE", "reason": "unloaded"}]
    run(replica.apply_change(*shared[1]))
    assert run(replica.model_ready("m")) is True and replica.get_model_from_registry("m").max_batch_size == 5
