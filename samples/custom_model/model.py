"""An iris classifier served by kserve_sdk: nearest class centroid over four flower measurements.

v1:  POST /v1/models/<name>:predict  {"instances": [[5.9, 3.0, 4.2, 1.5]]} -> {"predictions": [1]}
v2:  POST /v2/models/<name>/infer    input "input-0" FP32 [N, 4]          -> output "output-0" INT64 [N]
"""
import argparse
import json
import os

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.utils.utils import get_predict_input, get_predict_response

HERE = os.path.dirname(os.path.abspath(__file__))
ARTEFACT = "centroids.json"


class IrisClassifier(kserve.Model):
    """Predicts the iris class (0 setosa, 1 versicolor, 2 virginica) of each row of measurements."""

    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.centroids = None
        self.load()

    def load(self) -> bool:
        with open(os.path.join(self.model_dir, ARTEFACT)) as f:
            self.centroids = np.asarray(json.load(f)["centroids"], dtype=np.float32)
        self.ready = True
        return self.ready

    def get_input_types(self):
        return [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]

    def get_output_types(self):
        return [{"name": "output-0", "datatype": "INT64", "shape": [-1]}]

    def predict(self, payload, headers=None):
        rows = np.asarray(get_predict_input(payload), dtype=np.float32).reshape(-1, 4)
        distances = ((rows[:, None, :] - self.centroids[None, :, :]) ** 2).sum(axis=2)
        classes = distances.argmin(axis=1).astype(np.int64)
        return get_predict_response(payload, classes, self.name)


def model_dir_from(args) -> str:
    """STORAGE_URI / --model_dir when it holds the artefact, else the copy beside this file."""
    if args.model_dir and os.path.exists(os.path.join(args.model_dir, ARTEFACT)):
        return args.model_dir
    return os.path.join(HERE, "model")


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    model = IrisClassifier(args.model_name, model_dir_from(args))
    kserve.ModelServer().start([model])


if __name__ == "__main__":
    main()
