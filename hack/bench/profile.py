"""Where a server's time goes under one bench cell: a py-spy profile of each target, summarized.

    bash hack/bench/setup_peers.sh        # once: also puts py-spy in /tmp/bench-venvs/tools
    .venv/bin/python hack/bench/profile.py --cases grpc-small@c32                  # ours and bare
    .venv/bin/python hack/bench/profile.py --cases v1-small@c32 --targets ours,kserve --duration 8

The cell's bench (http_bench.py, grpc_bench.py or stream_bench.py, chosen by the case's name) starts
the targets and drives its load as usual; during the timed window py-spy samples each server's
process tree (``--nonblocking``: the server is never paused, so a quick call does not look slow).
For each target the report gives the server's CPU ms per answer, then the samples by area (grpc's
core and the event loop, tornado, protobuf, numpy, each kserve_sdk module, the model, logging,
prometheus) as a share and as CPU µs per answer, and the functions with the most samples of their
own. The raw stacks stay in ``--out`` (collapsed format: flamegraph.pl or speedscope read them).

A Python profiler sees Python frames only: time in a C extension (grpc's Cython core, protobuf,
numpy) counts for the Python function that called it, which is why the areas are named by the
innermost frame's file.
"""
import argparse
import collections
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time

import benchlib
import grpc_bench
import http_bench
import stream_bench

BENCHES = (http_bench, grpc_bench, stream_bench)
SAMPLE_RATE = 400  # per second; py-spy's default (100) gives too few samples in a few seconds

# (area, pattern on the innermost frame's file): the first that matches names the sample's area
AREAS = [
    ("kserve_sdk." + m, rf"kserve_sdk/{m.replace('.', '/')}\.py") for m in (
        "handlers.grpc", "handlers.fast_path", "handlers.inference", "handlers.streaming",
        "handlers.access_log", "protocol.grpc.convert", "protocol.rest_codec", "protocol.tensor",
        "protocol.infer_type", "dataplane", "model", "executor", "metrics", "internals.prometheus_values",
        "internals.prometheus_writers", "statistics",
        "logging", "model_repository")
] + [
    ("kserve_sdk (other)", r"kserve_sdk/"),
    ("the model", r"(addone_model|stream_model|bare_grpc|bare_tornado)\.py"),
    ("grpc (aio core, called from Python)", r"(^|/)grpc/"),
    ("tornado", r"(^|/)tornado/"),
    ("protobuf", r"(^|/)google/protobuf/"),
    ("numpy", r"(^|/)numpy/"),
    ("logging", r"(^|/)logging/"),
    ("prometheus_client", r"(^|/)prometheus_client/"),
    ("the event loop and the C code it calls (sockets, grpc core, uvloop)", r"(^|/)(asyncio|uvloop)/|^selectors\.py"),
    ("a thread's C code (grpc's poller, the pool)", r"^threading\.py"),
    ("peer server (kserve, mlserver, fastapi, starlette)", r"(^|/)(kserve|mlserver|fastapi|starlette|uvicorn)/"),
]
_AREA_RES = [(name, re.compile(pattern)) for name, pattern in AREAS]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]+?)(?::\d+)?\)$")


def bench_of(case: str):
    """The bench module whose CASES has this case name."""
    name = case.partition("@")[0]
    for module in BENCHES:
        if any(c.name == name for c in module.CASES):
            return module
    known = ", ".join(c.key for m in BENCHES for c in m.CASES)
    raise SystemExit(f"no bench has a case named {name!r}; known: {known}")


def py_spy(venvs: str) -> str:
    """The py-spy executable: setup_peers.sh's, else one on PATH."""
    found = os.path.join(venvs, "tools", "bin", "py-spy")
    found = found if os.path.exists(found) else shutil.which("py-spy")
    if not found:
        raise SystemExit(f"py-spy not found in {venvs}/tools/bin or on PATH: run hack/bench/setup_peers.sh")
    return found


