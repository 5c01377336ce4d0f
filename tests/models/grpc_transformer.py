"""A transformer for samples/custom_model: inputs come in millimetres, the predictor wants centimetres.

Only preprocess is overridden; predict is the default, which forwards to --predictor_host over
--predictor_protocol (grpc-v2 in the tests).
"""
import argparse

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferInput, InferRequest, model_server


class MillimetreTransformer(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def preprocess(self, payload: InferRequest, headers=None) -> InferRequest:
        rows = payload.inputs[0].as_numpy().astype(np.float32) / 10.0
        infer_input = InferInput(name="input-0", shape=list(rows.shape), datatype="FP32")
        infer_input.set_data_from_numpy(rows)
        return InferRequest(model_name=self.name, infer_inputs=[infer_input], request_id=payload.id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([MillimetreTransformer(args.model_name)])
