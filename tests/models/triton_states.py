"""Models for tests/test_triton_model_states.py, served by the base repository (which cannot load anything
new: a model comes back only as the one the server unloaded).

"simple" and its copies (see NAMES): like Triton's QA model "simple", INT32 INPUT0 and INPUT1 of shape
[-1, 16] in, OUTPUT0 = their sum and OUTPUT1 = their difference out, max_batch_size 8; the response parameter
"loads" says how many times the model's load() ran. "versioned": the same, declaring ``version = 2``.
"pid" (v1): answers its worker's process id, after a short pause so that calls side by side reach every
worker.
"""
import asyncio
import os

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse

#: The copies of "simple": each test that unloads or reconfigures a model has its own.
NAMES = ["simple", "unload-grpc", "unload-http", "configured-grpc", "configured-http", "refused"]


def _tensor(name: str) -> dict:
    return {"name": name, "datatype": "INT32", "shape": [-1, 16]}


class AddSub(kserve.Model):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""

    def __init__(self, name: str):
        super().__init__(name, max_batch_size=8)
        self.loads = 0
        self.load()

    def load(self) -> bool:
        self.loads += 1
        self.ready = True
        return True

    def get_input_types(self):
        return [_tensor("INPUT0"), _tensor("INPUT1")]

    def get_output_types(self):
        return [_tensor("OUTPUT0"), _tensor("OUTPUT1")]

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        a, b = (payload.get_input_by_name(name).as_numpy() for name in ("INPUT0", "INPUT1"))
        outputs = [InferOutput(name, list(a.shape), "INT32", data=value)
                   for name, value in (("OUTPUT0", a + b), ("OUTPUT1", a - b))]
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=outputs,
                             parameters={"loads": self.loads})


class Versioned(AddSub):
    """AddSub serving version 2 only."""

    version = 2


class Pid(kserve.Model):
    """v1: ``{"predictions": [<the worker's process id>]}``."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        await asyncio.sleep(0.05)
        return {"predictions": [os.getpid()]}


if __name__ == "__main__":
    kserve.ModelServer().start([*(AddSub(name) for name in NAMES), Versioned("versioned"), Pid("pid")])
