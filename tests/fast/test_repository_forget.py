"""A lazily served repository model, once evicted, leaves nothing of its own in the data plane's process: the
object itself is freed, and its scheduler plan, executor pace and statistics counters go (this process's files
of them too, as Triton drops an unloaded model's statistics): it counts from 0 when it comes back."""
import asyncio
import gc
import json
import weakref

from kserve_sdk import executor
from kserve_sdk.dataplane import DataPlane
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.protocol.infer_type import InferInput, InferRequest
from kserve_sdk.repository.options import RepositoryOptions
from kserve_sdk.triton import statistics

NAMES = ["a", "b", "c", "d", "e"]
#: Each model's model.py: the input back as the output.
MODEL_PY = """from kserve_sdk import InferRequest, Model
from kserve_sdk.utils.utils import get_predict_response


class Echo(Model):
    def load(self):
        self.ready = True
        return True

    def predict(self, payload, headers=None):
        return get_predict_response(payload, payload.inputs[0].as_numpy(), self.name)
"""


def test_an_evicted_model_is_freed_with_its_plan_pace_and_counters(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # statistics counters in files, as served
    root = tmp_path / "repo"
    for name in NAMES:
        (root / name).mkdir(parents=True)
        settings = {"name": name, "implementation": "model.Echo"}
        (root / name / "model-settings.json").write_text(json.dumps(settings))
        (root / name / "model.py").write_text(MODEL_PY)
    dataplane = DataPlane(ModelRepository())
    dataplane.open_repository(RepositoryOptions(str(root), "lazy", max_loaded_models=2))

    async def infer(name: str) -> weakref.ref:
        request = InferRequest(name, [InferInput("INPUT0", [2], "FP32", [1.0, 2.0])])
        await dataplane.infer(name, request)
        return weakref.ref(dataplane.model_registry.get_model(name))

    paces_before = set(executor._paces)  # other tests of this process keep paces of their own objects

    async def scenario() -> None:
        first = await infer("a")
        await infer("a")
        for name in NAMES[1:]:
            await infer(name)
        gc.collect()
        assert first() is None, gc.get_referrers(first())
        assert sorted(dataplane.scheduler._plans) == ["d", "e"]
        assert "a" not in statistics._counters
        served = {id(dataplane.model_registry.get_model(name)) for name in ("d", "e")}
        assert {key[0] for key in set(executor._paces) - paces_before if key[0]} <= served
        assert statistics.model_statistics("a")["inference_count"] == 0
        assert not list(tmp_path.glob(f"triton_stats_{b'a'.hex()}_*"))
        assert statistics.model_statistics("d")["inference_count"] == 1
        await infer("a")
        assert statistics.model_statistics("a")["inference_count"] == 1

    try:
        asyncio.run(scenario())
    finally:
        for name in NAMES:
            statistics._counters.pop(name, None)
