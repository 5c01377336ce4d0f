"""A transformer in front of the iris classifier (samples/custom_model).

preprocess: named measurements in millimetres -> rows in centimetres, the predictor's input.
predict:    not written here: the default forwards to --predictor_host (v1, v2 or grpc-v2).
postprocess: class ids -> class names.

v1:  {"instances": [{"sepal_length_mm": 51, "sepal_width_mm": 35, "petal_length_mm": 14, "petal_width_mm": 2}]}
     -> {"predictions": ["setosa"]}
v2:  input "measurements_mm" FP32 [N, 4] -> outputs "output-0" INT64 [N] and "class_name" BYTES [N]
"""
import argparse

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferInput, InferOutput, InferRequest, InferResponse, model_server

FEATURES = ["sepal_length_mm", "sepal_width_mm", "petal_length_mm", "petal_width_mm"]
CLASSES = np.array(["setosa", "versicolor", "virginica"], dtype=np.object_)


class IrisTransformer(kserve.Model):
    """Converts millimetres to centimetres on the way in and class ids to names on the way out."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    def preprocess(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            rows = payload.inputs[0].as_numpy().astype(np.float32) / 10.0
            tensor = InferInput("input-0", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows)
            return InferRequest(model_name=self.name, infer_inputs=[tensor], request_id=payload.id)
        rows = [[float(item[f]) / 10.0 for f in FEATURES] for item in payload["instances"]]
        return {"instances": rows}

    def postprocess(self, result, headers=None):
        if isinstance(result, InferResponse):
            ids = result.get_output_by_name("output-0").as_numpy()
            names = InferOutput("class_name", list(ids.shape), "BYTES")
            names.set_data_from_numpy(CLASSES[ids])
            result.outputs.append(names)
            return result
        return {"predictions": [CLASSES[i] for i in result["predictions"]]}


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([IrisTransformer(args.model_name)])


if __name__ == "__main__":
    main()
