"""Issue 31's scheduler benchmark: a 10 ms model that runs one call at a time, offered twice what it can serve.

    .venv/bin/python hack/bench/sched_bench.py [--seconds 20] [--rate 200] [--variants request,policy]
    SCHED_BENCH_SECONDS=3 .venv/bin/python hack/bench/sched_bench.py          # a quick run

The server is sched_model.py on this repo's kserve_sdk (PYTHONPATH, or BENCH_SDK_TREE), REST only, on a free
127.0.0.1 port, stopped by process group at the end: model `work` sleeps --cost-ms in a plain def (a model thread)
under SchedulingPolicy(instance_count=1, priority_levels=2, default_priority_level=2, timeout_action="REJECT"),
and `work_stats` reports its busy time. Every call may wait --timeout-ms, set one of two ways (--variants):
  request  each request's v2 `timeout` parameter (microseconds, as tritonclient sends it)
  policy   the model's default_timeout_microseconds; the requests carry none
For each variant, one server and sched_client.py (its own process, raw HTTP/1.1 keep-alive, one asyncio loop):
  unloaded       --unloaded-calls sequential calls: the model's unloaded latency as this client sees it (p50)
  priorities     open loop at --rate calls/s for --seconds, --high-share of them at priority 1, the rest at 2
  no priorities  the same calls (same arrival times and classes) carrying no priority: all at the default
Reported per phase and class: answered, 504 expired in the queue, 504 cut while running, 503 queue full; latency
p50 / p99 of the answered calls; the model's busy fraction (the union of its executions' intervals over the
sending window); executions per second and the most that ran at once; executions that started after the
deadline the server keeps (the call's arrival + its timeout), and after the deadline their client sent
(x-bench-deadline = time.time() + timeout at sending): the two differ by the time from the client's send to the
server's read, which the server cannot see. Goals (issue 31): priority-1 p99 at most 3x the unloaded p50, busy at
least 95%, no start after the server's deadline. See README.md.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import bench_report
import benchlib
import sched_client
from benchlib import HERE, REPO

MODEL = "work"
VARIANTS = ("request", "policy")
PHASES = (("priorities", "on"), ("no-priorities", "off"))
P99_OVER_UNLOADED = 3
BUSY_MIN = 0.95
OUTCOMES = (("ok", "ok"), ("expired", "504 queue"), ("cut", "504 run"), ("full", "503"))
OTHER = "other"


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SCHED_BENCH_SECONDS") or 20),
                    help="seconds of sending per loaded phase (default 20, or SCHED_BENCH_SECONDS)")
    ap.add_argument("--rate", type=float, default=200, help="calls per second offered (default 200)")
    ap.add_argument("--cost-ms", type=float, default=10, help="the model's time per call (default 10)")
    ap.add_argument("--timeout-ms", type=float, default=200, help="how long a call may wait (default 200)")
    ap.add_argument("--high-share", type=float, default=0.1, help="share of priority-1 calls (default 0.1)")
    ap.add_argument("--unloaded-calls", type=int, default=200, help="sequential calls for the unloaded latency")
    ap.add_argument("--arrivals", choices=["poisson", "fixed"], default="poisson")
    ap.add_argument("--seed", type=int, default=1, help="arrival times and classes (default 1)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list from {','.join(VARIANTS)}")
    ap.add_argument("--trace-handoff", action="store_true",
                    help="also time where the gap between two executions goes (wraps SDK internals: a diagnostic)")
    ap.add_argument("--ready-timeout", type=float, default=90)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    return ap


def server(args, variant):
    """The sched_model.py target of one variant."""
    port = benchlib.free_ports(1)[0]
    timeout_us = int(args.timeout_ms * 1000) if variant == "policy" else 0
    cmd = [args.python, os.path.join(HERE, "sched_model.py"), "--model_name", MODEL, "--http_port", str(port),
           "--enable_grpc", "false", "--cost_ms", str(args.cost_ms), "--timeout_us", str(timeout_us)]
    if args.trace_handoff:
        cmd.append("--trace_handoff")
    return benchlib.Target(f"sched-{variant}", cmd=cmd, env={"PYTHONPATH": REPO}, port=port, http_port=port,
                           ready=benchlib.http_ready("/v2/health/ready"),
                           desc=f"kserve_sdk ({REPO}), sched_model.py, timeout via {variant}")


def client(args, target, variant, *extra):
    """sched_client.py's result (a dict), or {"error": ...}."""
    cmd = [args.python, os.path.join(HERE, "sched_client.py"), "--port", str(target.port), "--model", MODEL,
           "--timeout-ms", str(args.timeout_ms), "--timeout-via", variant, *extra]
    done = benchlib.run_bounded(cmd, timeout=args.seconds + 120)
    if done is None:
        return {"error": "sched_client.py did not finish in time"}
    rc, stdout, stderr = done
    for line in stdout.splitlines():
        if line.startswith("SCHED_RESULT "):
            return json.loads(line.split(" ", 1)[1])
    return {"error": f"sched_client.py rc={rc}: {(stderr or stdout).strip()[-300:]}"}


