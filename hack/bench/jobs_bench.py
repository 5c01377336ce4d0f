"""Issue 32's durable-jobs benchmark: jobs per second end to end, synchronous calls beside a backlog, memory.

    .venv/bin/python hack/bench/jobs_bench.py [--parts throughput,fairness,rss] [--stores sqlite,redis] \
        [--jobs 10000] [--connections 64] [--job-concurrency 4,16,64] [--workers 1] [--rss-jobs 100000]
    JOBS_BENCH_JOBS=2000 JOBS_BENCH_RSS_JOBS=10000 .venv/bin/python hack/bench/jobs_bench.py    # a quick run

Every server runs this repo's kserve_sdk (PYTHONPATH, or BENCH_SDK_TREE), REST only, on a free 127.0.0.1 port,
and is stopped by process group at its end. A SQLite store is a fresh file in a temporary folder; the Redis store
is a redis-server of the bench's own (appendonly yes, a free port), emptied before each server. The load comes
from this process: raw HTTP/1.1 keep-alive connections on one asyncio loop (sched_client.Connection); the bench
reads job counts from the store itself (the SQLite file, or Redis), which costs the server nothing.

  throughput  for each store and each --job-concurrency, one addone_model.py server (--workers): first
              synchronous v2 calls (FP32 [1, 4]) for --sync-seconds on --connections connections (calls/s,
              p50 / p99); then --jobs submits of the same body on as many connections, as fast as they are
              answered (submitted/s), the clock running until no job is pending or in progress (completed/s end
              to end: --jobs over the time from the first submit to the last job's end). Three results are read
              back and checked (input + 1); every job must be completed. Also: the server's CPU ms per job and
              the cores used by the server, this client, redis-server and everything else.
  fairness    sched_model.py's 10 ms `def predict` (instance_count=1) with a SQLite store: --fair-calls
              synchronous calls on 1 and on 4 connections (closed loop) and on 1 connection with --fair-pause-ms
              between an answer and the next call, first with no job, then with --backlog
              jobs submitted and waiting (--fair-job-concurrency of them claimed). p50 / p99 of each, the p99 with
              the backlog over the p99 without, and the jobs completed during each phase.
  rss         one addone_model.py server with a SQLite store and --job_retention_seconds 1: --rss-jobs jobs in ten
              rounds (each submitted, then run to the end), the RSS of the server's processes (/proc, VmRSS) after
              each round, and once the finished jobs have been purged.

Goals (issue 32): at least 1,000 jobs/s end to end with SQLite on 2 cores; synchronous p99 with 5,000 jobs
pending within 1.5x of the p99 with none; RSS flat over 100,000 jobs after purge. See README.md.
"""

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter

import bench_report
import benchlib
import jobs_store_bench
import sched_bench
from benchlib import HERE, REPO
from sched_client import Connection, percentile

from kserve_sdk.jobs import open_store

PARTS = ("throughput", "fairness", "rss")
ADDONE_BODY = b'{"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
ADDONE_ANSWER = [2.0, 3.0, 4.0, 5.0]
JOBS_PER_S = 1000
FAIR_P99_RATIO = 1.5
FAIR_ADDED_JOBS = 1.25
WORK_MS = 10.0
RSS_GROWTH_MIB = 10
POLL_S = 0.02


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list from {','.join(PARTS)}")
    ap.add_argument("--stores", default="sqlite,redis", help="throughput: comma list from sqlite,redis")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS_BENCH_JOBS") or 10000),
                    help="throughput: jobs per server (default 10000, or JOBS_BENCH_JOBS)")
    ap.add_argument("--connections", type=int, default=64, help="concurrent submits and calls (default 64)")
    ap.add_argument("--job-concurrency", default="4,16,64", help="throughput: --job_concurrency values")
    ap.add_argument("--workers", type=int, default=1, help="the servers' --workers (default 1)")
    ap.add_argument("--sync-seconds", type=float, default=3, help="throughput: seconds of synchronous calls")
    ap.add_argument("--backlog", type=int, default=5000, help="fairness: jobs waiting (default 5000)")
    ap.add_argument("--fair-calls", type=int, default=400, help="fairness: synchronous calls per phase")
    ap.add_argument("--fair-pause-ms", type=float, default=20,
                    help="fairness: ms between calls in the paused phase, which lets jobs run (default 20)")
    ap.add_argument("--fair-job-concurrency", type=int, default=4, help="fairness: the server's --job_concurrency")
    ap.add_argument("--rss-jobs", type=int, default=int(os.environ.get("JOBS_BENCH_RSS_JOBS") or 100000),
                    help="rss: jobs in all (default 100000, or JOBS_BENCH_RSS_JOBS)")
    ap.add_argument("--rss-job-concurrency", type=int, default=16, help="rss: the server's --job_concurrency")
    ap.add_argument("--ready-timeout", type=float, default=90)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    return ap


