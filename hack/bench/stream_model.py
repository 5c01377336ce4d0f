"""Streaming counter model for stream_bench.py, on kserve_sdk.

    python hack/bench/stream_model.py --model_name stream --http_port 8080 \
        --grpc_port 8081 --enable_grpc true

``predict`` is an async generator: the request's INT32 tensor [start, count] is answered with `count`
v2 responses, the i-th holding one INT32 output "y" = [start + i]. No sleeps: the bench measures the
server's cost per streamed response. mlserver_stream/ is the same model for MLServer.
"""

import argparse

import kserve_sdk as kserve
from kserve_sdk import InferOutput, InferRequest, InferResponse


class Counter(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True

    async def predict(self, payload: InferRequest, headers=None):
        start, count = (int(v) for v in payload.inputs[0].as_numpy().reshape(-1)[:2])
        for i in range(count):
            yield InferResponse(response_id=payload.id, model_name=self.name,
                                infer_outputs=[InferOutput("y", [1], "INT32", data=[start + i])])


def main():
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser], add_help=False)
    args, _ = parser.parse_known_args()
    kserve.ModelServer().start([Counter(args.model_name)])


if __name__ == "__main__":
    main()
