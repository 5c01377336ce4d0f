"""Models for tests/test_jobs.py: the same models answer synchronous calls and jobs.

- ``adder`` (v2): each input ``INPUTn`` comes back plus one as ``OUTPUTn``, binary when asked for;
  ``pager`` is another of it (the listing test's own model), and ``model`` too (docs/jobs.md's client calls it).
- ``adder_v1`` (v1): ``{"instances": [numbers]}`` -> ``{"predictions": [number + 1, ...]}``.
- ``broken`` (v2): always raises RuntimeError: a model error.
- ``flaky`` (v2): raises RuntimeError the first time it sees a tag (the INT64 input ``TAG``), answers after.
- ``held`` (v2): notes the tag of each call it starts in its run log; a call with ``parameters.hold`` runs until
  released (20 s at most), and notes in its cancel log when it is cancelled (its tag and ``time.monotonic()``,
  which is the same clock in every process of the machine).
- ``sleepy`` (v2): an adder whose readiness the ledger switches.
- ``ledger`` (v1, plain): ``{"instances": ["runs"]}`` -> the run log; ``["cancelled"]`` -> the cancel log;
  ``["release"]`` lets the held calls end; ``["sleep"]`` / ``["wake"]`` turn ``sleepy`` unready / ready.
"""
import argparse
import asyncio
import time
from typing import Any, Dict, List, Tuple

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server

RUNS: List[int] = []
CANCELLED: List[Tuple[int, float]] = []
SEEN: set = set()
HOLD_LIMIT_S = 20.0
_gate = asyncio.Event()


class Adder(kserve.Model):
    """v2: every input plus one, as ``OUTPUTn``, with the request's id and binary choice."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        outputs = []
        for tensor in payload.inputs:
            array = tensor.as_numpy() + 1
            out = InferOutput(tensor.name.replace("INPUT", "OUTPUT"), list(array.shape), tensor.datatype)
            out.set_data_from_numpy(array, binary_data=payload.use_binary_outputs)
            outputs.append(out)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=outputs)


class AdderV1(kserve.Model):
    """v1: every instance plus one."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: Dict[str, Any], headers=None) -> Dict[str, Any]:
        return {"predictions": [value + 1 for value in payload["instances"]]}


class Broken(kserve.Model):
    """Fails every call with an error of its own."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        raise RuntimeError("broken on purpose")


def _tag(payload: InferRequest) -> int:
    return int(payload.inputs[0].as_numpy()[0])


class Flaky(Adder):
    """Fails the first call of each tag, answers the later ones."""

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        tag = _tag(payload)
        if tag not in SEEN:
            SEEN.add(tag)
            raise RuntimeError(f"tag {tag} fails on its first try")
        return await super().predict(payload, headers)


class Held(Adder):
    """Notes each call's tag; a call asking to be held waits for the ledger's release, and notes a cancel."""

    async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        tag = _tag(payload)
        RUNS.append(tag)
        if (payload.parameters or {}).get("hold"):
            try:
                await asyncio.wait_for(_gate.wait(), HOLD_LIMIT_S)
            except asyncio.CancelledError:
                CANCELLED.append((tag, time.monotonic()))
                raise
        return await super().predict(payload, headers)


class Ledger(kserve.Model):
    """Reads the held model's logs, releases its held calls and switches ``sleepy``'s readiness."""

    def __init__(self, name: str, sleepy: kserve.Model):
        super().__init__(name)
        self.sleepy, self.ready = sleepy, True

    async def predict(self, payload: Dict[str, Any], headers=None) -> Dict[str, Any]:
        global _gate
        asked = payload["instances"][0]
        if asked == "runs":
            return {"predictions": RUNS}
        if asked == "cancelled":
            return {"predictions": [list(entry) for entry in CANCELLED]}
        if asked == "release":
            _gate.set()
            _gate = asyncio.Event()  # calls held from now on wait for the next release
        elif asked in ("sleep", "wake"):
            self.sleepy.ready = asked == "wake"
        return {"predictions": []}


def models() -> List[kserve.Model]:
    sleepy = Adder("sleepy")
    return [Adder("adder"), Adder("pager"), Adder("model"), AdderV1("adder_v1"), Broken("broken"), Flaky("flaky"),
            Held("held"), sleepy, Ledger("ledger", sleepy)]


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start(models())