# --------------------------------------------------------------------------- load

async def closed_loop(port, width, make, count=None, seconds=None, expect=200, pause_s=0.0):
    """Calls ``width`` at a time, each lane on a keep-alive connection of its own (``pause_s`` between one answer and
    the lane's next call), until ``count`` were sent or ``seconds`` passed; ``make(i)`` -> (path, body).
    Returns {latencies_ms, answers (the bodies of the expected status), statuses, seconds, wrong (the first
    unexpected answer)}."""
    connections = [await Connection.open(port) for _ in range(width)]
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds if seconds else None
    sent, latencies, answers, statuses, wrong = 0, [], [], Counter(), []

    async def lane(conn):
        nonlocal sent
        while (count is None or sent < count) and (stop_at is None or loop.time() < stop_at):
            if pause_s:
                await asyncio.sleep(pause_s)
            path, body = make(sent)
            sent += 1
            started = time.perf_counter()
            status, answer = await conn.post(path, body)
            latencies.append((time.perf_counter() - started) * 1000)
            statuses[status] += 1
            if status == expect:
                answers.append(answer)
            elif not wrong:
                wrong.append(f"{status}: {answer[:200]!r}")

    started = loop.time()
    try:
        await asyncio.gather(*(lane(conn) for conn in connections))
    finally:
        for conn in connections:
            conn.close()
    return {"latencies_ms": latencies, "answers": answers, "statuses": dict(statuses),
            "seconds": loop.time() - started, "wrong": wrong[0] if wrong else None}


def latency(result):
    values = result["latencies_ms"]
    return {"calls": len(values), "p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99),
            "max_ms": max(values, default=None), "calls_per_s": len(values) / result["seconds"]}


async def submit(port, model, body_of, count, width):
    """``count`` jobs submitted ``width`` at a time: {seconds, ids, per_s}; SystemExit on a refused submit."""
    done = await closed_loop(port, width, lambda i: (f"/v2/models/{model}/jobs", body_of(i)), count=count,
                             expect=202)
    if done["wrong"]:
        raise SystemExit(f"a submit was refused: {done['wrong']} ({done['statuses']})")
    return {"seconds": done["seconds"], "per_s": count / done["seconds"],
            "ids": [json.loads(answer)["id"] for answer in done["answers"]]}


async def until_done(store, timeout):
    """Wait until no job is pending or in progress; the counts then. SystemExit after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    while True:
        counts = await store.counts()
        if counts["pending"] + counts["in_progress"] == 0:
            return counts
        if loop.time() > give_up:
            raise SystemExit(f"jobs not done after {timeout:.0f} s: {counts}")
        await asyncio.sleep(POLL_S)


# --------------------------------------------------------------------------- servers and stores

def server(args, name, script, model, store_url, *flags):
    """A benchlib.Target: ``script`` (in hack/bench) serving ``model`` with its jobs in ``store_url``."""
    port = benchlib.free_ports(1)[0]
    cmd = [args.python, os.path.join(HERE, script), "--model_name", model, "--http_port", str(port),
           "--enable_grpc", "false", "--workers", str(args.workers), "--jobs_store", store_url, *flags]
    return benchlib.Target(name, cmd=cmd, env={"PYTHONPATH": REPO, "BENCH_IMPL": "ours"}, port=port, http_port=port,
                           ready=benchlib.http_ready("/v2/health/ready"),
                           desc=f"kserve_sdk ({REPO}), {script}, {' '.join(flags)}")


class Running:
    """A started target (stopped by process group when the block ends); fails when it does not get ready."""

    def __init__(self, args, target, workdir):
        self.args, self.target, self.workdir = args, target, workdir

    def __enter__(self):
        self.target.start(self.workdir)
        err = self.target.wait_ready(self.args.ready_timeout)
        if err:
            self.target.stop()
            raise SystemExit(f"{self.target.name}: {err}: {self.target.log_tail(5)}")
        return self.target

    def __exit__(self, *exc):
        self.target.stop()


class Stores:
    """Fresh stores: SQLite files in the work folder; one redis-server of the bench's own, emptied each time."""

    def __init__(self, workdir):
        self.workdir, self.redis, self.redis_url, self.made = workdir, None, None, 0

    def fresh(self, kind):
        self.made += 1
        if kind == "sqlite":
            return "sqlite:///" + os.path.join(self.workdir, f"jobs-{self.made}.sqlite3")
        if self.redis is None:
            self.redis, self.redis_url = jobs_store_bench.start_redis(self.workdir)
        jobs_store_bench.clear_redis(self.redis_url)
        return self.redis_url

    def redis_pid(self):
        return self.redis.pid if self.redis is not None else None

    def close(self):
        benchlib.stop_group(self.redis)


