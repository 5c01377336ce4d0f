"""A v2 / gRPC custom model as KServe's docs write one, unchanged: run with ``python model_grpc.py``.

It reads an ``InferRequest`` and answers an ``InferResponse`` whose ``InferOutput`` "output-0" is the FP32
input doubled, the same over v2 REST and gRPC.
"""
import argparse
from typing import Dict

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, logging, model_server
from kserve.errors import InvalidInput
from kserve.utils.utils import generate_uuid


class DoublingModel(Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name
        self.factor = None
        self.ready = False
        self.load()

    def load(self):
        self.factor = np.float32(2.0)
        self.ready = True

    def preprocess(self, payload: InferRequest, headers: Dict[str, str] = None) -> np.ndarray:
        req = payload.inputs[0]
        if req.datatype != "FP32":
            raise InvalidInput(f"input '{req.name}' is {req.datatype}, FP32 expected")
        return req.as_numpy()

    def predict(self, input_tensor: np.ndarray, headers: Dict[str, str] = None) -> InferResponse:
        result = input_tensor * self.factor
        infer_output = InferOutput(name="output-0", shape=list(result.shape), datatype="FP32",
                                   data=result.flatten().tolist())
        return InferResponse(model_name=self.name, infer_outputs=[infer_output], response_id=generate_uuid())


parser = argparse.ArgumentParser(parents=[model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    model = DoublingModel(args.model_name)
    model.load()
    ModelServer().start([model])
