"""Models for Triton's logging and model configuration extensions.

"batched": FP32 [-1, 4] in and out, batched when it is --model_name and --max_batch_size is given;
"plain": BYTES [-1] in, INT64 [-1, 2] out, never batched; "odd": describes its input as a bare string.
Each v1 predict writes a debug, an info and a warning line naming the model and this process's pid,
and answers that pid.
"""
import os

import kserve_sdk as kserve
from kserve_sdk.logging import logger


class Described(kserve.Model):
    def __init__(self, name, inputs, outputs):
        super().__init__(name)
        self.inputs, self.outputs = inputs, outputs
        self.ready = True

    def get_input_types(self):
        return self.inputs

    async def get_output_types(self):  # a coroutine: the server awaits it
        return self.outputs

    def predict(self, payload, headers=None):
        pid = os.getpid()
        logger.debug("predict-debug of %s in %d", self.name, pid)
        logger.log(9, "predict-verbose2 of %s in %d", self.name, pid)
        logger.info("predict-info of %s in %d", self.name, pid)
        logger.warning("predict-warning of %s in %d", self.name, pid)
        return {"predictions": [pid]}


if __name__ == "__main__":
    models = [
        Described("batched", [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
                  [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]),
        Described("plain", [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
                  [{"name": "IDS", "datatype": "INT64", "shape": [-1, 2]}]),
        Described("odd", ["INPUT0"], []),
    ]
    kserve.ModelServer().start(models)
