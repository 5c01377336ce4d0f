"""A predictor serving one REST protocol only, ONLY_PROTOCOL=v1 or v2 (as a KServe v1-only runtime, or an
Open Inference Protocol server, does): the other protocol's routes answer 404. Its model doubles numbers,
v1 instances or the first v2 input. For the transformer's "protocols disagree" tests."""
import argparse
import os

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferRequest, model_server
from kserve_sdk.utils.utils import get_predict_response

#: ONLY_PROTOCOL -> the REST APIs (by name) served
KEPT = {"v1": {"server", "v1"}, "v2": {"server", "v2", "v2_streams", "triton"}}


class Doubling(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            return get_predict_response(payload, payload.inputs[0].as_numpy() * 2, self.name)
        return {"predictions": (np.asarray(payload["instances"]) * 2).tolist()}


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kept = KEPT[os.environ["ONLY_PROTOCOL"]]
    model_server.REST_APIS[:] = [api for api in model_server.REST_APIS if api.name in kept]
    kserve.ModelServer().start([Doubling(args.model_name)])