def run_variant(args, variant, workdir):
    """One server: the unloaded latency, then the loaded phases."""
    target = server(args, variant)
    target.start(workdir)
    try:
        err = target.wait_ready(args.ready_timeout)
        if err:
            return {"error": f"{err}: {target.log_tail(5)}"}
        out = {"unloaded": client(args, target, variant, "--mode", "unloaded", "--calls", str(args.unloaded_calls))}
        for phase, priorities in PHASES:
            benchlib.wait_idle(target.proc.pid)
            before = machine_cpu(), benchlib.cpu_ticks(target.proc.pid)
            out[phase] = client(args, target, variant, "--mode", "load", "--rate", str(args.rate), "--seconds",
                                str(args.seconds), "--high-share", str(args.high_share), "--priorities", priorities,
                                "--arrivals", args.arrivals, "--seed", str(args.seed))
            out[phase]["cpu"] = cpu_use(before, (machine_cpu(), benchlib.cpu_ticks(target.proc.pid)), out[phase])
            print(f"  .. sched {variant:<8} {phase:<14} {brief(out[phase])}", flush=True)
        out["ideal_p99_ratio"] = ideal_ratio(args, out)
        return out
    finally:
        target.stop()


def machine_cpu():
    """(busy, all) clock ticks of every core since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def cpu_use(before, after, phase):
    """Cores in use over a phase, on average: the server's, the client's and everything else's on the machine
    (other work on a shared machine: a phase where others used much was disturbed)."""
    hz = os.sysconf("SC_CLK_TCK")
    (busy0, all0), server0 = before
    (busy1, all1), server1 = after
    cores = os.cpu_count() or 1
    seconds = (all1 - all0) / hz / cores
    if seconds <= 0:
        return {}
    server, machine = (server1 - server0) / hz / seconds, (busy1 - busy0) / hz / seconds
    client = phase.get("client_cpu_s", 0) / seconds
    return {"server": server, "client": client, "others": max(machine - server - client, 0.0)}


def run(args):
    """Every variant; the results as data (run_all.py's sched group)."""
    workdir = tempfile.mkdtemp(prefix="sched_bench-")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        result = {"settings": {k: getattr(args, k) for k in ("seconds", "rate", "cost_ms", "timeout_ms",
                                                             "high_share", "unloaded_calls", "arrivals", "seed")},
                  "tree": REPO, "variants": {v: run_variant(args, v, workdir) for v in variants}}
    finally:
        if args.keep_workdir:
            print(f"workdir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- an ideal scheduler

def ideal_waits(args, service_s):
    """The queue waits (s) of the class-1 calls under a scheduler with no overhead at all, on the same arrival
    plan as the client's: one call at a time, each service_s long, highest priority first, then arrival order;
    a call that waited --timeout-ms is rejected."""
    plan = sched_client.arrival_times(argparse.Namespace(seed=args.seed, rate=args.rate, seconds=args.seconds,
                                                         arrivals=args.arrivals, high_share=args.high_share))
    timeout_s, waiting, waits, now, i = args.timeout_ms / 1000, ([], []), [], 0.0, 0
    while i < len(plan) or any(waiting):
        while i < len(plan) and plan[i][0] <= now:
            waiting[plan[i][1] - 1].append(plan[i][0])
            i += 1
        for level in waiting:
            while level and now - level[0] > timeout_s:
                level.pop(0)
        level = next((n for n, calls in enumerate(waiting) if calls), None)
        if level is None:
            now = plan[i][0] if i < len(plan) else now
            continue
        arrived = waiting[level].pop(0)
        if level == 0:
            waits.append(now - arrived)
        now += service_s
    return waits


def ideal_ratio(args, variant):
    """Class-1 p99 over the unloaded p50 under the ideal scheduler (the model taking exactly --cost-ms): each
    call's latency is its ideal wait plus the measured unloaded p50 (the model's own time and the protocol's)."""
    base = unloaded_ms(variant)
    if not base:
        return None
    waits = ideal_waits(args, args.cost_ms / 1000)
    p99 = sched_client.percentile([w * 1000 + base for w in waits], 0.99)
    return p99 / base if p99 else None


# --------------------------------------------------------------------------- figures

def unloaded_ms(variant):
    return variant.get("unloaded", {}).get("classes", {}).get("1", {}).get("p50_ms")


def p99_ratio(variant, phase):
    """Priority-1 p99 over the unloaded p50."""
    p99 = variant.get(phase, {}).get("classes", {}).get("1", {}).get("p99_ms")
    base = unloaded_ms(variant)
    return p99 / base if p99 and base else None


def brief(phase):
    if "error" in phase:
        return phase["error"]
    one, two = (phase["classes"].get(k, {}) for k in ("1", "2"))
    return (f"p1 p99 {benchlib.fmt(one.get('p99_ms'), '.1f')} ms, p2 p99 {benchlib.fmt(two.get('p99_ms'), '.1f')} "
            f"ms, busy {phase['busy_fraction']:.3f}, late {phase['model'].get('late_on_server')} (server's deadline), "
            f"{phase['model']['late']} (client's)")


def counts(row):
    """answered / 504 queue / 504 run / 503 / any other outcome (another status, a broken connection)."""
    known = [row.get(key, 0) for key, _ in OUTCOMES]
    return " / ".join(str(n) for n in known + [row.get("sent", 0) - sum(known)])


def phase_row(name, phase_name, variant):
    phase = variant.get(phase_name, {})
    if "error" in phase or not phase:
        return [name, phase_name, phase.get("error", "not run")] + [""] * (len(HEADERS) - 3)
    one, two, model = phase["classes"].get("1", {}), phase["classes"].get("2", {}), phase["model"]
    lat = "{} / {}"
    return [name, phase_name,
            lat.format(bench_report.num(one.get("p50_ms"), ".1f"), bench_report.num(one.get("p99_ms"), ".1f")),
            bench_report.num(p99_ratio(variant, phase_name)) + (
                f" (ideal {bench_report.num(variant.get('ideal_p99_ratio'))})" if phase_name == "priorities" else ""),
            lat.format(bench_report.num(two.get("p50_ms"), ".1f"), bench_report.num(two.get("p99_ms"), ".1f")),
            counts(one), counts(two), f"{phase['busy_fraction'] * 100:.1f}",
            f"{model['executions'] / model['window_s']:.1f} / {model['max_running']}",
            f"{model.get('late_on_server')} ({bench_report.num(model.get('late_on_server_max_ms'), '.1f')})",
            f"{model['late']} ({bench_report.num(model.get('late_max_ms'), '.1f')})",
            f"{bench_report.num(phase.get('send_lag_p99_ms'), '.2f')}",
            " / ".join(bench_report.num(phase.get("cpu", {}).get(k)) for k in ("server", "client", "others"))]


HEADERS = ["timeout via", "phase", "class-1 p50 / p99 ms", "class-1 p99 ÷ unloaded", "class-2 p50 / p99 ms",
           *(f"class {k}: " + " / ".join([t for _, t in OUTCOMES] + [OTHER]) for k in (1, 2)),
           "busy %", "executions/s / most at once", "late starts: the server's deadline (max ms late)",
           "late starts: the client's (max ms late)", "client send lag p99 ms",
           "cores used: server / client / others"]


def markdown(result):
    """The sched group's section of bench.md ('' when it did not run)."""
    if not result:
        return ""
    if "variants" not in result:
        return f"### sched (sched_bench.py)\n\n{result.get('error') or result.get('skipped') or 'not run'}\n"
    s = result["settings"]
    rows, unloaded = [], []
    for name, variant in result["variants"].items():
        if "error" in variant:
            rows.append([name, "-", variant["error"]] + [""] * (len(HEADERS) - 3))
            continue
        unloaded.append(f"{name}: {bench_report.num(unloaded_ms(variant))} ms")
        rows += [phase_row(name, phase, variant) for phase, _ in PHASES]
    notes = handoff_lines(result)
    return (f"### sched (sched_bench.py)\n\nkserve_sdk ({result['tree']}): a {s['cost_ms']:g} ms `def predict`, "
            f"instance_count=1, priority_levels=2, REJECT after {s['timeout_ms']:g} ms; {s['rate']:g} calls/s "
            f"({s['arrivals']} arrivals) for {s['seconds']:g} s per phase, class 1 ({s['high_share']:.0%}) at "
            "priority 1 and class 2 at 2 (no priorities: both at the default). Unloaded latency (p50 of "
            f"{s['unloaded_calls']} sequential calls): {', '.join(unloaded)}. Counts are per class: "
            "answered / 504 expired in the queue / 504 cut while running / 503 queue full / other (another status, "
            "a broken connection). Cores used: on average over the phase, by the server's processes, the client and "
            "everything else on this shared machine. Busy: the union of "
            "the model's executions over the sending window. Ideal: a scheduler with no overhead on the same arrivals "
            "(the model taking exactly its time, one call at a time, priority then arrival order), each call's wait "
            "added to the unloaded latency.\n\n" + bench_report.table(HEADERS, rows) + notes)


def handoff_lines(result):
    """With --trace-handoff: where the idle time between two executions went, mean (p99) ms per part."""
    lines = []
    for name, variant in result["variants"].items():
        for phase, _ in PHASES:
            found = variant.get(phase, {}).get("model", {}).get("handoff")
            if found:
                parts = ", ".join(f"{part.replace('_', ' ')} {bench_report.num(v['mean_ms'])} "
                                  f"({bench_report.num(v['p99_ms'])})" for part, v in found.items()
                                  if part not in ("gaps", "via_loop"))
                lines.append(f"- {name} {phase}, {found['gaps']} gaps ({found.get('via_loop', 0)} through the "
                             f"event loop): {parts}")
    return ("\nIdle time between two executions, mean (p99) ms per part:\n\n" + "\n".join(lines) + "\n") \
        if lines else ""


def checks(result):
    """Issue 31's goals per variant and phase, as bench_report's acceptance checks."""
    out = []
    for name, variant in ((result or {}).get("variants") or {}).items():
        where = f"sched {name}"
        out.append(bench_report.verdict("priority-1 p99 ÷ unloaded latency", f"{where} priorities",
                                        p99_ratio(variant, "priorities"), "<=", P99_OVER_UNLOADED))
        for phase, _ in PHASES:
            found = variant.get(phase, {})
            out.append(bench_report.verdict("model busy fraction", f"{where} {phase}",
                                            found.get("busy_fraction"), ">=", BUSY_MIN))
            out.append(bench_report.verdict("executions started after their deadline", f"{where} {phase}",
                                            found.get("model", {}).get("late_on_server"), "<=", 0))
    return out


def main():
    benchlib.report_alone(parser().parse_args(), run, markdown, checks)


if __name__ == "__main__":
    main()
