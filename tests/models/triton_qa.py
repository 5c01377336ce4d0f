"""Models shaped like Triton's QA models, so that Triton's own client examples and tests/test_triton_wire.py
run against us as they run against Triton.

"simple" (INT32), "simple_int8" (INT8) and "simple_string" (BYTES holding numbers): INPUT0 and INPUT1 of
shape [-1, 16] in, OUTPUT0 = their sum and OUTPUT1 = their difference out. They answer the way our docs
show, ``InferResponse(response_id=payload.id, ...)``, so a request without an id leaves the id to the server.
"simple_identity": BYTES INPUT0 back as OUTPUT0. "repeat_int32" (decoupled, like Triton's repeat backend):
IN [n] INT32, DELAY [n] UINT32 (ms before each answer), WAIT [1] UINT32 (ms after the last) in; one answer per
value of IN, OUT [1] INT32 and IDX [1] UINT32. "classifier": INPUT0 FP32 [-1, 4] in, SCORES (FP32, with
labels), COUNTS (INT32, no labels) and NAMES (BYTES) out. Every model can be unloaded and loaded again.
"""
import asyncio

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse

CLASS_LABELS = ["ant", "bee", "cat", "dog"]


def _tensor(name: str, datatype: str, shape: list) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape}


def _output(name: str, datatype: str, array: np.ndarray) -> InferOutput:
    return InferOutput(name, list(array.shape), datatype, data=array)


class QAModel(kserve.Model):
    """A model that describes its tensors as Triton's QA model of the same name does."""

    def __init__(self, name: str, inputs: list, outputs: list):
        super().__init__(name)
        self.inputs, self.outputs = inputs, outputs
        self.ready = True

    def get_input_types(self):
        return self.inputs

    def get_output_types(self):
        return self.outputs


class AddSub(QAModel):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, in ``datatype`` (BYTES: numbers as text)."""

    def __init__(self, name: str, datatype: str):
        pair = [_tensor("INPUT0", datatype, [-1, 16]), _tensor("INPUT1", datatype, [-1, 16])]
        super().__init__(name, pair, [_tensor("OUTPUT0", datatype, [-1, 16]), _tensor("OUTPUT1", datatype, [-1, 16])])
        self.datatype = datatype

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        a, b = (payload.get_input_by_name(n).as_numpy() for n in ("INPUT0", "INPUT1"))
        if self.datatype == "BYTES":
            total, diff = (np.array([str(v).encode() for v in r.flat], dtype=np.object_).reshape(a.shape)
                           for r in (a.astype(np.int64) + b.astype(np.int64), a.astype(np.int64) - b.astype(np.int64)))
        else:
            total, diff = a + b, a - b
        return InferResponse(response_id=payload.id, model_name=self.name,
                             infer_outputs=[_output("OUTPUT0", self.datatype, total),
                                            _output("OUTPUT1", self.datatype, diff)])


class Identity(QAModel):
    """BYTES INPUT0 back as OUTPUT0."""

    def __init__(self, name: str):
        super().__init__(name, [_tensor("INPUT0", "BYTES", [-1, -1])], [_tensor("OUTPUT0", "BYTES", [-1, -1])])

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        data = payload.get_input_by_name("INPUT0").as_numpy()
        return InferResponse(response_id=payload.id, model_name=self.name,
                             infer_outputs=[_output("OUTPUT0", "BYTES", data)])


class Repeat(QAModel):
    """Triton's decoupled repeat model: one answer per value of IN, each after its DELAY ms."""

    def __init__(self, name: str):
        super().__init__(name, [_tensor("IN", "INT32", [-1]), _tensor("DELAY", "UINT32", [-1]),
                                _tensor("WAIT", "UINT32", [1])],
                         [_tensor("OUT", "INT32", [1]), _tensor("IDX", "UINT32", [1])])

    async def predict(self, payload: InferRequest, headers=None):
        values = payload.get_input_by_name("IN").as_numpy()
        delays = payload.get_input_by_name("DELAY").as_numpy()
        for index, (value, delay) in enumerate(zip(values, delays, strict=True)):
            await asyncio.sleep(int(delay) / 1000)
            yield InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[
                _output("OUT", "INT32", np.array([value], dtype=np.int32)),
                _output("IDX", "UINT32", np.array([index], dtype=np.uint32))])
        await asyncio.sleep(int(payload.get_input_by_name("WAIT").as_numpy()[0]) / 1000)


class Classifier(QAModel):
    """INPUT0's rows as scores: SCORES (FP32, labelled), COUNTS (INT32, the scores times 10, unlabelled) and
    NAMES (BYTES, which cannot be classified)."""

    labels = {"SCORES": CLASS_LABELS}

    def __init__(self, name: str):
        super().__init__(name, [_tensor("INPUT0", "FP32", [-1, 4])],
                         [_tensor("SCORES", "FP32", [-1, 4]), _tensor("COUNTS", "INT32", [-1, 4]),
                          _tensor("NAMES", "BYTES", [-1, 4])])

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        scores = payload.get_input_by_name("INPUT0").as_numpy()
        names = np.array([[label.encode() for label in CLASS_LABELS]] * len(scores), dtype=np.object_)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[
            _output("SCORES", "FP32", scores), _output("COUNTS", "INT32", (scores * 10).astype(np.int32)),
            _output("NAMES", "BYTES", names)])


MODELS = {
    "simple": lambda: AddSub("simple", "INT32"),
    "simple_int8": lambda: AddSub("simple_int8", "INT8"),
    "simple_string": lambda: AddSub("simple_string", "BYTES"),
    "simple_identity": lambda: Identity("simple_identity"),
    "repeat_int32": lambda: Repeat("repeat_int32"),
    "classifier": lambda: Classifier("classifier"),
}


class QARepository(kserve.ModelRepository):
    """Loads any of the models above again after an unload (Triton's model-control examples do)."""

    def load(self, name: str) -> bool:
        make = MODELS.get(name)
        if make is None:
            return False
        self.update(make())
        return True


if __name__ == "__main__":
    kserve.ModelServer(registered_models=QARepository()).start([make() for make in MODELS.values()])
