"""The add-one model as a BentoML service, run from the `bentoml` venv of setup_peers.sh.

    cd hack/bench/bentoml_addone && BENTOML_DO_NOT_TRACK=True \
        /tmp/bench-venvs/bentoml/bin/bentoml serve service:AddOne --host 127.0.0.1 --port 8080

POST /predict {"instances": [[...]]} -> {"predictions": [[... + 1]]}: one @bentoml.api, BentoML's
natural JSON route (the method's name, its arguments as the JSON object's fields). Default service
settings: one worker process under BentoML's supervisor.
"""

import bentoml
import numpy as np


@bentoml.service
class AddOne:
    """output = input + 1, on the JSON body KServe's v1 protocol uses."""

    @bentoml.api
    def predict(self, instances: list[list[float]]) -> dict:
        y = np.asarray(instances, dtype=np.float32) + np.float32(1)
        return {"predictions": y.tolist()}
