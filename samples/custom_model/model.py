"""An iris classifier served by kserve_sdk: a scikit-learn LogisticRegression trained by train.py.

v1:  POST /v1/models/<name>:predict  {"instances": [[5.1, 3.5, 1.4, 0.2]]} -> {"predictions": [0]}
v2:  POST /v2/models/<name>/infer    input "input-0" FP32 [N, 4]       -> output "output-0" INT64 [N]

Classes: 0 setosa, 1 versicolor, 2 virginica. Measurements in centimetres: sepal length, sepal width,
petal length, petal width.
"""
import argparse
import os

import joblib
import numpy as np

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.utils.utils import get_predict_input, get_predict_response

HERE = os.path.dirname(os.path.abspath(__file__))
ARTEFACT = "model.joblib"


class IrisClassifier(kserve.Model):
    """Predicts the iris class of each row of four measurements."""

    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.classifier = None
        self.load()

    def load(self) -> bool:
        self.classifier = joblib.load(os.path.join(self.model_dir, ARTEFACT))
        self.ready = True
        return self.ready

    def get_input_types(self):
        return [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}]

    def get_output_types(self):
        return [{"name": "output-0", "datatype": "INT64", "shape": [-1]}]

    def predict(self, payload, headers=None):
        rows = np.asarray(get_predict_input(payload), dtype=np.float32).reshape(-1, 4)
        classes = self.classifier.predict(rows).astype(np.int64)
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