def profiling(load, spy: str, out: str):
    """A bench load function that records a py-spy profile of the target during each timed window
    (the warm-up windows, shorter than --duration, are not profiled)."""
    def run(args, target, case, payload, seconds):
        if seconds < args.duration:
            return load(args, target, case, payload, seconds)
        path = os.path.join(out, f"{target.name}-{case.key}.txt")
        cmd = [spy, "record", "--nonblocking", "--subprocesses", "--format", "raw", "--rate", str(SAMPLE_RATE),
               "--duration", str(int(seconds)), "--pid", str(target.proc.pid), "--output", path]
        with open(path + ".log", "w") as log:
            spy_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(0.5)  # py-spy attaches before the load starts
        try:
            return load(args, target, case, payload, seconds)
        finally:
            try:
                spy_proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                spy_proc.kill()
                spy_proc.wait()
    return run


def read_stacks(path: str) -> collections.Counter:
    """``{stack (tuple of frames, outermost first): samples}`` from py-spy's raw (collapsed) output."""
    stacks = collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def area_of(frame: str) -> str:
    m = _FRAME.match(frame)
    where = m.group("file") if m else frame
    for name, pattern in _AREA_RES:
        if pattern.search(where):
            return name
    return "other Python"


def summarize(stacks: collections.Counter, cpu_ms: float, top: int) -> str:
    """The report of one profile: samples by area and the busiest functions, as shares and µs/answer."""
    total = sum(stacks.values())
    if not total:
        return "  no samples (is py-spy allowed to read the process? see its .log beside the profile)\n"
    by_area, by_func = collections.Counter(), collections.Counter()
    for stack, count in stacks.items():
        frames = [f for f in stack if not f.startswith(("process ", "thread "))] or ["(no Python frame)"]
        by_area[area_of(frames[-1])] += count
        by_func[re.sub(r":\d+\)$", ")", frames[-1])] += count  # lines of one function together
    per_answer = (lambda n: f"{n / total * cpu_ms * 1000:7.1f}") if cpu_ms else (lambda n: "      ?")
    lines = [f"  {total} samples; server CPU {cpu_ms:.3f} ms per answer" if cpu_ms else f"  {total} samples",
             "    share  µs/answer  area (innermost frame)"]
    lines += [f"   {n / total:6.1%}    {per_answer(n)}  {name}" for name, n in by_area.most_common()]
    lines.append(f"    share  µs/answer  function, own samples (top {top})")
    lines += [f"   {n / total:6.1%}    {per_answer(n)}  {name[:110]}" for name, n in by_func.most_common(top)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="one bench case, NAME@cN (e.g. grpc-small@c32)")
    ap.add_argument("--targets", default="bare,ours", help="comma list (default bare,ours)")
    ap.add_argument("--duration", type=float, default=5, help="profiled seconds per target (default 5)")
    ap.add_argument("--top", type=int, default=15, help="functions listed per target (default 15)")
    ap.add_argument("--out", default=os.path.join(benchlib.HERE, "results", "profiles"),
                    help="where the raw profiles go (default hack/bench/results/profiles)")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"))
    opts = ap.parse_args()
    module = bench_of(opts.cases)
    args = module.parser().parse_args([])
    args.cases, args.targets, args.duration, args.venvs = opts.cases, opts.targets, opts.duration, opts.venvs
    os.makedirs(opts.out, exist_ok=True)
    spec = module.spec(args)
    bench = dataclasses.replace(spec, load=profiling(spec.load, py_spy(opts.venvs), opts.out))
    benchlib.raise_on_signals()
    run = benchlib.run_bench(args, bench)
    for case in run.cases:
        for target in run.targets:
            path = os.path.join(opts.out, f"{target.name}-{case.key}.txt")
            row = run.rows[(target.name, case.key)]
            print(f"\n{target.name}, {case.key}: {path}")
            if not os.path.exists(path):
                print(f"  no profile ({row.note or 'py-spy wrote nothing'})")
                continue
            sys.stdout.write(summarize(read_stacks(path), row.cpu_ms, opts.top))


if __name__ == "__main__":
    main()
