"""A streaming model whose every answer is computed by a ``@kserve_sdk.batch`` step shared by the live streams.

"counter" streams ``steps`` numbers counting up from its ``text_input`` (generate_stream's, or a v2 request's
BYTES input), one per step; for the statistics and tracing tests, which read how its steps were batched.
"""
import argparse
import asyncio

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse, model_server


class Counter(kserve.Model):
    """Each answer is the stream's previous number plus one, computed with every other live stream's."""

    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    @kserve.batch(max_batch_size=8, max_wait_ms=50)
    async def step(self, numbers):
        await asyncio.sleep(0.01)  # a step's fixed cost, whatever its size
        return [n + 1 for n in numbers]

    async def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            number, parameters = int(payload.inputs[0].as_string()[0]), payload.parameters or {}
        else:
            number, parameters = int(payload["text_input"]), payload.get("parameters", {})
        for index in range(int(parameters.get("steps", 5))):
            number = await self.step(number)
            if isinstance(payload, InferRequest):
                yield self._response(payload.id, number)
            else:
                yield {"text_output": str(number), "index": index}

    def _response(self, request_id, number):
        out = InferOutput("text_output", [1], "BYTES")
        out.set_data_from_numpy(np.array([str(number).encode()], dtype=np.object_))
        return InferResponse(response_id=request_id, model_name=self.name, infer_outputs=[out])


if __name__ == "__main__":
    args, _ = argparse.ArgumentParser(parents=[model_server.parser]).parse_known_args()
    kserve.ModelServer().start([Counter("counter")])
