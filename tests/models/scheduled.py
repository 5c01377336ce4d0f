"""Models with scheduling policies, for tests/test_scheduling.py.

Each call carries a tag (v2: the INT64 input ``TAG``; generate and v1: ``parameters.tag`` / ``instances[0]``)
that the model answers with and notes, when it starts running the call, in its run log. The ``ledger`` model
(v1, never queued) reads a model's run log (``{"instances": ["slow"]}``) and releases a model's held calls
(``{"instances": [], "release": "slow"}``). A call asking for ``hold`` (``parameters.hold``, or ``"hold": true``
in a v1 body) runs until it is released (20 s at most); the others sleep their model's ``seconds``.

- ``slow``: 200 ms; 1 at once, 2 priority levels (default 2).
- ``bounded``: as slow, with max_queue_size 2.
- ``delayed``: as slow, with timeout_action DELAY.
- ``crowded``: 1 at once, no bound, no priorities (10,000 calls wait in it).
- ``doomed``: as slow (the unload test removes it).
- ``classic``: a v1 model, as slow.
- ``streamer``: an async-generator predict, 1 at once: its first answer at once, its last when released.
- ``slow_def``, ``bounded_def``, ``delayed_def``, ``crowded_def``: as their namesakes, with a plain ``def predict``
  (on a model thread, where the slot passes from one call to the next).

The repository loads ``misconfigured`` on demand: its policy is wrong, so its load fails.

``SCHEDULED_POLICY`` (JSON ``{"model": {field: value}}``) replaces the named models' policies, as dicts the
server checks at start-up.
"""
import argparse
import asyncio
import json
import os
import threading
import time
from typing import Any, Dict, List

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, SchedulingPolicy, model_server

RUNS: Dict[str, List[int]] = {}
GATES: Dict[str, asyncio.Event] = {}
THREAD_GATES: Dict[str, threading.Event] = {}
HOLD_LIMIT_S = 20.0


def _tag_response(model_name: str, request: InferRequest, tag: int) -> InferResponse:
    out = InferOutput("TAG", [1], "INT64")
    out.set_data_from_numpy(np.array([tag], dtype=np.int64))
    return InferResponse(response_id=request.id, model_name=model_name, infer_outputs=[out])


async def _held(model_name: str) -> None:
    gate = GATES.setdefault(model_name, asyncio.Event())
    await asyncio.wait_for(gate.wait(), HOLD_LIMIT_S)


def _held_on_thread(model_name: str) -> None:
    THREAD_GATES.setdefault(model_name, threading.Event()).wait(HOLD_LIMIT_S)


def release(model_name: str) -> None:
    """Let every held call of the model end; calls held later wait for the next release."""
    GATES.pop(model_name, asyncio.Event()).set()
    THREAD_GATES.pop(model_name, threading.Event()).set()


class Recorded(kserve.Model):
    """A v2 model that notes the tag of each call it runs, then sleeps ``seconds`` (or is held)."""

    def __init__(self, name: str, scheduling: Any, seconds: float = 0.2):
        super().__init__(name)
        self.scheduling, self.seconds, self.ready = scheduling, seconds, True
        RUNS[name] = []

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        tag = int(payload.inputs[0].as_numpy()[0])
        RUNS[self.name].append(tag)
        if (payload.parameters or {}).get("hold"):
            await _held(self.name)
        else:
            await asyncio.sleep(self.seconds)
        return _tag_response(self.name, payload, tag)


class Threaded(Recorded):
    """As Recorded, with a plain ``def predict``: it runs on a model thread."""

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:  # type: ignore[override]
        tag = int(payload.inputs[0].as_numpy()[0])
        RUNS[self.name].append(tag)
        if (payload.parameters or {}).get("hold"):
            _held_on_thread(self.name)
        else:
            time.sleep(self.seconds)
        return _tag_response(self.name, payload, tag)


class Classic(Recorded):
    """A v1 model: ``{"instances": [tag], "hold": bool}``."""

    async def predict(self, payload: Dict[str, Any], headers=None) -> Dict[str, Any]:
        tag = payload["instances"][0]
        RUNS[self.name].append(tag)
        if payload.get("hold"):
            await _held(self.name)
        else:
            await asyncio.sleep(self.seconds)
        return {"predictions": [tag]}


class Streamer(Recorded):
    """Yields twice: at once, then when released (or, not held, after ``seconds``)."""

    async def predict(self, payload: Any, headers=None):
        v2 = isinstance(payload, InferRequest)
        parameters = (payload.parameters if v2 else payload.get("parameters")) or {}
        tag = int(payload.inputs[0].as_numpy()[0]) if v2 else int(parameters["tag"])
        RUNS[self.name].append(tag)
        for part in ("first", "last"):
            if part == "last":
                await (_held(self.name) if parameters.get("hold") else asyncio.sleep(self.seconds))
            yield _tag_response(self.name, payload, tag) if v2 else {"text_output": part, "tag": tag}


class Ledger(kserve.Model):
    """Reads run logs and releases held calls (v1); never queued."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: Dict[str, Any], headers=None) -> Dict[str, Any]:
        if "release" in payload:
            release(payload["release"])
            return {"predictions": []}
        return {"predictions": RUNS[payload["instances"][0]]}


def _policy(levels: int = 2, **fields: Any) -> SchedulingPolicy:
    return SchedulingPolicy(instance_count=1, priority_levels=levels, default_priority_level=levels, **fields)


def models() -> List[kserve.Model]:
    served = [
        Recorded("slow", _policy()),
        Recorded("bounded", _policy(max_queue_size=2)),
        Recorded("delayed", _policy(timeout_action="DELAY")),
        Recorded("crowded", SchedulingPolicy(instance_count=1)),
        Recorded("doomed", _policy()),
        Classic("classic", _policy()),
        Streamer("streamer", SchedulingPolicy(instance_count=1)),
        Threaded("slow_def", _policy()),
        Threaded("bounded_def", _policy(max_queue_size=2)),
        Threaded("delayed_def", _policy(timeout_action="DELAY")),
        Threaded("crowded_def", SchedulingPolicy(instance_count=1)),
        Ledger("ledger"),
    ]
    replaced = json.loads(os.environ.get("SCHEDULED_POLICY", "{}"))
    for model in served:
        if model.name in replaced:
            model.scheduling = replaced[model.name]
    return served


class OnDemand(kserve.ModelRepository):
    """Loads ``misconfigured`` through the repository API: a model whose policy names an unknown action."""

    def load(self, name: str) -> bool:
        if name != "misconfigured":
            return False
        self.update(Recorded(name, {"instance_count": 1, "timeout_action": "SOMETIMES"}))
        return True


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer(registered_models=OnDemand()).start(models())
