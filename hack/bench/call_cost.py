"""What one small gRPC ModelInfer costs inside the server process, without the network or grpc's core.

    .venv/bin/python hack/bench/call_cost.py                  # CPU µs per call: ours and bare, in turns
    .venv/bin/python hack/bench/call_cost.py --instructions   # instructions per call under callgrind

The add-one model of addone_model.py is served by kserve_sdk's servicer (default flags: metrics, the
latency line at INFO, statistics) and by bare_grpc.py's, each called directly on an event loop with the
[1,16] FP32 request of grpc_bench.py, already parsed as grpc would hand it over. The call's context is a
stand-in with the two methods the servicers use. Time is the thread's CPU time (the median of 7 batches);
--instructions runs this script under valgrind's callgrind with two call counts and prints the
difference per call (needs valgrind: apt-get install valgrind), which does not move with the machine's
load. Quick sync stages are allowed on the loop from the first call, so a slow valgrind run does not
send them to the thread pool.
"""
import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]


class _Context:
    def invocation_metadata(self):
        return ()

    def set_trailing_metadata(self, metadata):
        pass

    async def abort(self, code, details, trailing_metadata=()):
        raise RuntimeError(f"{code}: {details}")


def servicers():
    """{"ours": (servicer, request class), "bare": (...)} for the add-one model."""
    sys.argv = [sys.argv[0], "--model_name", "addone"]
    import kserve_sdk
    from kserve_sdk import executor, metrics
    from kserve_sdk.handlers.grpc import InferenceServicer
    from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb

    import addone_model
    import bare_grpc

    model = addone_model.AddOne("addone")
    model.load()
    server = kserve_sdk.ModelServer()
    server._register_ready([model])
    metrics.setup()
    executor.configure(6, 1e6)
    import logging

    for handler in logging.getLogger("kserve.trace").handlers:  # the latency lines: formatted, not shown
        handler.setStream(open(os.devnull, "w"))
    return {"ours": (InferenceServicer(server.dataplane), pb.ModelInferRequest),
            "bare": (bare_grpc.AddOne(), bare_grpc.service_pb2.ModelInferRequest)}


def request_bytes() -> bytes:
    import numpy as np
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="addone")
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    return request.SerializeToString()


async def calls(servicer, message_class, data: bytes, count: int) -> float:
    """CPU seconds of the loop's thread for ``count`` calls."""
    context = _Context()
    start = time.thread_time()
    for _ in range(count):
        await servicer.ModelInfer(message_class.FromString(data), context)
    return time.thread_time() - start


def cpu_per_call() -> None:
    data, served = request_bytes(), servicers()
    for name, (servicer, cls) in served.items():
        asyncio.run(calls(servicer, cls, data, 2000))  # warm-up
    for name, (servicer, cls) in served.items():
        runs = [asyncio.run(calls(servicer, cls, data, 3000)) / 3000 * 1e6 for _ in range(7)]
        print(f"{name}: {statistics.median(runs):.1f} µs CPU per call (median of 7 x 3000)")


def instructions_per_call() -> None:
    def collected(target: str, count: int) -> int:
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              sys.executable, __file__, "--run", target, str(count)],
                             capture_output=True, text=True, timeout=1800).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    for target in ("ours", "bare"):
        per_call = (collected(target, 1500) - collected(target, 500)) / 1000
        print(f"{target}: {per_call / 1000:.0f}k instructions per call (callgrind, 1500 - 500 calls)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument("--run", nargs=2, metavar=("TARGET", "COUNT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        servicer, cls = servicers()[args.run[0]]
        asyncio.run(calls(servicer, cls, request_bytes(), int(args.run[1])))
    elif args.instructions:
        instructions_per_call()
    else:
        cpu_per_call()


if __name__ == "__main__":
    main()
