"""Models for tests/test_jobs_durability.py: a job server killed with SIGKILL mid-run, and jobs beside calls.

- ``addone`` (v2, ``async def``): INT64 input ``x`` -> INT64 output ``y`` = x + 1, after ``ADDONE_MS``
  milliseconds (20). Each execution, as it starts, appends one line ``<x-request-id> <pid>`` to the file the
  environment variable ``JOB_EXECUTIONS`` names (when set): one ``write`` to a file opened with ``O_APPEND``, so
  the lines of the two workers never mix, and an execution cut short by a kill is on record too.
- ``work`` (v2, plain ``def``, on a model thread): INT64 ``x`` -> ``y`` = x, after ``WORK_MS`` milliseconds (10),
  one call at a time (``instance_count=1``): jobs wait below its synchronous calls.
"""
import argparse
import asyncio
import os
import time
from typing import Dict, List, Optional

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, SchedulingPolicy, model_server

ADDONE_MS = 20.0
WORK_MS = 10.0
LEDGER_ENV = "JOB_EXECUTIONS"


def note_execution(headers: Optional[Dict[str, str]]) -> None:
    """Append this execution's line to the ledger file, if there is one."""
    path = os.environ.get(LEDGER_ENV)
    if not path:
        return
    line = f"{(headers or {}).get('x-request-id', '-')} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def int64_answer(name: str, payload: InferRequest, values: np.ndarray) -> InferResponse:
    out = InferOutput("y", list(values.shape), "INT64")
    out.set_data_from_numpy(values.astype(np.int64), binary_data=False)
    return InferResponse(response_id=payload.id, model_name=name, infer_outputs=[out])


class AddOne(kserve.Model):
    """x + 1 after ADDONE_MS, each execution noted as it starts."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        note_execution(headers)
        await asyncio.sleep(ADDONE_MS / 1000)
        return int64_answer(self.name, payload, payload.inputs[0].as_numpy() + 1)


class Work(kserve.Model):
    """x after WORK_MS of a model thread, one call at a time."""

    def __init__(self, name: str):
        super().__init__(name)
        self.scheduling = SchedulingPolicy(instance_count=1)
        self.ready = True

    def predict(self, payload: InferRequest, headers: Optional[Dict[str, str]] = None) -> InferResponse:
        time.sleep(WORK_MS / 1000)
        return int64_answer(self.name, payload, payload.inputs[0].as_numpy())


def models() -> List[kserve.Model]:
    return [AddOne("addone"), Work("work")]


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start(models())
