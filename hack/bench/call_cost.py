"""What one small gRPC ModelInfer costs inside the server process, without the network or grpc's core.

    .venv/bin/python hack/bench/call_cost.py                  # CPU µs per call: ours and bare, in turns
    .venv/bin/python hack/bench/call_cost.py --instructions   # instructions per call under callgrind
    .venv/bin/python hack/bench/call_cost.py --server         # whole servers under callgrind, per request
    .venv/bin/python hack/bench/call_cost.py --server --rest  # the same for small v2 REST requests

The add-one model of addone_model.py is served by kserve_sdk's servicer (default flags: metrics, the
latency line at INFO, statistics) and by bare_grpc.py's, each called directly on an event loop with the
[1,16] FP32 request of grpc_bench.py, already parsed as grpc would hand it over. The call's context is a
stand-in with the two methods the servicers use. Time is the thread's CPU time (the median of 7 batches);
--instructions runs this script under valgrind's callgrind with two call counts and prints the
difference per call (needs valgrind: apt-get install valgrind), which does not move with the machine's
load. Quick sync stages are allowed on the loop from the first call, so a slow valgrind run does not
send them to the thread pool.

--server counts what the in-process figures leave out: the real server processes (bare_grpc.py and
addone_model.py with gRPC on, as grpc_bench.py starts them) run under callgrind, h2load sends
--warmup requests, the counters are zeroed, and --requests more (8 streams on one connection) are
counted over every thread of the process: grpc's core and poller, the event loop, our code and the
model. Extra environment for ours (e.g. KSERVE_LOGLEVEL=WARNING) shows what a feature costs. Each
server takes a minute or two under valgrind; needs valgrind and h2load (nghttp2-client).
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
sys.path[:0] = [os.environ.get("BENCH_SDK_TREE") or os.path.dirname(os.path.dirname(HERE)), HERE]


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
    import addone_model
    import bare_grpc

    import kserve_sdk
    from kserve_sdk import executor, metrics
    from kserve_sdk.handlers.grpc import InferenceServicer
    from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb

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
    for servicer, cls in served.values():
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


def _h2load(port: int, framed: str, count: int, rest: bool = False) -> int:
    """Send ``count`` ModelInfer requests (8 streams, one connection), or with ``rest`` as many v2 REST
    infer requests (HTTP/1.1, one connection, one at a time); the number that got HTTP 200."""
    if rest:
        how = ["--h1", "-m", "1", "-H", "content-type: application/json",
               f"http://127.0.0.1:{port}/v2/models/addone/infer"]
    else:
        how = ["-m", "8", "-H", "content-type: application/grpc", "-H", "te: trailers",
               f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"]
    out = subprocess.run(["h2load", "-n", str(count), "-t", "1", "-c", "1", "-d", framed, *how],
                         capture_output=True, text=True, timeout=900).stdout
    return int(re.search(r"status codes: (\d+) 2xx", out).group(1))


def _counted(target, workdir: str, framed: str, warmup: int, requests: int, rest: bool = False,
             keep: str = "") -> float:
    """Instructions per request of one server process under callgrind (every thread, from the dump);
    the dump is copied into ``keep`` when given (for callgrind_annotate)."""
    import benchlib

    out = os.path.join(workdir, f"cg.{target.name}")
    target.cmd = ["valgrind", "--tool=callgrind", "--cache-sim=no", "--branch-sim=no",
                  f"--callgrind-out-file={out}.%p"] + target.cmd
    target.start(workdir)
    try:
        error = target.wait_ready(300, interval=1)
        if error:
            raise SystemExit(f"{target.name}: {error}\n{target.log_tail()}")
        _h2load(target.port, framed, warmup, rest)  # inline pacing settles, lazy imports and caches fill
        subprocess.run(["callgrind_control", "-z", str(target.proc.pid)], capture_output=True, check=True)
        answered = _h2load(target.port, framed, requests, rest)
        subprocess.run(["callgrind_control", "-d", str(target.proc.pid)], capture_output=True, check=True)
    finally:
        benchlib.stop_group(target.proc, grace=30)
    if keep:
        import shutil

        os.makedirs(keep, exist_ok=True)
        shutil.copy(f"{out}.{target.proc.pid}.1", os.path.join(keep, f"callgrind.{target.name}"))
    with open(f"{out}.{target.proc.pid}.1") as f:
        total = int(re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M).group(1))
    if answered != requests:
        raise SystemExit(f"{target.name}: {answered} of {requests} requests answered with HTTP 200")
    return total / requests


def rest_body() -> bytes:
    """The small v2 REST request: the same [1,16] FP32 tensor as JSON."""
    import orjson

    return orjson.dumps({"id": "bench", "inputs": [{"name": "input-0", "shape": [1, 16], "datatype": "FP32",
                                                    "data": list(range(16))}]})


def instructions_per_request(names: list, env: dict, warmup: int, requests: int, rest: bool = False,
                             keep: str = "") -> None:
    import tempfile
    from types import SimpleNamespace

    import benchlib

    with tempfile.TemporaryDirectory(prefix="call-cost-") as workdir:
        framed = os.path.join(workdir, "request.body")
        body = request_bytes()
        with open(framed, "wb") as f:
            f.write(rest_body() if rest else b"\x00" + len(body).to_bytes(4, "big") + body)
        args = SimpleNamespace(python=sys.executable, venvs=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"))
        for target in benchlib.build_targets(names, args, workdir, "http" if rest else "grpc"):
            if target.unavailable:
                print(f"{target.name}: unavailable: {target.unavailable}")
                continue
            if target.name == "ours":
                target.env.update(env)
                # Valgrind slows the clock the quick-stage test reads (1 ms): without this the add-one predict
                # would move between the loop and a thread with the machine's load, and so would the count.
                target.cmd += ["--inline_sync_below_ms", "1000"]
            per_request = _counted(target, workdir, framed, warmup, requests, rest, keep)
            extra = " ".join(f"{k}={v}" for k, v in env.items()) if target.name == "ours" else ""
            print(f"{target.name}{' (' + extra + ')' if extra else ''}: {per_request / 1000:.0f}k instructions "
                  f"per {'REST v2' if rest else 'gRPC'} request (whole process under callgrind, {requests} requests)",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument("--server", action="store_true", help="count the whole server processes' instructions "
                    "per request under callgrind")
    ap.add_argument("--targets", default="bare,ours", help="--server: comma list of bare, ours, kserve")
    ap.add_argument("--rest", action="store_true", help="--server: small v2 REST requests (HTTP/1.1) instead "
                    "of gRPC; bare is then the bare Tornado server")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="--server: environment for ours (repeatable), e.g. KSERVE_LOGLEVEL=WARNING")
    ap.add_argument("--warmup", type=int, default=300, help="--server: requests before counting")
    ap.add_argument("--requests", type=int, default=400, help="--server: requests counted")
    ap.add_argument("--keep", default="", metavar="DIR", help="--server: keep each server's callgrind dump "
                    "in DIR (callgrind_annotate --inclusive=yes DIR/callgrind.ours shows where it went)")
    ap.add_argument("--run", nargs=2, metavar=("TARGET", "COUNT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        servicer, cls = servicers()[args.run[0]]
        asyncio.run(calls(servicer, cls, request_bytes(), int(args.run[1])))
    elif args.server:
        env = dict(item.split("=", 1) for item in args.env)
        instructions_per_request(args.targets.split(","), env, args.warmup, args.requests, args.rest,
                                 args.keep)
    elif args.instructions:
        instructions_per_call()
    else:
        cpu_per_call()


if __name__ == "__main__":
    main()
