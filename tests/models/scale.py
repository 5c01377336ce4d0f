"""Models for the scale tests: a batching model, a CPU-bound model, a repository that loads on demand.

SCALE_MODELS picks the models (default: batcher,cpu,sleepy).
"""
import argparse
import os
import time

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, ModelRepository, model_server
from tests.models.zoo import Sleepy  # the same slow model the zoo serves


class Batcher(kserve.Model):
    """Doubles its input; also says how many rows the predict call it ran in had (batch_rows)."""

    def __init__(self, name, max_batch_size=32, max_latency_ms=50):
        super().__init__(name, max_batch_size=max_batch_size, max_latency_ms=max_latency_ms)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None):
        x = payload.inputs[0].as_numpy()
        if (x < 0).any():
            raise ValueError("negative values are not allowed")
        time.sleep(0.02)  # a fixed cost per call, whatever the batch size
        doubled = InferOutput("doubled", list(x.shape), payload.inputs[0].datatype)
        doubled.set_data_from_numpy(x * 2)
        rows = np.full((x.shape[0], 1), x.shape[0], dtype=np.int64)
        batch = InferOutput("batch_rows", list(rows.shape), "INT64")
        batch.set_data_from_numpy(rows)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[doubled, batch])


class Cpu(kserve.Model):
    """Pure-Python CPU work (holds the GIL): only more processes make it faster."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        n = int(payload["instances"][0])
        total = 0
        for i in range(n):
            total += i * i % 7
        return {"predictions": [total], "pid": os.getpid()}


class Repository(ModelRepository):
    """Loads "good-*" models on demand; "broken" fails to load; anything else is not in the repository."""

    def load(self, name: str) -> bool:
        if name == "broken":
            raise RuntimeError("weights are corrupt")
        if not name.startswith("good-"):
            return False
        self.update(Sleepy(name))
        return True


MODELS = {"batcher": Batcher, "cpu": Cpu, "sleepy": Sleepy}

if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    names = os.environ.get("SCALE_MODELS", "batcher,cpu,sleepy").split(",")
    kserve.ModelServer(registered_models=Repository()).start([MODELS[n](n) for n in names])
