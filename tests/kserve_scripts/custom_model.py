"""A custom model as KServe's docs write one (v1 predict), unchanged: run with ``python custom_model.py``.

It scores rows of three features with a small linear layer and answers ``{"predictions": [...]}``, with the
docs' ``prediction-time-latency`` response header.
"""
import argparse
import time
from typing import Dict, Union

import numpy as np
from kserve import InferRequest, Model, ModelServer, logging, model_server
from kserve.errors import InvalidInput
from kserve.utils.utils import generate_uuid


class CustomModel(Model):
    def __init__(self, name: str):
        super().__init__(name, return_response_headers=True)
        self.model = None
        self.ready = False
        self.load()

    def load(self):
        # stands for loading weights from storage
        self.model = np.array([[1.0, -1.0], [0.5, 0.5], [2.0, 0.0]], dtype=np.float32)
        self.ready = True

    def preprocess(self, payload: Union[Dict, InferRequest], headers: Dict[str, str] = None) -> np.ndarray:
        if isinstance(payload, Dict) and "instances" in payload:
            rows = np.asarray(payload["instances"], dtype=np.float32)
            if rows.ndim != 2 or rows.shape[1] != 3:
                raise InvalidInput(f"expected rows of 3 features, got shape {list(rows.shape)}")
            return rows
        raise InvalidInput("invalid payload")

    def predict(self, input_tensor: np.ndarray, headers: Dict[str, str] = None,
                response_headers: Dict[str, str] = None) -> Dict:
        start = time.time()
        scores = input_tensor @ self.model
        end = time.time()
        if response_headers is not None:
            response_headers.update({"prediction-time-latency": f"{round((end - start) * 1000, 9)}"})
        return {"id": generate_uuid(), "predictions": scores.tolist()}


parser = argparse.ArgumentParser(parents=[model_server.parser])
args, _ = parser.parse_known_args()

if __name__ == "__main__":
    if args.configure_logging:
        logging.configure_logging(args.log_config_file)
    model = CustomModel(args.model_name)
    model.load()
    ModelServer().start([model])
