"""Streamed responses per second, REST SSE and gRPC, kserve_sdk vs MLServer 1.7.1 and a bare grpc.aio server.

    .venv/bin/python hack/bench/stream_bench.py [--targets bare,ours,mlserver] \
        [--cases sse-stream@c1,...] [--duration 8] [--count 1000]

Targets (free 127.0.0.1 ports, HTTP and gRPC both on, stopped by process group at exit):
  bare      hack/bench/bare_grpc.py: ModelStreamInfer building and yielding each message, no SDK (gRPC only)
  ours      hack/bench/stream_model.py (kserve_sdk): an async-generator predict
  mlserver  mlserver start <copy of hack/bench/mlserver_stream> (MLModel.predict_stream),
            parallel_workers 0, from the venv of setup_peers.sh
  litserve  hack/bench/litserve_server.py --api stream (LitAPI(stream=True)), in the sse-stream cells:
            POST /predict answered with newline-delimited JSON, its own streaming format
All answer the INT32 tensor [start, count] with `count` responses y = start, start + 1, ... (no
sleeps). The load is stream_client.py in its own process: `conc` asyncio workers opening one stream
after another for --duration s. Every stream must deliver exactly --count responses with the right
values; only those count. See README.md.
"""

import functools
import json
import os
import subprocess
import sys

import benchlib
from benchlib import HERE, HOST, Case, LoadResult

MODEL = "stream"
TARGETS = ["bare", "ours", "mlserver", "litserve"]
#: The bare server streams over gRPC only: an SSE ceiling would measure how often it chose to flush.
BARE_SSE = "the ceiling is measured on gRPC only (an SSE one would measure its own flush policy)"
NO_GRPC = "LitServe streams over HTTP only"
COUNT = 1000
CASES = [
    Case("sse-stream", 1, "sse", COUNT),
    Case("sse-stream", 8, "sse", COUNT),
    Case("grpc-stream", 1, "grpc", COUNT),
    Case("grpc-stream", 8, "grpc", COUNT),
]


def make_targets(names, args, workdir):
    bad = [n for n in names if n not in TARGETS]
    if bad:
        raise SystemExit(f"stream_bench serves only {', '.join(TARGETS)}, not {', '.join(bad)}")
    unsupported = {"bare": {"sse-stream": BARE_SSE}, "litserve": {"grpc-stream": NO_GRPC}}
    return benchlib.build_targets(names, args, workdir, "both", unsupported, model=MODEL,
                                  model_script="stream_model.py", mlserver_dir="mlserver_stream",
                                  bare_proto="grpc", peer_api="stream")


def run_client(args, target, case, *extra, timeout):
    port = target.grpc_port if case.proto == "grpc" else target.http_port
    cmd = [args.python, os.path.join(HERE, "stream_client.py"), "--proto", case.proto, "--server", target.name,
           "--host", HOST, "--port", str(port), "--model", MODEL, "--count", str(args.count),
           "--conc", str(case.conc), "--stream-timeout", str(args.stream_timeout), *extra]
    return stream_result(cmd, timeout)


def stream_result(cmd, timeout):
    """Run a stream client command: (its STREAM_RESULT, None), or (None, what went wrong)."""
    name = os.path.basename(cmd[1])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        return None, f"{name} did not finish in {timeout:.0f}s"
    for line in r.stdout.splitlines():
        if line.startswith("STREAM_RESULT "):
            return json.loads(line.split(" ", 1)[1]), None
    return None, f"{name} failed (rc={r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}"


def check(args, target, case, payload, run_client=run_client):
    """Two streams per worker of the case; each must bring exactly --count right responses."""
    n = 2 * case.conc
    res, err = run_client(args, target, case, "--streams", str(n), timeout=n * args.stream_timeout + 30)
    if res is None:
        return err
    if res["streams_ok"] != n:
        return f"{res['streams_ok']}/{n} streams correct; {res['sample']}"
    return None


def load(args, target, case, payload, seconds, run_client=run_client):
    """One timed run of the stream client; responses in correct streams count, ttfr is p50/p99."""
    res, err = run_client(args, target, case, "--duration", str(seconds),
                          timeout=seconds + args.stream_timeout + 30)
    if res is None:
        return None, err
    return LoadResult(seconds=res["elapsed_s"], total=res["responses"], ok=res["responses_ok"],
                      p50_ms=res.get("ttfr_p50_ms"), p99_ms=res.get("ttfr_p99_ms"),
                      errors={"bad": res["streams_bad"], "failed": res["streams_failed"]}), None


def parser():
    """The command line of this bench (benchlib's flags plus the stream client's)."""
    ap = benchlib.arg_parser("Streamed responses per second (SSE and gRPC), kserve_sdk vs MLServer.", CASES)
    ap.set_defaults(targets=",".join(TARGETS))
    ap.add_argument("--count", type=int, default=COUNT, help=f"responses per stream (default {COUNT})")
    ap.add_argument("--stream-timeout", type=float, default=30, help="seconds per stream (default 30)")
    return ap


def spec(args):
    """This bench as a benchlib.Bench for the parsed args."""
    return benchlib.Bench(tag="stream_bench", cases=CASES, proto="both",
                          make_payload=lambda case, workdir: None, check=functools.partial(check, args),
                          load=load, err_cols=[("bad", "bad"), ("failed", "failed")],
                          banner=f"stream_client.py in its own process ({sys.executable.split('/')[-1]}), "
                                 f"{args.count} responses per stream",
                          make_targets=make_targets, base="mlserver",
                          headers=("resp/s", "ttfr p50", "ttfr p99"))


def main():
    args = parser().parse_args()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()
