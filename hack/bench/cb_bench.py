"""Continuous batching: tokens per second and time to first token, @kserve_sdk.batch vs no batching vs LitServe.

    .venv/bin/python hack/bench/cb_bench.py [--targets cb,unbatched,litserve,bare] [--cases cb-stream@c32,...] \
        [--duration 8] [--count 64]

Every target runs cb_step.py's language-model step (a shared WIDTH x WIDTH part per step, then the rows
through LAYERS [rows, 256] x [256, 256] products), one token per step per stream, on free 127.0.0.1 ports,
stopped by process group at exit, with one BLAS thread (OPENBLAS_NUM_THREADS=1 and friends):
  cb         hack/bench/cb_model.py --mode cb (kserve_sdk): an async-generator predict awaiting a step
             decorated with @kserve_sdk.batch(max_batch_size=64, max_wait_ms=2), streamed over SSE
             (POST /v2/models/lm/generate_stream)
  unbatched  the same model without the decorator: each stream calls the step with its own row
  litserve   hack/bench/litserve_cb.py: the same step in LitServe's ContinuousBatchingLoop (LitAPI with
             add_request / has_capacity / has_active_requests / step, max_batch_size=64), from the venv of
             setup_peers.sh; its own stream, POST /predict -> newline-delimited JSON
  bare       hack/bench/cb_bare.py: the ceiling, the step batched by a few lines on bare Tornado (no SDK), on
             the same wire as cb
The load is stream_client.py in its own process: `conc` workers opening one stream of --count tokens after
another for --duration s; only streams that bring exactly start, start + 1, ... count.
  cb-stream   every stream asks for --count tokens, so the workers' streams end on the same step and begin
              again together, a burst of conc new requests each time: the time to first token is mostly the
              server reading conc requests one after the other
  cb-stagger  (32 streams) worker i's first stream asks for --count x (i + 1) / conc tokens (stream_client.py
              --stagger; --stagger here does it in every case): from then on the streams end, and new ones
              begin, on different steps, as independent clients' do, and the time to first token is what a
              client arriving while the others stream waits; those first streams are left out of it
A row's rate is tokens per second over all streams, its p50/p99 the time to first token. Before the servers
start, the step is timed unloaded at each case's concurrency (batch size); the table after the run gives the
time to first token in those steps too. See README.md.
"""

import functools
import json
import os
import subprocess
import sys

import benchlib
import peers
import stream_bench
from benchlib import HERE, HOST, REPO, Case

MODEL = "lm"
TARGETS = ["cb", "unbatched", "litserve", "bare"]
COUNT = 64
CONCS = (1, 8, 32, 64)
#: cb-stream: every worker's streams ask for COUNT tokens, so they end, and begin again, together (a burst);
#: cb-stagger: the same at 32 streams with --stagger, so that they begin on different steps
CASES = [Case("cb-stream", c, "sse", COUNT) for c in CONCS] + [Case("cb-stagger", 32, "sse", COUNT)]
#: one BLAS thread everywhere: the step's cost is the same in every target, and two shared cores are not split
ONE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def step_ms(args, rows):
    """{batch size: ms} of one unloaded step (cb_step.py in its own process, one BLAS thread)."""
    cmd = [args.python, os.path.join(HERE, "cb_step.py"), "--rows", ",".join(str(r) for r in rows)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **ONE_THREAD}, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("CB_STEP_MS "):
            found = json.loads(line.split(" ", 1)[1])
            return {int(k): v for k, v in found.items() if k.isdigit()}
    raise SystemExit(f"cb_step.py failed (rc={r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}")


def ours_target(name, args):
    """cb or unbatched: cb_model.py on kserve_sdk, REST only."""
    http_port, grpc_port = benchlib.free_ports(2)
    cmd = [args.python, os.path.join(HERE, "cb_model.py"), "--model_name", MODEL, "--http_port", str(http_port),
           "--grpc_port", str(grpc_port), "--enable_grpc", "false", "--mode", name]
    desc = f"kserve_sdk ({REPO}), the step called per stream, no decorator"
    if name == "cb":
        cmd += ["--step_batch_size", str(args.max_batch_size), "--step_wait_ms", str(args.max_wait_ms)]
        desc = (f"kserve_sdk ({REPO}), @kserve_sdk.batch(max_batch_size={args.max_batch_size}, "
                f"max_wait_ms={args.max_wait_ms:g}) on the step (a def: on the model thread)")
    return benchlib.Target(name, desc=desc, cmd=cmd, env={"PYTHONPATH": REPO, **ONE_THREAD}, port=http_port,
                           http_port=http_port, ready=benchlib.http_ready("/v2/health/ready"))


def bare_target(args):
    """cb_bare.py: the step batched by a few lines on bare Tornado, the ceiling."""
    port = benchlib.free_ports(1)[0]
    return benchlib.Target("bare", cmd=[args.python, os.path.join(HERE, "cb_bare.py"), "--http_port", str(port)],
                           env={"PYTHONPATH": HERE, **ONE_THREAD}, port=port, http_port=port,
                           ready=benchlib.http_ready("/v2/health/ready"),
                           desc="cb_bare.py: bare Tornado, orjson, the step batched in a few lines on a thread, "
                                "each event flushed (no SDK)")


