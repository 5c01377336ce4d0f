"""Every benchmark in one command: bench.json (every number) and bench.md (tables, acceptance).

    .venv/bin/python hack/bench/run_all.py [--out hack/bench/results] [--duration 5] \
        [--warmup 1] [--targets bare,ours,kserve,mlserver] [--only http,grpc,...] [--quick]

Groups (each starts its own servers on free 127.0.0.1 ports and stops them by process group at
its end, also on errors and Ctrl-C; targets alternate within every cell):
  http     http_bench.py's cases (wrk)                      bare, ours, kserve, mlserver
  grpc     grpc_bench.py's cases (h2load)                   bare, ours, kserve, mlserver
  stream   stream_bench.py's cases, 1,000 responses each    ours, mlserver
  batch    batch_bench.py: batching off / on at c64         kserve_sdk
  workers  --workers 1 vs 2, v2 JSON [1,16] at c32 (wrk)    kserve_sdk
  startup  process start -> ready, idle RSS (median of --starts starts, targets alternating)
  shm      shm_bench.py: 64 MiB via system shared memory vs binary REST, c1   kserve_sdk
  memory   memory_bench.py: RSS with 1/1,000/10,000 models, 5,000 idle connections, 100,000 requests
  cost     call_cost.py --server [--rest]: instructions per small gRPC / REST v2 request   bare, ours
  cb       cb_bench.py: tokens/s and time to first token at 1/8/32/64 streams beginning together, 32 apart
           cb, unbatched, bare, litserve
  sched    sched_bench.py: a 10 ms model, instance_count=1, offered 2x its capacity, priorities on/off   kserve_sdk
           (SCHED_BENCH_SECONDS per phase, default 20; 3 with --quick)
  jobs     jobs_bench.py: durable jobs submitted and completed per second (SQLite, Redis) beside synchronous
           calls, synchronous p99 with 5,000 jobs pending, RSS over 100,000 jobs after purge   kserve_sdk
           (--quick: 2,000 jobs per server, RSS over JOBS_BENCH_RSS_JOBS jobs, default 10,000)
  repo     repo_bench.py: 10,000 scikit-learn models served lazily within --max_loaded_models 200 under Zipf
           requests (60 s), 1,000 loaded at start beside MLServer's, MLServer's docs' repository served by both
           kserve_sdk, mlserver (--quick: 10 s of Zipf, 200 models loaded at start)
The http group also runs LitServe and BentoML (litserve, bentoml) on their own /predict route in the
v1 cells, and the stream group LitServe's stream=True in the sse-stream cells.
bench_report.py turns the results into bench.md. See README.md.
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import batch_bench
import bench_report
import benchlib
import cb_bench
import grpc_bench
import http_bench
import jobs_bench
import memory_bench
import peers
import repo_bench
import sched_bench
import shm_bench
import stream_bench
from benchlib import ALL_TARGETS, HERE, REPO

GROUPS = ["http", "grpc", "stream", "batch", "workers", "startup", "shm", "memory", "cost", "cb", "sched", "jobs",
          "repo"]
REFS = {"http": ["bare", "kserve", "mlserver", "litserve", "bentoml"], "grpc": ["bare", "kserve", "mlserver"],
        "stream": ["bare", "mlserver", "litserve"], "batch": ["batch-off"], "workers": ["ours-w1"], "shm": [],
        "cb": ["unbatched", "litserve"]}
QUICK = {"duration": 1, "warmup": 0, "rounds": 1, "starts": 1, "settle": 0.5, "shm_max_requests": 20,
         "cost_requests": 100}


# --------------------------------------------------------------------------- arguments

def parse_args(argv=None):
    """run_all's command line; --quick replaces durations, starts and bounds by QUICK's."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output directory")
    ap.add_argument("--duration", type=float, default=3, help="timed seconds per cell and round (default 3)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per cell, targets alternating in each; the "
                    "table keeps each target's median round, a ratio is the median of the rounds' (default 5)")
    ap.add_argument("--warmup", type=float, default=1, help="warm-up seconds per cell (default 1)")
    ap.add_argument("--targets", default=",".join(ALL_TARGETS), help="comma list (default: all six)")
    ap.add_argument("--only", default="", help=f"comma list of groups from {','.join(GROUPS)} (default all)")
    ap.add_argument("--cases", default="", help="comma list of NAME or NAME@cN from the benches' cases: "
                    "each load group runs only those it has (groups with none are skipped)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 s cells, no warm-up, 1 start, "
                    "memory's smaller counts, 100 requests under callgrind")
    ap.add_argument("--starts", type=int, default=3, help="startup: starts per target (default 3)")
    ap.add_argument("--settle", type=float, default=1.0, help="startup: seconds after ready before idle RSS")
    ap.add_argument("--shm-max-requests", type=int, default=1000, help="shm: requests per timed run")
    ap.add_argument("--cost-requests", type=int, default=400, help="cost: requests counted under callgrind "
                    "(as many to warm up; default 400)")
    ap.add_argument("--ready-timeout", type=float, default=90, help="server start timeout in s")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for bare and ours")
    ap.add_argument("--keep-workdir", action="store_true", help="keep request bodies and server logs")
    opts = ap.parse_args(argv)
    if opts.quick:
        for k, v in QUICK.items():
            setattr(opts, k, v)
    opts.targets = [t.strip() for t in opts.targets.split(",") if t.strip()]
    opts.only = [g.strip() for g in opts.only.split(",") if g.strip()] or list(GROUPS)
    unknown = [g for g in opts.only if g not in GROUPS] + [t for t in opts.targets if t not in ALL_TARGETS]
    if unknown:
        ap.error(f"unknown group/target {', '.join(unknown)}; groups: {', '.join(GROUPS)}; "
                 f"targets: {', '.join(ALL_TARGETS)}")
    return opts


