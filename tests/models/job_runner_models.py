"""Models for tests/test_jobs_runner.py: each notes every call it runs, so the tests see what ran, when, with
which request id, and whether it was cancelled.

A v2 call carries a tag (the INT64 input ``TAG``), which the model answers with; its note is ``{"tag",
"request_id", "started", "ended", "cancelled"}`` (Unix seconds, None until it happens). A call asking for
``parameters.hold`` runs until the ``ledger`` model releases its model (60 s at most).

- ``echo``: answers at once.
- ``single``: 1 call at once (instance_count 1), each runs 0.3 s (``parameters.seconds`` changes it).
- ``held``: as echo, but a call may hold.
- ``broken``: raises ValueError("row 3 is bad").
- ``big`` (v1): ``{"instances": [n]}`` answers ``{"predictions": ["xxx..."]}`` with n x's.
- ``ledger`` (v1): ``{"instances": ["held"]}`` answers the notes of ``held``; ``{"release": "held"}`` releases it.
"""
import argparse
import asyncio
import time
from typing import Any, Dict, List, Optional

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, SchedulingPolicy, model_server

NOTES: Dict[str, List[Dict[str, Any]]] = {}
GATES: Dict[str, asyncio.Event] = {}
HOLD_LIMIT_S = 60.0


class Tagged(kserve.Model):
    """A v2 model noting each call; it runs ``seconds`` (or the call's ``seconds`` parameter), or holds."""

    def __init__(self, name: str, seconds: float = 0.0, scheduling: Optional[SchedulingPolicy] = None):
        super().__init__(name)
        self.seconds, self.ready = seconds, True
        if scheduling is not None:
            self.scheduling = scheduling
        NOTES[name] = []

    async def predict(self, payload: InferRequest, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        tag = int(payload.inputs[0].as_numpy()[0])
        parameters = payload.parameters or {}
        note = {"tag": tag, "request_id": (headers or {}).get("x-request-id"), "started": time.time(),
                "ended": None, "cancelled": None}
        NOTES[self.name].append(note)
        try:
            if parameters.get("hold"):
                gate = GATES.setdefault(self.name, asyncio.Event())
                await asyncio.wait_for(gate.wait(), HOLD_LIMIT_S)
            else:
                await asyncio.sleep(float(parameters.get("seconds", self.seconds)))
        except asyncio.CancelledError:
            note["cancelled"] = time.time()
            raise
        note["ended"] = time.time()
        out = InferOutput("TAG", [1], "INT64")
        out.set_data_from_numpy(np.array([tag], dtype=np.int64))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])


class Broken(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        raise ValueError("row 3 is bad")


class Big(kserve.Model):
    """v1: ``{"instances": [n]}`` -> ``{"predictions": [n x's]}``."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        return {"predictions": ["x" * int(payload["instances"][0])]}


class Ledger(kserve.Model):
    """v1: reads a model's notes, or releases its held calls."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        if "release" in payload:
            GATES.pop(payload["release"], asyncio.Event()).set()
            return {"predictions": []}
        return {"predictions": NOTES[payload["instances"][0]]}


def models() -> List[kserve.Model]:
    return [Tagged("echo"), Tagged("single", 0.3, SchedulingPolicy(instance_count=1)), Tagged("held"),
            Broken("broken"), Big("big"), Ledger("ledger")]


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start(models())
