"""Test models, written as a KServe user would (only the import differs), served by one server.

ZOO_MODELS (comma-separated) picks which ones; default: all but "toggle" (which can turn unready).
"""
import argparse
import asyncio
import json
import os
import threading
import time

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server
from kserve_sdk.errors import InferenceError, InvalidInput


class Echo(kserve.Model):
    """v2: each input INPUTn comes back as OUTPUTn; v1: the instances come back as predictions."""

    def __init__(self, name):
        super().__init__(name)
        self.load()

    def get_input_types(self):
        return [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]

    def get_output_types(self):
        return [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]

    async def predict(self, payload, headers=None):
        if isinstance(payload, dict):
            return {"predictions": payload["instances"]}
        outputs = []
        for tensor in payload.inputs:
            array = tensor.as_numpy()
            out = InferOutput(tensor.name.replace("INPUT", "OUTPUT"), list(array.shape), tensor.datatype)
            out.set_data_from_numpy(array, binary_data=payload.use_binary_outputs)
            outputs.append(out)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=outputs,
                             parameters=payload.parameters)


class Pipeline(kserve.Model):
    """Records the order its stages ran in: async preprocess, sync predict, sync postprocess."""

    def __init__(self, name):
        super().__init__(name)
        self.trace = []
        self.load()

    def load(self):
        self.trace = ["load"]
        self.ready = True
        return True

    async def preprocess(self, payload, headers=None):
        headers["x-seen-by"] = "preprocess"
        return {"instances": payload["instances"], "trace": self.trace + ["preprocess"]}

    def predict(self, payload, headers=None):
        return {"predictions": [x * 2 for x in payload["instances"]], "trace": payload["trace"] + ["predict"],
                "seen": headers.get("x-seen-by")}

    def postprocess(self, result, headers=None):
        result["trace"].append("postprocess")
        return result


class Headers(kserve.Model):
    """Sets response headers from predict and postprocess."""

    def __init__(self, name):
        super().__init__(name, return_response_headers=True)
        self.ready = True

    def predict(self, payload, headers=None, response_headers=None):
        response_headers["x-predicted-by"] = self.name
        return {"predictions": [headers.get("x-request-id")]}

    def postprocess(self, result, headers=None, response_headers=None):
        response_headers["x-postprocessed"] = "yes"
        return result


class Failing(kserve.Model):
    """Raises what its single instance names."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        what = payload["instances"][0] if isinstance(payload, dict) else payload.inputs[0].as_string()[0]
        if what == "invalid":
            raise InvalidInput("instance 0 must be a number")
        if what == "notimpl":
            raise NotImplementedError("this model cannot do that")
        if what == "inference":
            raise InferenceError("the model ran out of patience")
        if what == "boom":
            raise RuntimeError("kaboom")
        return {"predictions": [what]}


class Slow(kserve.Model):
    """A synchronous predict that sleeps 0.2 s (it must not block the loop)."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        time.sleep(0.2)
        return {"predictions": payload["instances"]}


class Explained(kserve.Model):
    """Implements explain as well as predict."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        return {"predictions": [sum(row) for row in payload["instances"]]}

    async def explain(self, payload, headers=None):
        await asyncio.sleep(0)
        return {"explanations": [[1.0 / len(row)] * len(row) for row in payload["instances"]]}


class Raw(kserve.Model):
    """Returns bytes (v1) and numpy arrays (v1 and v2)."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            return payload.inputs[0].as_numpy() * 2
        if payload.get("instances") == ["bytes"]:
            return b"\x00raw-bytes\xff"
        return {"predictions": np.arange(6, dtype=np.float32).reshape(2, 3)}


class Toggle(kserve.Model):
    """Turns itself unready when asked to (v1 instance "off")."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if payload["instances"] == ["off"]:
            self.ready = False
        return {"predictions": payload["instances"]}


class NeverReady(kserve.Model):
    """Its load fails and the user code carries on: the server must leave it out."""

    def __init__(self, name):
        super().__init__(name)
        try:
            self.load()
        except FileNotFoundError:
            pass

    def load(self):
        raise FileNotFoundError("no model file")


ZOO = {"echo": Echo, "pipeline": Pipeline, "headers": Headers, "failing": Failing, "slow": Slow,
       "explained": Explained, "raw": Raw, "toggle": Toggle, "never": NeverReady}


class Received(kserve.Model):
    """Reports what its payload was: the type name, and the value (JSON), inputs (v2) or length (bytes).

    Not in the default set; serve it with ZOO_MODELS=...,received (tests/test_cloudevents.py does).
    """

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, (bytes, bytearray)):
            return {"type": type(payload).__name__, "length": len(payload)}
        if isinstance(payload, InferRequest):
            return {"type": "InferRequest", "inputs": [t.name for t in payload.inputs]}
        return {"type": type(payload).__name__, "value": payload}


ZOO["received"] = Received


class Listed(kserve.Model):
    """Answers the output its BYTES input "spec" describes as JSON, ``{"datatype", "shape", "data"}``, with
    ``data`` the plain list the model hands back (not a numpy array). Not in the default set."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None):
        spec = json.loads(payload.inputs[0].as_numpy().reshape(-1)[0])
        return InferResponse(response_id=payload.id, model_name=self.name,
                             infer_outputs=[InferOutput("out", spec["shape"], spec["datatype"], data=spec["data"])])