def cases_for(module, opts):
    """The --cases items this module knows (all of its cases when --cases is empty)."""
    known = {c.name for c in module.CASES}
    return ",".join(item for item in opts.cases.split(",") if item.strip().partition("@")[0] in known)


class NoCase(Exception):
    """--cases selects nothing in this group."""


def bench_args(module, opts, targets, cases=None):
    """The module's own parsed defaults, with run_all's durations, targets, cases and environment."""
    if cases is None:
        cases = cases_for(module, opts)
        if opts.cases and not cases:
            raise NoCase(f"--cases selects none of {', '.join(c.key for c in module.CASES)}")
    args = module.parser().parse_args([])
    args.duration, args.warmup, args.rounds = opts.duration, opts.warmup, opts.rounds
    args.targets, args.cases = ",".join(targets), cases
    args.ready_timeout, args.venvs, args.python = opts.ready_timeout, opts.venvs, opts.python
    args.keep_workdir = opts.keep_workdir
    return args


# --------------------------------------------------------------------------- load groups

def cell(row, rows, refs):
    """One Row as data, with its req/s ratio to each reference target of the same case."""
    out = {"target": row.target, "case": row.case.name, "conc": row.case.conc, "rps": row.rps,
           "p50_ms": row.p50, "p99_ms": row.p99, "p999_ms": row.p999, "cpu_ms_per_req": row.cpu_ms,
           "peak_mib": row.mem, "errors": row.errors, "note": row.note, "round_rps": row.round_rps,
           "round_p99_ms": row.round_p99, "round_p999_ms": row.round_p999, "ratio": {}}
    for ref in refs:
        base = rows.get((ref, row.case.key))
        if ref != row.target and base is not None and base.rps and row.rps:
            out["ratio"][ref] = benchlib.paired_ratio(row, base)
    return out


def run_load_group(name, args, bench):
    """run_bench, then the rows as data for bench.json."""
    run = benchlib.run_bench(args, bench)
    return {"headers": list(bench.headers), "data": bench.data,
            "targets": {t.name: {"desc": t.desc, "ready_s": t.ready_s, "unavailable": t.unavailable}
                        for t in run.targets},
            "cells": [cell(run.rows[(t.name, c.key)], run.rows, REFS[name])
                      for c in run.cases for t in run.targets]}


def workers_targets(names, args, workdir):
    """`ours` with --workers 1 and --workers 2 (REST only), named ours-w1 and ours-w2."""
    out = []
    for n in (1, 2):
        t = benchlib.build_targets(["ours"], args, workdir, "http")[0]
        t.name, t.desc = f"ours-w{n}", t.desc + f", --workers {n}"
        t.cmd += ["--workers", str(n)]
        out.append(t)
    return out


