"""The iris classifier of samples/custom_model, written against the v2 tensor API and called over gRPC.

``predict`` receives an ``InferRequest`` (from gRPC ``ModelInfer`` or v2 REST alike) and returns an
``InferResponse`` with two outputs:

  input  "input-0"        FP32  [N, 4]   sepal length, sepal width, petal length, petal width (cm)
  output "output-0"       INT64 [N]      the class: 0 setosa, 1 versicolor, 2 virginica
  output "probabilities"  FP32  [N, 3]   the classifier's probability of each class
"""
import argparse
import os

import joblib
import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server
from kserve_sdk.errors import InvalidInput

HERE = os.path.dirname(os.path.abspath(__file__))
ARTEFACT = "model.joblib"


class IrisGrpcClassifier(kserve.Model):
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
        return [{"name": "output-0", "datatype": "INT64", "shape": [-1]},
                {"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]}]

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        tensor = payload.get_input_by_name("input-0")
        if tensor is None:
            raise InvalidInput('expected an input named "input-0"')
        rows = tensor.as_numpy().astype(np.float32)
        if rows.ndim != 2 or rows.shape[1] != 4:
            raise InvalidInput(f'"input-0" must have shape [N, 4], not {list(rows.shape)}')
        classes = InferOutput("output-0", [rows.shape[0]], "INT64")
        classes.set_data_from_numpy(self.classifier.predict(rows).astype(np.int64))
        probabilities = InferOutput("probabilities", [rows.shape[0], 3], "FP32")
        probabilities.set_data_from_numpy(self.classifier.predict_proba(rows).astype(np.float32))
        return InferResponse(response_id=payload.id, model_name=self.name,
                             infer_outputs=[classes, probabilities])


def model_dir_from(args) -> str:
    """STORAGE_URI / --model_dir when it holds the artefact, else the copy beside this file."""
    if args.model_dir and os.path.exists(os.path.join(args.model_dir, ARTEFACT)):
        return args.model_dir
    return os.path.join(HERE, "model")


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([IrisGrpcClassifier(args.model_name, model_dir_from(args))])


if __name__ == "__main__":
    main()
