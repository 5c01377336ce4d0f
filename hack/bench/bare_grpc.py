"""Feature-less grpc.aio "add-one" server: the gRPC benchmark ceiling.

Implements only what the benchmark calls on ``inference.GRPCInferenceService``
(the Open Inference Protocol v2 service), with tritonclient's own messages:

  * ModelInfer:  one input in ``raw_input_contents``; output-0 = input + 1, same
    dtype and shape, returned in ``raw_output_contents`` (what tritonclient reads).
  * ModelStreamInfer: the streaming counter of stream_bench.py ([start, count] -> count messages).
  * ServerLive / ServerReady / ModelReady: always true (readiness probes).

No logging, no metrics, no validation beyond what is needed to answer correctly. The service is
served through its generic handler only, as kserve_sdk serves it: grpc.aio's registered methods cost
every call an ``asyncio.wait`` over one pending task per method (docs/performance.md).
Max send/receive message length is 64 MiB, plenty for the 1 MiB case.

    python hack/bench/bare_grpc.py --port 8081 [--host 127.0.0.1]
"""

import argparse
import asyncio

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

MODEL = "addone"
OUTPUT = "output-0"
MAX_MSG = 64 * 1024 * 1024

DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


class AddOne(service_pb2_grpc.GRPCInferenceServiceServicer):
    async def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=request.name == MODEL)

    async def ModelInfer(self, request, context):
        if request.model_name != MODEL:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.model_name!r} not found")
        if len(request.inputs) != 1 or len(request.raw_input_contents) != 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "expected exactly one input in raw_input_contents")
        inp = request.inputs[0]
        dtype = DTYPES.get(inp.datatype)
        if dtype is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported datatype {inp.datatype!r}")
        x = np.frombuffer(request.raw_input_contents[0], dtype=dtype)
        y = x + x.dtype.type(1)
        return service_pb2.ModelInferResponse(
            model_name=MODEL,
            id=request.id,
            outputs=[service_pb2.ModelInferResponse.InferOutputTensor(
                name=OUTPUT, datatype=inp.datatype, shape=inp.shape)],
            raw_output_contents=[y.tobytes()],
        )


    async def ModelStreamInfer(self, request_iterator, context):
        """The streaming ceiling (stream_bench.py): an INT32 input [start, count] is answered with `count`
        messages, the i-th holding INT32 output "y" = [start + i] as raw content; each message is yielded
        on its own, as a streaming server must."""
        async for request in request_iterator:
            if len(request.raw_input_contents) != 1:
                yield service_pb2.ModelStreamInferResponse(error_message="expected one raw INT32 input")
                continue
            start, count = np.frombuffer(request.raw_input_contents[0], dtype="<i4")[:2].tolist()
            for i in range(count):
                yield service_pb2.ModelStreamInferResponse(infer_response=service_pb2.ModelInferResponse(
                    model_name=request.model_name, id=request.id,
                    outputs=[service_pb2.ModelInferResponse.InferOutputTensor(name="y", datatype="INT32", shape=[1])],
                    raw_output_contents=[(start + i).to_bytes(4, "little", signed=True)]))


class _GenericOnly:
    """The server as the generated adder sees it, with its registered-method table dropped."""

    def __init__(self, server):
        self._server = server

    def add_generic_rpc_handlers(self, handlers):
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service, handlers):
        pass  # the generic handler the adder registered first serves the same table


async def serve(host, port):
    server = grpc.aio.server(options=[
        ("grpc.max_send_message_length", MAX_MSG),
        ("grpc.max_receive_message_length", MAX_MSG),
        ("grpc.so_reuseport", 0),
    ])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(AddOne(), _GenericOnly(server))
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    await server.wait_for_termination()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
