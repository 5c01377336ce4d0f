"""cb_bench.py's language model on kserve_sdk, step-batched or not.

    python hack/bench/cb_model.py --model_name lm --http_port 8080 --mode cb|unbatched \
        [--step_batch_size 64] [--step_wait_ms 2]

A stream is asked for with the INT32 tensor [start, count] on generate_stream (or infer_stream, gRPC
ModelStreamInfer) and answered with `count` v2 responses, the i-th holding INT32 output "y" = [start + i],
one per step of cb_step.py's model.
  cb         the step is decorated with @kserve_sdk.batch: every live stream's next token comes from one step
  unbatched  the same step called by each stream with its own row, no decorator (on the event loop, as
             an async method)
"""

import argparse

import cb_step

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse


class UnbatchedLM(kserve.Model):
    """Each stream steps alone."""

    def __init__(self, name: str):
        super().__init__(name)
        self.lm = cb_step.StepModel()
        self.ready = True

    async def next_token(self, row: cb_step.Row) -> int:
        return self.lm.step([row])[0]

    async def predict(self, payload: InferRequest, headers=None):
        start, count = (int(v) for v in payload.inputs[0].as_numpy().reshape(-1)[:2])
        row = self.lm.row(start)
        for _ in range(count):
            token = await self.next_token(row)
            yield InferResponse(response_id=payload.id, model_name=self.name,
                                infer_outputs=[InferOutput("y", [1], "INT32", data=[token])])


def batched_model(max_batch_size: int, max_wait_ms: float) -> type:
    """UnbatchedLM whose step is @kserve_sdk.batch'ed: what a user changes to batch the streams."""

    class BatchedLM(UnbatchedLM):
        @kserve.batch(max_batch_size=max_batch_size, max_wait_ms=max_wait_ms)
        def next_token(self, rows: list) -> list:
            return self.lm.step(rows)

    return BatchedLM


def main():
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser], add_help=False)
    parser.add_argument("--mode", choices=["cb", "unbatched"], required=True)
    parser.add_argument("--step_batch_size", type=int, default=64)
    parser.add_argument("--step_wait_ms", type=float, default=2)
    args, _ = parser.parse_known_args()
    cls = batched_model(args.step_batch_size, args.step_wait_ms) if args.mode == "cb" else UnbatchedLM
    kserve.ModelServer().start([cls(args.model_name)])


if __name__ == "__main__":
    main()