def group_http(opts, targets):
    """http_bench's cases for the given targets."""
    args = bench_args(http_bench, opts, targets)
    http_bench.require_wrk()
    return run_load_group("http", args, http_bench.spec(args))


def group_grpc(opts, targets):
    """grpc_bench's cases (h2load) for the given targets."""
    args = bench_args(grpc_bench, opts, [t for t in targets if t not in peers.HTTP_ONLY])
    return run_load_group("grpc", args, grpc_bench.spec(args))


def group_stream(opts, targets):
    """stream_bench's cases for bare (gRPC only), ours and mlserver."""
    args = bench_args(stream_bench, opts, [t for t in targets if t in stream_bench.TARGETS])
    return run_load_group("stream", args, stream_bench.spec(args))


def group_batch(opts, targets):
    """batch_bench: batching off and on at c64."""
    args = bench_args(batch_bench, opts, batch_bench.TARGETS)
    http_bench.require_wrk()
    return run_load_group("batch", args, batch_bench.spec(args))


def group_workers(opts, targets):
    """--workers 1 vs 2 for ours, v2 JSON [1,16] at c32 (http_bench's case and wrk driver)."""
    args = bench_args(http_bench, opts, ["ours-w1", "ours-w2"], cases="v2-json-small@c32")
    http_bench.require_wrk()
    bench = dataclasses.replace(http_bench.spec(args), tag="workers", make_targets=workers_targets,
                                base="ours-w1")
    return run_load_group("workers", args, bench)


def group_shm(opts, targets):
    """shm_bench: 64 MiB through system shared memory vs binary REST, ours only."""
    args = bench_args(shm_bench, opts, ["ours", shm_bench.ZERO_COPY])
    args.max_requests = opts.shm_max_requests
    return run_load_group("shm", args, shm_bench.spec(args))


def group_memory(opts, targets):
    """memory_bench for ours: models, idle connections, growth over requests (smaller counts with --quick)."""
    args = memory_bench.parse(["--targets", "ours"] + (["--quick"] if opts.quick else []))
    args.ready_timeout, args.venvs, args.python = max(opts.ready_timeout, 300), opts.venvs, opts.python
    args.keep_workdir = opts.keep_workdir
    return memory_bench.run(args)


COST_LINE = r"^(\w+)(?: \(.*\))?: (\d+)k instructions per (gRPC|REST v2) request"


def group_cost(opts, targets):
    """call_cost.py --server for bare and ours, gRPC then REST v2: thousands of instructions per request."""
    out = {}
    for proto, extra in (("grpc", []), ("rest", ["--rest"])):
        cmd = [opts.python, os.path.join(HERE, "call_cost.py"), "--server", "--targets", "bare,ours",
               "--warmup", str(opts.cost_requests), "--requests", str(opts.cost_requests)] + extra
        done = benchlib.run_bounded(cmd, timeout=1800)
        if done is None:
            out[proto] = {"error": "call_cost.py did not finish within 1800 s"}
            continue
        rc, stdout, stderr = done
        found = {m.group(1): int(m.group(2)) for m in re.finditer(COST_LINE, stdout, re.M)}
        out[proto] = {"kinstr": found} if rc == 0 and found else \
            {"error": f"call_cost.py rc={rc}: {(stdout + stderr).strip()[-300:]}"}
        print(f"  .. cost {proto}: {out[proto]}", flush=True)
    return {"requests": opts.cost_requests, **out}


def group_cb(opts, targets):
    """cb_bench: @kserve_sdk.batch, the same model unbatched, the bare ceiling and LitServe's loop (when litserve
    is a target); each cell also gets its time to first token in unloaded steps."""
    names = [t for t in cb_bench.TARGETS if t != "litserve" or "litserve" in targets]
    args = bench_args(cb_bench, opts, names)
    bench = cb_bench.spec(args)
    out = run_load_group("cb", args, bench)
    step = out["data"].get("step_ms", {})
    for c in out["cells"]:
        case = benchlib.Case(c["case"], c["conc"], "sse", 0)
        c["step_ms"] = step.get(c["conc"])
        c["ttft_p50_steps"] = cb_bench.in_steps(c["p50_ms"], case, step)
        c["ttft_p99_steps"] = cb_bench.in_steps(c["p99_ms"], case, step)
    return out


