"""Add-one model written against the KServe Python SDK API.

The same file runs on our package or on upstream KServe:

    BENCH_IMPL=ours   -> import kserve_sdk as kserve   (default)
    BENCH_IMPL=kserve -> import kserve

    python hack/bench/addone_model.py --model_name addone --http_port 8080 \
        --grpc_port 8081 --enable_grpc false
"""

import argparse
import os

import numpy as np

IMPL = os.environ.get("BENCH_IMPL", "ours")
if IMPL == "ours":
    import kserve_sdk as kserve
    from kserve_sdk import InferOutput, InferRequest, InferResponse
elif IMPL == "kserve":
    import kserve
    from kserve import InferOutput, InferRequest, InferResponse
else:
    raise SystemExit(f"BENCH_IMPL must be 'ours' or 'kserve', not {IMPL!r}")


class AddOne(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = False

    def load(self) -> bool:
        self.ready = True
        return self.ready

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            x = payload.inputs[0].as_numpy()
            y = x + x.dtype.type(1)
            binary = payload.use_binary_outputs
            out = InferOutput(name="output-0", shape=list(y.shape), datatype=payload.inputs[0].datatype)
            out.set_data_from_numpy(y, binary_data=binary)
            return InferResponse(
                model_name=self.name,
                infer_outputs=[out],
                response_id=payload.id,
                use_binary_outputs=binary,
            )
        return {"predictions": (np.asarray(payload["instances"]) + 1).tolist()}


def main():
    # KServe's idiom: extend the server's own parser; ModelServer() reads the
    # --http_port/--grpc_port/... flags itself.
    parent = getattr(getattr(kserve, "model_server", None), "parser", None)
    parser = argparse.ArgumentParser(parents=[parent] if parent else [], add_help=False)
    if parent is None:
        parser.add_argument("--model_name", default="model")
    args, _ = parser.parse_known_args()
    model = AddOne(args.model_name)
    model.load()
    kserve.ModelServer().start([model])


if __name__ == "__main__":
    main()
