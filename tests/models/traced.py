"""Models for the tracing tests: every stage overridden (echo), a batched one, a streaming one.

Run with the OTEL_* environment of tests/test_tracing.py, which collects the spans.
"""
import argparse

from streaming import Tokens  # tests/models/streaming.py: yields the words of its prompt

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferResponse, model_server


class Echo(kserve.Model):
    """v1: the instances come back as predictions; v2: INPUT0 comes back as OUTPUT0. Each stage is its own."""

    def __init__(self, name, max_batch_size=None):
        super().__init__(name, max_batch_size=max_batch_size)
        self.max_latency_ms = 1
        self.ready = True

    async def preprocess(self, payload, headers=None):
        return payload

    async def predict(self, payload, headers=None):
        if isinstance(payload, dict):
            return {"predictions": payload["instances"]}
        array = payload.inputs[0].as_numpy()
        out = InferOutput("OUTPUT0", list(array.shape), payload.inputs[0].datatype)
        out.set_data_from_numpy(array, binary_data=False)
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])

    async def postprocess(self, result, headers=None, response_headers=None):
        return result


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([Echo("echo"), Echo("other"), Echo("batched", max_batch_size=4), Tokens("tokens")])
