"""Models answering the output their BYTES input "spec" describes as JSON, ``{"datatype", "shape", "data"}``,
with ``data`` the plain list the model hands back (never a numpy array):

- "described": as an InferOutput of an InferResponse;
- "described_dict": as a v2 response dict, ``{"outputs": [{"name": "out", ...}]}``;
- "described_stream": a stream (an async generator) of a valid answer, then the described one.
"""
import argparse
import json

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server


def _spec(payload: InferRequest) -> dict:
    return json.loads(payload.inputs[0].as_numpy().reshape(-1)[0])


class Described(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        spec = _spec(payload)
        output = InferOutput("out", spec["shape"], spec["datatype"], data=spec["data"])
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[output])


class DescribedDict(Described):
    def predict(self, payload, headers=None):
        return {"outputs": [{"name": "out", **_spec(payload)}]}


class DescribedStream(Described):
    async def predict(self, payload, headers=None):
        first = InferOutput("out", [1], "INT32", data=[7])
        yield InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[first])
        yield super().predict(payload, headers)


MODELS = {"described": Described, "described_dict": DescribedDict, "described_stream": DescribedStream}

if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([cls(name) for name, cls in MODELS.items()])