def cpu_now(server_pid, redis_pid):
    """(machine busy and all ticks, the server's ticks, redis-server's ticks, this process's CPU seconds)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (sched_bench.machine_cpu(), benchlib.cpu_ticks(server_pid),
            benchlib.cpu_ticks(redis_pid) if redis_pid else 0, usage.ru_utime + usage.ru_stime)


def cores_used(before, after):
    """Cores used on average between two cpu_now() readings: server, client (this process), redis, others."""
    hz, cores = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    ((busy0, all0), server0, redis0, client0), ((busy1, all1), server1, redis1, client1) = before, after
    seconds = (all1 - all0) / hz / cores
    if seconds <= 0:
        return {}
    server, redis = (server1 - server0) / hz / seconds, (redis1 - redis0) / hz / seconds
    client = (client1 - client0) / seconds
    machine = (busy1 - busy0) / hz / seconds
    return {"server": server, "client": client, "redis": redis,
            "others": max(machine - server - client - redis, 0.0), "server_cpu_s": (server1 - server0) / hz}


# --------------------------------------------------------------------------- throughput

def addone_body(_):
    return ADDONE_BODY


async def check_results(store, ids):
    """Three results read back: each the add-one answer. None, or what is wrong."""
    for job_id in (ids[0], ids[len(ids) // 2], ids[-1]):
        reply = await store.result(job_id)
        data = json.loads(reply.body)["outputs"][0]["data"] if reply is not None and reply.status == 200 else None
        if data != ADDONE_ANSWER:
            return f"job {job_id}: {reply}"
    return None


async def measure_throughput(args, target, url, redis_pid):
    sync = await closed_loop(target.port, args.connections, lambda i: ("/v2/models/addone/infer", ADDONE_BODY),
                             seconds=args.sync_seconds)
    out = {"sync": {**latency(sync), "statuses": sync["statuses"]}}
    store = open_store(url)
    try:
        benchlib.wait_idle(target.proc.pid)
        before = cpu_now(target.proc.pid, redis_pid)
        started = time.perf_counter()
        submitted = await submit(target.port, "addone", addone_body, args.jobs, args.connections)
        at_submit_end = await store.counts()
        counts = await until_done(store, timeout=max(120.0, args.jobs / 50))
        total_s = time.perf_counter() - started
        used = cores_used(before, cpu_now(target.proc.pid, redis_pid))
        wrong = await check_results(store, submitted["ids"])
    finally:
        await store.close()
    if counts["completed"] != args.jobs:
        wrong = wrong or f"counts at the end {counts}, expected {args.jobs} completed"
    out.update(submitted_per_s=submitted["per_s"], submit_s=submitted["seconds"], total_s=total_s,
               completed_per_s=args.jobs / total_s, completed_at_submit_end=at_submit_end["completed"],
               server_cpu_ms_per_job=used.pop("server_cpu_s", 0) * 1000 / args.jobs, cores=used, counts=counts,
               error=wrong)
    return out


def run_throughput(args, stores, workdir):
    rows = []
    for kind in [s.strip() for s in args.stores.split(",") if s.strip()]:
        for concurrency in [int(c) for c in args.job_concurrency.split(",") if c.strip()]:
            url = stores.fresh(kind)
            target = server(args, f"jobs-{kind}-c{concurrency}", "addone_model.py", "addone", url,
                            "--job_concurrency", str(concurrency))
            with Running(args, target, workdir):
                row = asyncio.run(measure_throughput(args, target, url, stores.redis_pid() if kind == "redis"
                                                     else None))
            rows.append({"store": kind, "job_concurrency": concurrency, **row})
            print(f"  .. jobs {kind:<6} --job_concurrency {concurrency:<3} {throughput_brief(rows[-1])}", flush=True)
    return rows


def throughput_brief(row):
    return (f"sync {row['sync']['calls_per_s']:.0f}/s, submitted {row['submitted_per_s']:.0f}/s, completed "
            f"{row['completed_per_s']:.0f}/s end to end" + (f", ERROR {row['error']}" if row["error"] else ""))


# --------------------------------------------------------------------------- fairness

def work_body(i):
    return b'{"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [%d]}]}' % i


def fair_phases(args):
    """The fairness phases: (key, connections, ms between one answer and the connection's next call)."""
    return (("1", 1, 0.0), ("4", 4, 0.0), ("1p", 1, args.fair_pause_ms))


def phase_label(fair, key):
    pause = dict((k, ms) for k, _, ms in fair.get("phases", ())).get(key)
    return f"{key[0]}, {pause:g} ms apart" if pause else key


async def sync_phase(args, port, store, width, pause_ms=0.0):
    """--fair-calls synchronous calls of `work`, ``width`` at a time: latencies, and the jobs done meanwhile."""
    before = await store.counts()
    done = await closed_loop(port, width, lambda i: ("/v2/models/work/infer", work_body(i)), count=args.fair_calls,
                             pause_s=pause_ms / 1000)
    after = await store.counts()
    if done["wrong"]:
        raise SystemExit(f"a synchronous call failed: {done['wrong']}")
    return {**latency(done), "jobs_done": after["completed"] - before["completed"],
            "jobs_per_s": (after["completed"] - before["completed"]) / done["seconds"], "pending": after["pending"]}


async def measure_fairness(args, target, url):
    port, store = target.port, open_store(url)
    out = {"none": {}, "backlog": {}}
    try:
        await closed_loop(port, 1, lambda i: ("/v2/models/work/infer", work_body(i)), count=50)  # warm up
        for key, width, pause_ms in fair_phases(args):
            out["none"][key] = await sync_phase(args, port, store, width, pause_ms)
        await submit(port, "work", work_body, args.backlog, args.connections)
        for key, width, pause_ms in fair_phases(args):
            out["backlog"][key] = await sync_phase(args, port, store, width, pause_ms)
            print(f"  .. jobs fairness c{key}: p99 {out['none'][key]['p99_ms']:.1f} ms without jobs, "
                  f"{out['backlog'][key]['p99_ms']:.1f} ms with {out['backlog'][key]['pending']} "
                  f"pending; {out['backlog'][key]['jobs_per_s']:.1f} jobs/s meanwhile", flush=True)
    finally:
        await store.close()
    return out


def run_fairness(args, stores, workdir):
    url = stores.fresh("sqlite")
    target = server(args, "jobs-fairness", "sched_model.py", "work", url, "--cost_ms", str(WORK_MS),
                    "--timeout_us", "0", "--job_concurrency", str(args.fair_job_concurrency))
    with Running(args, target, workdir):
        return {"job_concurrency": args.fair_job_concurrency, "backlog_jobs": args.backlog, "calls": args.fair_calls,
                "phases": fair_phases(args), **asyncio.run(measure_fairness(args, target, url))}


# --------------------------------------------------------------------------- memory

def file_mib(url):
    path = url[len("sqlite:///"):]
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p)) / 2**20


