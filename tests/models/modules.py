"""A v1/v2 model that reports whether this server process has imported the modules a request names
(v1 ``{"instances": ["pydantic"]}`` -> ``{"predictions": [false]}``; v2: a BYTES input of names, a BOOL
output): how tests check that plain v1/v2 serving never loads the time-series types."""
import sys

import numpy as np

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferResponse


class Modules(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.ready = True

    def predict(self, payload, headers=None):
        if isinstance(payload, dict):
            return {"predictions": [name in sys.modules for name in payload["instances"]]}
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in payload.inputs[0].as_numpy().ravel()]
        out = InferOutput("LOADED", [len(names)], "BOOL")
        out.set_data_from_numpy(np.array([n in sys.modules for n in names], dtype=bool))
        return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])


if __name__ == "__main__":
    kserve.ModelServer().start([Modules("modules")])
