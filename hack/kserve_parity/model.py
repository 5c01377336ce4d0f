"""The model both servers serve for the client parity check, written as for KServe: ``python model.py`` with
KServe installed, ``python -m kserve_sdk model.py`` with ours.

Model ``doubler`` doubles its numbers (v1 ``instances``, or the first v2 / gRPC input tensor), refuses a
negative number with KServe's ``InvalidInput`` (400 / INVALID_ARGUMENT) and answers header ``x-doubled: yes``.
"""
import argparse

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, model_server
from kserve.errors import InvalidInput


def refuse_negative(values: np.ndarray) -> None:
    if (values < 0).any():
        raise InvalidInput("negative numbers are not doubled")


class Doubler(Model):
    def __init__(self, name: str):
        super().__init__(name, return_response_headers=True)
        self.load()

    def load(self) -> bool:
        self.ready = True
        return self.ready

    async def predict(self, payload, headers=None, response_headers=None):
        response_headers["x-doubled"] = "yes"
        if isinstance(payload, InferRequest):
            values = payload.inputs[0].as_numpy()
            refuse_negative(values)
            output = InferOutput(name="output-0", shape=list(values.shape), datatype="FP32")
            output.set_data_from_numpy((values * 2).astype(np.float32), binary_data=False)
            return InferResponse(model_name=self.name, infer_outputs=[output], response_id=payload.id)
        values = np.asarray(payload["instances"], dtype=np.float32)
        refuse_negative(values)
        return {"predictions": (values * 2).tolist()}


parser = argparse.ArgumentParser(parents=[model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    ModelServer().start([Doubler(args.model_name)])
