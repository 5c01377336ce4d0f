"""Models that declare warm-up requests (``model.warmup``), for tests/test_warmup.py.

WARMUP_SET picks what the server serves: "main" (slow, generated, v1), "failing" (failing, and a repository
that loads "loaded-good" and "loaded-failing"), "stopping" (endless), or a wrong declaration that must stop
the server at start: "bad-count" (a Warmup with count=0), "bad-item" (a string in the list).
"""
import argparse
import os
import time

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, ModelRepository, model_server

STAGES = ("preprocess", "predict", "postprocess")


def sleeping_request(request_id: str, seconds: float) -> dict:
    """A v2 warm-up body whose preprocess sleeps ``seconds`` (Slow reads its one input)."""
    return {"id": request_id, "inputs": [{"name": "sleep_s", "shape": [1], "datatype": "FP32", "data": [seconds]}]}


class Slow(kserve.Model):
    """v2: preprocess sleeps as many seconds as its input says; every stage counts the warm-up requests it
    sees (request id "warmup"); a call answers with its worker's pid and those counts."""

    scheduling = kserve.SchedulingPolicy(instance_count=1)  # the warm-up goes through the model's queue

    def __init__(self, name, warmup):
        super().__init__(name)
        self.warmup = warmup
        self.warmup_calls = dict.fromkeys(STAGES, 0)
        self.ready = True

    def _seen(self, stage, request_id):
        if request_id == "warmup":
            self.warmup_calls[stage] += 1

    def preprocess(self, payload: InferRequest, headers=None):
        self._seen("preprocess", payload.id)
        time.sleep(float(payload.inputs[0].as_numpy()[0]))
        return payload

    def predict(self, payload: InferRequest, headers=None):
        self._seen("predict", payload.id)
        pid = InferOutput("pid", [1], "INT64")
        pid.set_data_from_numpy(np.array([os.getpid()], dtype=np.int64))
        calls = InferOutput("warmup_calls", [3], "INT64")
        calls.set_data_from_numpy(np.array([self.warmup_calls[s] for s in STAGES], dtype=np.int64))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[pid, calls])

    def postprocess(self, result: InferResponse, headers=None):
        self._seen("postprocess", result.id)
        return result


class Generated(kserve.Model):
    """Adaptive batching on; records the inputs of every v2 predict call and answers a v1 call with them."""

    def __init__(self, name):
        super().__init__(name, max_batch_size=8, max_latency_ms=5)
        self.warmup = [
            kserve.Warmup(name="zeros", inputs={"x": ("FP32", [3]), "ids": ("INT64", [2], "random")},
                          batch_size=4, count=2),
            kserve.Warmup(name="text", inputs={"s": kserve.WarmupInput("BYTES", [2])}),
        ]
        self.seen = []
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, dict):
            return {"seen": self.seen, "pid": os.getpid()}
        call = {}
        for tensor in payload.inputs:
            array = tensor.as_numpy()
            numeric = array.dtype != object
            call[tensor.name] = {"shape": list(array.shape), "datatype": tensor.datatype, "dtype": str(array.dtype),
                                 "zeros": bool((array == 0).all() if numeric else all(v == b"" for v in array.flat)),
                                 "range": [array.min().item(), array.max().item()] if numeric else None}
        self.seen.append(call)
        rows = payload.inputs[0].shape[0]
        out = InferOutput("rows", [rows, 1], "INT64")
        out.set_data_from_numpy(np.ones((rows, 1), dtype=np.int64))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])


class V1(kserve.Model):
    """v1: every stage counts the warm-up requests it sees (a body with "warmup": true); answers its
    instances with those counts."""

    def __init__(self, name):
        super().__init__(name)
        self.warmup = [{"instances": [[1, 2]], "warmup": True}]
        self.warmup_calls = dict.fromkeys(STAGES, 0)
        self.ready = True

    def _seen(self, stage, body):
        if body.get("warmup"):
            self.warmup_calls[stage] += 1

    async def preprocess(self, payload, headers=None):
        self._seen("preprocess", payload)
        return payload

    def predict(self, payload, headers=None):
        self._seen("predict", payload)
        return {"predictions": payload["instances"], "warmup": payload.get("warmup", False),
                "warmup_calls": [self.warmup_calls[s] for s in STAGES]}

    async def postprocess(self, result, headers=None):
        self._seen("postprocess", result)
        return {key: value for key, value in result.items() if key != "warmup"}


class Failing(kserve.Model):
    """Answers v1 bodies; its v2 predict fails, so its second warm-up request (a Warmup named "boom") fails."""

    def __init__(self, name):
        super().__init__(name)
        self.warmup = [{"instances": [[1]]}, kserve.Warmup(name="boom", inputs={"x": ("FP32", [1])})]
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, dict):
            return {"predictions": payload["instances"]}
        raise ValueError("the weights are not loaded")


class Repository(ModelRepository):
    """Loads "loaded-good" (a half-second warm-up) and "loaded-failing" on demand."""

    def load(self, name: str) -> bool:
        if name == "loaded-good":
            self.update(Slow(name, [sleeping_request("warmup", 0.5)]))
        elif name == "loaded-failing":
            self.update(Failing(name))
        else:
            return False
        return True


class BadCount(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.warmup = [kserve.Warmup(name="w", inputs={"x": ("FP32", [1])}, count=0)]
        self.ready = True


class BadItem(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.warmup = ["zeros please"]
        self.ready = True


def models(which: str) -> list:
    if which == "main":
        return [Slow("slow", [sleeping_request("warmup", 2.0)]), Generated("generated"), V1("v1")]
    if which == "failing":
        return [Failing("failing"), V1("v1")]
    if which == "stopping":  # 200 warm-up requests of 0.2 s: still warming up when the server is stopped
        return [Slow("endless", [sleeping_request("warmup", 0.2)] * 200)]
    return [{"bad-count": BadCount, "bad-item": BadItem}[which]("bad")]


if __name__ == "__main__":
    argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer(registered_models=Repository()).start(models(os.environ.get("WARMUP_SET", "main")))