def litserve_target(args):
    """litserve_cb.py from the litserve venv."""
    py, ver = peers._venv(args, "litserve", "litserve")
    port = benchlib.free_ports(1)[0]
    t = benchlib.Target("litserve", cmd=[py, os.path.join(HERE, "litserve_cb.py"), "--port", str(port),
                                         "--max-batch-size", str(args.max_batch_size)],
                        env=dict(ONE_THREAD), port=port, http_port=port, ready=benchlib.http_ready("/health"),
                        desc=f"litserve {ver}, LitAPI(stream=True, max_batch_size={args.max_batch_size}) in "
                             "ContinuousBatchingLoop (idle run() waits for a stream), fast_queue=True")
    if ver is None:
        t.unavailable = f"no litserve in {args.venvs}/litserve: run BENCH_PEERS=litserve hack/bench/setup_peers.sh"
    return t


def make_targets(names, args, workdir, data):
    """The targets, after timing the step unloaded into data["step_ms"]."""
    bad = [n for n in names if n not in TARGETS]
    if bad:
        raise SystemExit(f"cb_bench serves only {', '.join(TARGETS)}, not {', '.join(bad)}")
    data["step_ms"] = step_ms(args, sorted({1, *CONCS}))
    print("  unloaded step: " + ", ".join(f"{n} rows {ms:.3f} ms" for n, ms in data["step_ms"].items()))
    made = {"litserve": litserve_target, "bare": bare_target}
    return [made[n](args) if n in made else ours_target(n, args) for n in names]


def run_client(args, target, case, *extra, timeout):
    cmd = [args.python, os.path.join(HERE, "stream_client.py"), "--proto", "sse",
           "--server", "litserve" if target.name == "litserve" else "ours", "--host", HOST,
           "--port", str(target.http_port), "--model", MODEL, "--count", str(args.count),
           "--conc", str(case.conc), "--stream-timeout", str(args.stream_timeout), *extra]
    if args.stagger or case.name == "cb-stagger":
        cmd.append("--stagger")
    return stream_bench.stream_result(cmd, timeout)


def in_steps(ms, case, step):
    """A time in ms as a number of unloaded steps of the case's batch size."""
    unit = step.get(case.conc)
    return None if ms is None or not unit else ms / unit


def report(data, rows, targets, cases):
    """Time to first token in steps, per cell."""
    step = data.get("step_ms", {})
    print("time to first token in unloaded steps of the cell's batch size (conc rows):")
    print(f"{'case':<18} {'step ms':>8} " + " ".join(f"{t.name + ' p50/p99':>22}" for t in targets))
    for case in cases:
        cells = []
        for t in targets:
            r = rows[(t.name, case.key)]
            p50, p99 = in_steps(r.p50, case, step), in_steps(r.p99, case, step)
            cells.append(f"{benchlib.fmt(p50, '.1f') + ' / ' + benchlib.fmt(p99, '.1f'):>22}")
        print(f"{case.key:<18} {benchlib.fmt(step.get(case.conc), '8.3f')} " + " ".join(cells))


def parser():
    """The command line of this bench (benchlib's flags plus the stream client's and the decorator's)."""
    ap = benchlib.arg_parser("Continuous batching tokens/s and TTFT: @kserve_sdk.batch, unbatched, LitServe.",
                             CASES)
    ap.set_defaults(targets=",".join(TARGETS))
    ap.add_argument("--count", type=int, default=COUNT, help=f"tokens per stream (default {COUNT})")
    ap.add_argument("--stream-timeout", type=float, default=60, help="seconds per stream (default 60)")
    ap.add_argument("--max-batch-size", type=int, default=64, help="rows per step, cb and litserve (default 64)")
    ap.add_argument("--max-wait-ms", type=float, default=2, help="cb's max_wait_ms (default 2)")
    ap.add_argument("--stagger", action="store_true",
                    help="the workers' first streams ask for fewer tokens, so that from then on their streams end and "
                         "begin on different steps (default: all ask for --count, so they end and begin together)")
    return ap


def spec(args):
    """This bench as a benchlib.Bench for the parsed args."""
    data = {"count": args.count}
    return benchlib.Bench(tag="cb_bench", cases=CASES, proto="http",
                          make_payload=lambda case, workdir: None,
                          check=functools.partial(stream_bench.check, args, run_client=run_client),
                          load=functools.partial(stream_bench.load, run_client=run_client),
                          err_cols=[("bad", "bad"), ("failed", "failed")],
                          banner=f"stream_client.py in its own process ({sys.executable.split('/')[-1]}), "
                                 f"{args.count} tokens per stream, "
                                 + ("the workers' first streams staggered (not counted in the time to first token)"
                                    if args.stagger else "all beginning together"),
                          make_targets=functools.partial(make_targets, data=data), base="unbatched",
                          headers=("tok/s", "ttft p50", "ttft p99"),
                          report=functools.partial(report, data), data=data)


def main():
    args = parser().parse_args()
    benchlib.main(args, spec(args))


if __name__ == "__main__":
    main()