ZOO["listed"] = Listed


class Sleepy(kserve.Model):
    """An async predict that sleeps as many seconds as its first instance says (a slow I/O-bound model)."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        seconds = (payload["instances"][0] if isinstance(payload, dict)
                   else float(payload.inputs[0].as_numpy().ravel()[0]))
        await asyncio.sleep(seconds)
        if isinstance(payload, dict):
            return {"predictions": [os.getpid()]}
        out = InferOutput("pid", [1], "INT64")
        out.set_data_from_numpy(np.array([os.getpid()], dtype=np.int64))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])


ZOO["sleepy"] = Sleepy


class Faulty(kserve.Model):
    """Misbehaves as its first v1 instance (or first v2 BYTES element) says: "raise", "wrongtype",
    "unencodable", "v1dict", "none", "v2dict" (a dict in v2's response shape), "shape", "badtype",
    "hang" (sleeps 3600 s), "sleep:<s>", "big:<bytes>"; "stats" reports
    how many of its calls were cancelled. Not in the default set (tests/test_reliability.py serves it)."""

    cancelled = 0

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload, headers=None):
        v2 = isinstance(payload, InferRequest)
        what = payload.inputs[0].as_string()[0] if v2 else payload["instances"][0]
        try:
            if what == "hang":
                await asyncio.sleep(3600)
            if isinstance(what, str) and what.startswith("sleep:"):
                await asyncio.sleep(float(what[6:]))
        except asyncio.CancelledError:
            Faulty.cancelled += 1
            raise
        if what == "raise":
            raise ValueError("bad weights")
        if what == "wrongtype":
            return 42 if v2 else object()
        if what == "unencodable":
            return {"predictions": [object()]}
        if what == "v1dict":
            return {"predictions": [1, 2]}
        if what == "none":
            return None
        if what == "setshape":  # set_data_from_numpy with an array of another shape than the output's
            out = InferOutput("out", [3], "FP32")
            out.set_data_from_numpy(np.zeros(2, np.float32))
        if what == "v2dict":
            return {"outputs": [{"name": "out", "shape": [2], "datatype": "INT32", "data": [1, 2]}]}
        if what == "shape":
            return InferResponse(response_id="x", model_name=self.name,
                                 infer_outputs=[InferOutput("out", [5], "FP32", data=[1.0, 2.0, 3.0])])
        if what == "badtype":
            return InferResponse(response_id="x", model_name=self.name,
                                 infer_outputs=[InferOutput("out", [1], "FLOAT99", data=[1.0])])
        if isinstance(what, str) and what.startswith("big:"):
            return b"x" * int(what[4:])
        if what == "stats":
            return {"predictions": [Faulty.cancelled]}
        if v2:
            out = InferOutput("out", [1], "BYTES")
            out.set_data_from_numpy(np.array([what.encode()], dtype=np.object_))
            return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])
        return {"predictions": [what]}


ZOO["faulty"] = Faulty


class Where(kserve.Model):
    """A sync predict that sleeps as many seconds as its first instance says (0: none) and answers with the
    name of the thread it ran on. Not in the default set (tests/test_inline.py serves it)."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        seconds = float(payload["instances"][0])
        if seconds:
            time.sleep(seconds)
        return {"predictions": [threading.current_thread().name]}


ZOO["where"] = Where


class SetHeaders(kserve.Model):
    """Sets the response headers its v1 instances name: ``[[name, value], ...]`` (values as JSON gives them).
    Not in the default set (tests/test_fast_path.py serves it)."""

    def __init__(self, name):
        super().__init__(name, return_response_headers=True)
        self.ready = True

    def predict(self, payload, headers=None, response_headers=None):
        for name, value in payload["instances"]:
            response_headers[name] = value
        return {"predictions": len(payload["instances"])}


ZOO["setheaders"] = SetHeaders


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    names = os.environ.get("ZOO_MODELS", "echo,pipeline,headers,failing,slow,explained,raw,never").split(",")
    kserve.ModelServer().start([ZOO[name](name) for name in names])
