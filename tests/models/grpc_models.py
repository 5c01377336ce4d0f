"""v2 models for the gRPC tests, written against KServe's API (only the import differs).

- "hdr": echoes request headers into outputs and sets response headers.
- "stats": per-row sum (FP64), argmax (INT64) and a label (BYTES) of an FP32 [N, K] input.
"""
import argparse

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server


class HeaderEcho(kserve.Model):
    """Output REQUEST_ID: the x-request-id header; output HEADER_NAMES: the x-* header names, sorted."""

    def __init__(self, name):
        super().__init__(name, return_response_headers=True)
        self.ready = True

    def predict(self, payload: InferRequest, headers=None, response_headers=None):
        names = sorted(k for k in headers if k.startswith("x-"))
        response_headers["x-model-said"] = "hello " + headers.get("x-request-id", "nobody")
        rid = InferOutput("REQUEST_ID", [1], "BYTES")
        rid.set_data_from_numpy(np.array([headers.get("x-request-id", "").encode()], dtype=np.object_))
        keys = InferOutput("HEADER_NAMES", [len(names)], "BYTES")
        keys.set_data_from_numpy(np.array([n.encode() for n in names], dtype=np.object_))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[rid, keys])

    def postprocess(self, result, headers=None, response_headers=None):
        response_headers["x-postprocessed"] = "yes"
        return result


class Stats(kserve.Model):
    """Row statistics of input "values" (FP32 [N, K])."""

    def __init__(self, name):
        super().__init__(name)
        self.load()

    def load(self):
        self.ready = True
        return self.ready

    def get_input_types(self):
        return [{"name": "values", "datatype": "FP32", "shape": [-1, -1]}]

    def get_output_types(self):
        return [{"name": "sum", "datatype": "FP64", "shape": [-1]},
                {"name": "argmax", "datatype": "INT64", "shape": [-1]},
                {"name": "label", "datatype": "BYTES", "shape": [-1]}]

    def predict(self, payload: InferRequest, headers=None):
        values = payload.get_input_by_name("values").as_numpy()
        sums = values.astype(np.float64).sum(axis=1)
        argmax = values.argmax(axis=1).astype(np.int64)
        labels = np.array([f"row{i}:{'big' if s > 10 else 'small'}".encode() for i, s in enumerate(sums)],
                          dtype=np.object_)
        outputs = []
        for name, datatype, array in (("sum", "FP64", sums), ("argmax", "INT64", argmax), ("label", "BYTES", labels)):
            out = InferOutput(name=name, shape=list(array.shape), datatype=datatype)
            out.set_data_from_numpy(array)
            outputs.append(out)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=outputs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([HeaderEcho("hdr"), Stats("stats")])