async def measure_rss(args, target, url):
    rounds = 10
    per_round = max(1, args.rss_jobs // rounds)
    store, samples = open_store(url), []
    idle = benchlib.rss_mib(target.proc.pid)
    try:
        for n in range(rounds):
            await submit(target.port, "addone", addone_body, per_round, args.connections)
            counts = await until_done(store, timeout=max(120.0, per_round / 50))
            samples.append({"jobs": per_round * (n + 1), "rss_mib": benchlib.rss_mib(target.proc.pid),
                            "kept": counts["completed"]})
            print(f"  .. jobs rss {samples[-1]['jobs']:>7} jobs: {samples[-1]['rss_mib']:.1f} MiB, "
                  f"{counts['completed']} finished jobs kept", flush=True)
        purged = await until_purged(store)
    finally:
        await store.close()
    after = benchlib.rss_mib(target.proc.pid)
    return {"jobs": per_round * rounds, "rounds": rounds, "idle_mib": idle, "samples": samples, "purged": purged,
            "after_purge_mib": after, "growth_mib": after - samples[0]["rss_mib"],
            "second_half_growth_mib": after - samples[rounds // 2 - 1]["rss_mib"],
            "processes": len(benchlib.proc_tree(target.proc.pid)), "store_file_mib": file_mib(url)}


async def until_purged(store, timeout=30.0):
    """Whether every finished job was purged within ``timeout`` seconds (retention 1 s, a purge every second)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if sum((await store.counts()).values()) == 0:
            return True
        await asyncio.sleep(0.2)
    return False


def run_rss(args, stores, workdir):
    url = stores.fresh("sqlite")
    target = server(args, "jobs-rss", "addone_model.py", "addone", url, "--job_retention_seconds", "1",
                    "--job_concurrency", str(args.rss_job_concurrency))
    with Running(args, target, workdir):
        return {"job_concurrency": args.rss_job_concurrency, **asyncio.run(measure_rss(args, target, url))}


# --------------------------------------------------------------------------- the run

def run(args):
    """The parts asked for; the results as data (run_all.py's jobs group)."""
    workdir = tempfile.mkdtemp(prefix="jobs_bench-")
    stores = Stores(workdir)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    result = {"settings": {k: getattr(args, k) for k in ("jobs", "connections", "job_concurrency", "workers",
                                                         "sync_seconds", "backlog", "fair_calls", "fair_pause_ms",
                                                         "fair_job_concurrency", "rss_jobs", "rss_job_concurrency")},
              "tree": REPO, "cores": os.cpu_count(), "loadavg_at_start": os.getloadavg()}
    runners = {"throughput": run_throughput, "fairness": run_fairness, "rss": run_rss}
    try:
        for part in parts:
            try:
                result[part] = runners[part](args, stores, workdir)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded, the other parts still run
                print(f"  jobs {part} FAILED: {e!r}", flush=True)
                result[part] = {"error": repr(e)}
    finally:
        stores.close()
        if args.keep_workdir:
            print(f"workdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- figures

num = bench_report.num


def throughput_md(rows):
    if isinstance(rows, dict):
        return f"Throughput: {rows.get('error')}\n"
    headers = ["store", "--job_concurrency", "sync calls/s (p50 / p99 ms)", "submitted/s", "completed/s end to end",
               "completed when the submits ended", "server CPU ms/job", "cores: server / client / redis / others",
               "error"]
    body = [[r["store"], r["job_concurrency"],
             f"{num(r['sync']['calls_per_s'], '.0f')} ({num(r['sync']['p50_ms'], '.1f')} / "
             f"{num(r['sync']['p99_ms'], '.1f')})", num(r["submitted_per_s"], ".0f"),
             f"**{num(r['completed_per_s'], '.0f')}**", r["completed_at_submit_end"],
             num(r["server_cpu_ms_per_job"], ".3f"),
             " / ".join(num(r["cores"].get(k)) for k in ("server", "client", "redis", "others")), r["error"] or ""]
            for r in rows]
    return bench_report.table(headers, body)


def fairness_md(fair):
    if "error" in fair:
        return f"Fairness: {fair['error']}\n"
    rows = []
    for width in fair["backlog"]:
        none, backlog = fair["none"][width], fair["backlog"][width]
        rows.append([phase_label(fair, width), f"{num(none['p50_ms'], '.1f')} / {num(none['p99_ms'], '.1f')}",
                     f"{num(backlog['p50_ms'], '.1f')} / {num(backlog['p99_ms'], '.1f')}",
                     f"**{num(p99_ratio(fair, width))}**", num(p99_added(fair, width)),
                     num(backlog["max_ms"], ".1f"),
                     f"{num(backlog['jobs_per_s'], '.1f')} ({backlog['jobs_done']})", backlog["pending"]])
    headers = ["sync connections", "no jobs: p50 / p99 ms", f"{fair['backlog_jobs']:,} jobs: p50 / p99 ms",
               "p99 with ÷ without", "p99 added ÷ one job", "max ms with jobs", "jobs/s meanwhile (done)",
               "pending after"]
    return (f"sched_model.py's `work` ({WORK_MS:g} ms `def predict`, instance_count=1), {fair['calls']} synchronous "
            f"calls per phase (closed loop), {fair['backlog_jobs']:,} jobs submitted before the backlog phases, "
            f"--job_concurrency {fair['job_concurrency']}.\n\n" + bench_report.table(headers, rows))


def rss_md(rss):
    if "error" in rss:
        return f"RSS: {rss['error']}\n"
    samples = ", ".join(f"{s['jobs']:,}: {s['rss_mib']:.1f}" for s in rss["samples"])
    return (f"{rss['jobs']:,} jobs in {rss['rounds']} rounds, --job_retention_seconds 1, --job_concurrency "
            f"{rss['job_concurrency']}, {rss['processes']} server process(es). RSS (MiB) before the first job: "
            f"{rss['idle_mib']:.1f}; after each round (jobs so far: MiB): {samples}; "
            f"after the purge ({'every job purged' if rss['purged'] else 'NOT every job purged'}): "
            f"{rss['after_purge_mib']:.1f}. Growth from the first round: **{rss['growth_mib']:+.1f} MiB**; over "
            f"the second half: {rss['second_half_growth_mib']:+.1f} MiB. The SQLite file and its WAL: "
            f"{rss['store_file_mib']:.1f} MiB.\n")


def markdown(result):
    """The jobs group's section of bench.md ('' when it did not run)."""
    if not result:
        return ""
    if "settings" not in result:
        return f"### jobs (jobs_bench.py)\n\n{result.get('error') or result.get('skipped') or 'not run'}\n"
    s = result["settings"]
    parts = [f"### jobs (jobs_bench.py)\n\nkserve_sdk ({result['tree']}), {result['cores']} cores, load average "
             f"{result['loadavg_at_start'][0]:.1f} at the start, --workers {s['workers']}.\n"]
    if "throughput" in result:
        parts.append(f"Add-one model, v2 JSON FP32 [1, 4]; {s['jobs']:,} jobs per server submitted on "
                     f"{s['connections']} connections; synchronous calls on as many for {s['sync_seconds']:g} s "
                     "first.\n\n" + throughput_md(result["throughput"]))
    if "fairness" in result:
        parts.append(fairness_md(result["fairness"]))
    if "rss" in result:
        parts.append(rss_md(result["rss"]))
    return "\n".join(parts)


def p99_added(fair, width):
    """What the backlog added to the p99, in job executions (the model's time)."""
    none, backlog = fair["none"][width]["p99_ms"], fair["backlog"][width]["p99_ms"]
    return (backlog - none) / WORK_MS if none and backlog else None


def p99_ratio(fair, width):
    none, backlog = fair["none"][width]["p99_ms"], fair["backlog"][width]["p99_ms"]
    return backlog / none if none and backlog else None


def checks(result):
    """Issue 32's goals, as bench_report's acceptance checks."""
    out = []
    result = result or {}
    rows = result.get("throughput")
    for row in rows if isinstance(rows, list) else []:
        if row["store"] == "sqlite":
            out.append(bench_report.verdict("jobs completed/s end to end", f"jobs sqlite c{row['job_concurrency']}",
                                            None if row["error"] else row["completed_per_s"], ">=", JOBS_PER_S))
    fair = result.get("fairness") or {}
    for width in fair["backlog"] if "backlog" in fair else ():
        if width.isdigit():  # back to back: the issue's goal. With pauses, jobs run in them (one may be running).
            out.append(bench_report.verdict("sync p99 with the backlog ÷ without", f"jobs fairness c{width}",
                                            p99_ratio(fair, width), "<=", FAIR_P99_RATIO))
        out.append(bench_report.verdict("sync p99 added by the backlog ÷ one job execution", f"jobs fairness c{width}",
                                        p99_added(fair, width), "<=", FAIR_ADDED_JOBS))
    rss = result.get("rss") or {}
    if "growth_mib" in rss:
        out.append(bench_report.verdict("RSS growth over the jobs, after the purge (MiB)", f"jobs rss {rss['jobs']:,}",
                                        rss["growth_mib"] if rss["purged"] else None, "<=", RSS_GROWTH_MIB))
    return out


def main():
    benchlib.report_alone(parser().parse_args(), run, markdown, checks)


if __name__ == "__main__":
    main()