def group_sched(opts, targets):
    """sched_bench: issue 31's scheduler under twice its model's capacity, with and without priorities."""
    args = sched_bench.parser().parse_args([])
    if opts.quick:
        args.seconds = min(args.seconds, 3)
    args.ready_timeout, args.python, args.keep_workdir = opts.ready_timeout, opts.python, opts.keep_workdir
    return sched_bench.run(args)


JOBS_QUICK = {"jobs": 2000, "job_concurrency": "4,16", "sync_seconds": 1, "fair_calls": 100}


def group_jobs(opts, targets):
    """jobs_bench: issue 32's jobs per second, fairness to synchronous calls and memory over many jobs."""
    args = jobs_bench.parser().parse_args([])
    if opts.quick:
        for k, v in JOBS_QUICK.items():
            setattr(args, k, v)
        args.rss_jobs = int(os.environ.get("JOBS_BENCH_RSS_JOBS") or 10000)
    args.ready_timeout, args.python, args.keep_workdir = opts.ready_timeout, opts.python, opts.keep_workdir
    return jobs_bench.run(args)


def group_repo(opts, targets):
    """repo_bench: issue 34's model repository, lazily within a budget; MLServer beside it when it is a target."""
    args = repo_bench.parse(["--quick"] if opts.quick else [])
    args.skip_mlserver = "mlserver" not in targets
    args.ready_timeout, args.venvs, args.python = max(opts.ready_timeout, 900), opts.venvs, opts.python
    args.keep_workdir = opts.keep_workdir
    return repo_bench.run(args)


# --------------------------------------------------------------------------- startup

def start_once(name, opts, workdir):
    """Start one add-one target, time it to ready, read idle and peak RSS, stop it."""
    args = argparse.Namespace(python=opts.python, venvs=opts.venvs)
    t = benchlib.build_targets([name], args, workdir, "http")[0]
    if t.unavailable:
        return {"note": "n/a: " + t.unavailable.splitlines()[0]}
    t0 = time.monotonic()
    t.start(workdir)
    try:
        err = t.wait_ready(opts.ready_timeout, interval=0.01)
        ready_s = time.monotonic() - t0
        if err:
            return {"note": f"ERROR: {err}; log: {t.log_tail(5)}"}
        time.sleep(opts.settle)
        return {"ready_s": ready_s, "idle_rss_mib": benchlib.rss_mib(t.proc.pid),
                "peak_mib": benchlib.peak_mib(t.proc.pid)}
    finally:
        t.stop()


def summarize_starts(starts):
    """Medians over the successful starts of one target."""
    good = [s for s in starts if "ready_s" in s]
    out = {"starts": starts}
    if good:
        out["ready_s"] = statistics.median(s["ready_s"] for s in good)
        out["idle_rss_mib"] = statistics.median(s["idle_rss_mib"] for s in good)
    else:
        out["note"] = starts[-1].get("note", "no start") if starts else "no start"
    return out


def group_startup(opts, targets):
    """opts.starts rounds, every target once per round (alternating)."""
    workdir = tempfile.mkdtemp(prefix="startup-")
    runs = {t: [] for t in targets}
    try:
        for i in range(opts.starts):
            for name in targets:
                sub = os.path.join(workdir, f"{name}-{i}")
                os.makedirs(sub)
                runs[name].append(start_once(name, opts, sub))
                shown = runs[name][-1]
                print(f"  .. startup {name:<9} start {i + 1}: " +
                      (f"ready in {shown['ready_s']:.2f}s, idle {shown['idle_rss_mib']:.1f} MiB"
                       if "ready_s" in shown else shown["note"]), flush=True)
    finally:
        if not opts.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"targets": {name: summarize_starts(starts) for name, starts in runs.items()}}


# --------------------------------------------------------------------------- machine, output

