"""Add-one model with a fixed cost per predict call, for batch_bench.py (kserve_sdk only).

    python hack/bench/batch_model.py --model_name addone --http_port 8080 \
        --cost_ms 20 --slots 1 [--batch_max_size 64 --batch_max_latency_ms 5]

``predict`` is a plain ``def``, so the server runs it in its thread pool; it sleeps ``cost_ms`` once per
call whatever the number of rows, then answers output-0 = input-0 + 1, rows as received. At most
``slots`` calls sleep at once (1: one accelerator that runs one call at a time; 0: no limit, so as many
as the server's thread pool runs, min(32, CPUs + 4)). ``--batch_max_size`` above 1 turns
adaptive batching on through the constructor: ``Model(name, max_batch_size=N, max_latency_ms=M)``.
"""

import argparse
import threading
import time
from contextlib import nullcontext

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse


class SlowAddOne(kserve.Model):
    def __init__(self, name: str, cost_s: float, slots: int, **batching):
        super().__init__(name, **batching)
        self.cost_s = cost_s
        self.slots = threading.BoundedSemaphore(slots) if slots > 0 else nullcontext()
        self.ready = True

    def predict(self, payload: InferRequest, headers=None):
        with self.slots:
            time.sleep(self.cost_s)                 # the fixed per-call cost
        x = payload.inputs[0].as_numpy()
        y = x + x.dtype.type(1)
        out = InferOutput(name="output-0", shape=list(y.shape), datatype=payload.inputs[0].datatype)
        out.set_data_from_numpy(y, binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id)


def main():
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser], add_help=False)
    parser.add_argument("--cost_ms", type=float, default=20.0)
    parser.add_argument("--slots", type=int, default=1, help="calls that may run at once; 0: no limit")
    parser.add_argument("--batch_max_size", type=int, default=0, help="0 or 1: batching off")
    parser.add_argument("--batch_max_latency_ms", type=float, default=5.0)
    args, _ = parser.parse_known_args()
    batching = {}
    if args.batch_max_size > 1:
        batching = {"max_batch_size": args.batch_max_size, "max_latency_ms": args.batch_max_latency_ms}
    model = SlowAddOne(args.model_name, args.cost_ms / 1000.0, args.slots, **batching)
    kserve.ModelServer().start([model])


if __name__ == "__main__":
    main()