def command_output(cmd):
    """First line of a command's output, or None."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ((r.stdout or r.stderr).strip().splitlines() or [None])[0]


def machine_info(opts):
    """Cores, load, date, kernel and the versions of everything measured."""
    venv_py = os.path.join(opts.venvs, "{}", "bin", "python")
    dirty = command_output(["git", "-C", REPO, "status", "--porcelain", "--", "kserve_sdk"])
    return {
        "cores": os.cpu_count(), "loadavg_at_start": os.getloadavg(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "kernel": platform.release(), "python": platform.python_version(),
        "kserve_sdk_tree": REPO,
        "kserve_sdk_commit": command_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        "kserve_sdk_uncommitted_changes": bool(dirty),
        "kserve": benchlib.venv_version(venv_py.format("kserve"), "kserve")
        if os.path.exists(venv_py.format("kserve")) else None,
        **{name: benchlib.venv_version(venv_py.format(name), name) if os.path.exists(venv_py.format(name))
           else None for name in ("mlserver", "litserve", "bentoml")},
        "numpy": benchlib.venv_version(opts.python, "numpy"),
        "tritonclient": benchlib.venv_version(opts.python, "tritonclient"),
        "wrk": (command_output(["wrk", "-v"]) or "").split(" Copyright")[0] or None,
        "h2load": command_output(["h2load", "--version"]),
    }


def write_results(opts, results):
    """bench.json and bench.md into opts.out; returns their paths."""
    os.makedirs(opts.out, exist_ok=True)
    paths = os.path.join(opts.out, "bench.json"), os.path.join(opts.out, "bench.md")
    with open(paths[0], "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(paths[1], "w") as f:
        f.write(bench_report.markdown(results) + "\n" + sched_bench.markdown(results["groups"].get("sched")) + "\n"
                + jobs_bench.markdown(results["groups"].get("jobs")) + "\n"
                + repo_bench.markdown(results["groups"].get("repo")))
    return paths


GROUP_RUNNERS = {"http": group_http, "grpc": group_grpc, "stream": group_stream, "batch": group_batch,
                 "workers": group_workers, "startup": group_startup, "shm": group_shm,
                 "memory": group_memory, "cost": group_cost, "cb": group_cb, "sched": group_sched,
                 "jobs": group_jobs, "repo": group_repo}


def needs_ours(group):
    """Groups that measure kserve_sdk alone."""
    return group in ("batch", "workers", "shm", "memory", "cost", "cb", "sched", "jobs", "repo")


def run_groups(opts, results):
    """Every selected group in order; a group that fails is recorded and the next one runs."""
    for group in opts.only:
        if needs_ours(group) and "ours" not in opts.targets:
            results["groups"][group] = {"skipped": "needs target ours"}
            continue
        print(f"\n==== {group}", flush=True)
        t0 = time.monotonic()
        results["groups"][group] = {"error": "not finished (interrupted)"}
        try:
            results["groups"][group] = GROUP_RUNNERS[group](opts, opts.targets)
        except NoCase as e:
            print(f"  skipped: {e}")
            results["groups"][group] = {"skipped": str(e)}
        except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded, the other groups still run
            print(f"  {group} FAILED: {e!r}", flush=True)
            results["groups"][group] = {"error": repr(e)}
        results["groups"][group]["seconds"] = time.monotonic() - t0


def main():
    opts = parse_args()
    benchlib.raise_on_signals()
    results = {"machine": machine_info(opts), "settings": dict(vars(opts)), "groups": {}}
    code = 0
    try:
        run_groups(opts, results)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); servers stopped; writing what was measured", file=sys.stderr)
        results["interrupted"] = str(e)
        code = 130
    results["acceptance"] = (bench_report.acceptance(results) + sched_bench.checks(results["groups"].get("sched"))
                             + jobs_bench.checks(results["groups"].get("jobs"))
                             + repo_bench.checks(results["groups"].get("repo")))
    paths = write_results(opts, results)
    print(f"\nwrote {paths[0]} and {paths[1]}\n")
    print(bench_report.summary_markdown(results))
    print(sched_bench.markdown(results["groups"].get("sched")))
    print(jobs_bench.markdown(results["groups"].get("jobs")))
    print(repo_bench.markdown(results["groups"].get("repo")))
    sys.exit(code)


if __name__ == "__main__":
    main()
