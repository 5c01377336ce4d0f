"""Server memory as work grows: registered models, idle keep-alive connections, requests served.

    .venv/bin/python hack/bench/memory_bench.py [--targets ours,kserve] [--quick]

For each target (kserve_sdk `ours`, KServe `kserve`; the add-one model of addone_model.py), RSS summed
over the server's process tree (benchlib.rss_mib) in three measurements, each on a fresh server on free
127.0.0.1 ports, read after --settle seconds of quiet:
  models       many_models.py with 1, 1,000 and 10,000 registered models, after one request to the first
  connections  --connections (5,000) keep-alive connections, each having carried one small v2 JSON
               request and then left idle; RSS before and with them open, then a second request on each
               to count those the server kept. The server runs with --timeout-keep-alive 600 (its default
               of 65 s could close the first while the last are being opened)
  requests     --warmup-requests (10,000) small v2 JSON requests, RSS, then --requests (100,000) more,
               RSS again: the growth after warm-up. h2load --h1, 32 connections, counted with -n
  concurrency  --concurrent (2,000) connections under load (wrk, the small v2 JSON body) against 32, in
               --conc-rounds (3) paired rounds: the median ratio of the rates and every error
The file-descriptor limit is raised to its hard limit in this process before the servers start (they
inherit it). Every wait is bounded; a measurement that fails is recorded with its reason.
"""

import argparse
import asyncio
import dataclasses
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time

import benchlib
import http_bench
import orjson
from benchlib import HOST, MODEL

TARGETS = ["ours", "kserve"]
MODEL_COUNTS = [1, 1000, 10000]
QUICK = {"model_counts": [1, 100, 1000], "connections": 500, "warmup_requests": 1000, "requests": 10000,
         "conc_rounds": 1, "conc_seconds": 2}
SMALL_BODY = orjson.dumps({"id": "bench", "inputs": [{"name": "input-0", "shape": [1, 16], "datatype": "FP32",
                                                      "data": [float(i) for i in range(16)]}]})
INFER = f"/v2/models/{MODEL}/infer"


# --------------------------------------------------------------------------- servers

def start(name, args, workdir, *extra):
    """A ready many_models.py server (BENCH_IMPL as the target's), or raise RuntimeError with why not."""
    sub = tempfile.mkdtemp(dir=workdir)
    t = benchlib.build_targets([name], args, sub, "http", model_script="many_models.py")[0]
    if t.unavailable:
        raise RuntimeError("n/a: " + t.unavailable.splitlines()[0])
    t.cmd += list(extra)
    t.start(sub)
    err = t.wait_ready(args.ready_timeout, interval=0.5)
    if err:
        tail = t.log_tail(5)
        t.stop()
        raise RuntimeError(f"{err}; log: {tail}")
    return t


def settled_rss(t, settle):
    """RSS of the server's tree once it has been quiet (benchlib.wait_idle) and settle more seconds."""
    benchlib.wait_idle(t.proc.pid, timeout=30)
    time.sleep(settle)
    return benchlib.rss_mib(t.proc.pid)


def post_small(port):
    """One small v2 infer request on a new connection; its HTTP status."""
    import http.client
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("POST", INFER, body=SMALL_BODY, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


# --------------------------------------------------------------------------- models

def on_fresh_server(name, args, workdir, measure, *extra):
    """measure(target) on a fresh server started with the extra flags, which is stopped after; its dict, or
    {"note": why} when the server or the measurement failed."""
    t = None
    try:
        t = start(name, args, workdir, *extra)
        return measure(t)
    except (TimeoutError, RuntimeError, OSError) as e:
        return {"note": f"{type(e).__name__}: {e}"}
    finally:
        if t is not None:
            t.stop()


def measure_models(name, args, workdir):
    """RSS with each count of registered models; MiB and KiB per model above the one-model server."""
    def one(t):
        status = post_small(t.port)
        return {"rss_mib": settled_rss(t, args.settle), "status": status}

    out = {}
    for n in args.model_counts:
        out[str(n)] = on_fresh_server(name, args, workdir, one, "--models", str(n))
        print(f"  .. memory {name:<7} {n:>6} models: {shown(out[str(n)])}", flush=True)
    base = out.get(str(args.model_counts[0]), {}).get("rss_mib")
    for n in args.model_counts[1:]:
        row = out[str(n)]
        if base is not None and "rss_mib" in row:
            row["added_mib"] = row["rss_mib"] - base
            row["kib_per_model"] = row["added_mib"] * 1024 / (n - args.model_counts[0])
    return out


def shown(row):
    """One progress line's worth of a measurement."""
    return f"{row['rss_mib']:.1f} MiB" if "rss_mib" in row else row.get("note", "?")


# --------------------------------------------------------------------------- idle connections

async def read_answer(reader):
    """One HTTP/1.1 answer with a Content-Length body; its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                   if k.strip().lower() == "content-length"), 0)
    await reader.readexactly(length)
    return int(lines[0].split()[1])


REQUEST = (f"POST {INFER} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(SMALL_BODY)}\r\n\r\n").encode() + SMALL_BODY


async def one_request(conn):
    """Send the small request on an open (reader, writer); True when it answered 200."""
    reader, writer = conn
    writer.write(REQUEST)
    return await asyncio.wait_for(read_answer(reader), 30) == 200


async def open_idle(port, count, parallel=64):
    """count connections, each after one answered request; (open connections, failures)."""
    conns, failed = [], [0]
    gate = asyncio.Semaphore(parallel)

    async def one():
        async with gate:
            try:
                conn = await asyncio.wait_for(asyncio.open_connection(HOST, port), 30)
                if await one_request(conn):
                    conns.append(conn)
                    return
                conn[1].close()
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
                pass
            failed[0] += 1

    await asyncio.gather(*(one() for _ in range(count)))
    return conns, failed[0]


async def still_served(conns, parallel=64):
    """A second request on every connection: how many the server had kept open."""
    gate = asyncio.Semaphore(parallel)

    async def one(conn):
        async with gate:
            try:
                return await one_request(conn)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
                return False

    return sum(await asyncio.gather(*(one(c) for c in conns)))


async def hold_connections(t, count, settle, limit_s):
    """Open count idle connections, read RSS with them, then count those kept; closes them all."""
    conns = []
    try:
        opened_at = time.monotonic()
        conns, failed = await asyncio.wait_for(open_idle(t.port, count), limit_s)
        open_s = time.monotonic() - opened_at
        rss = await asyncio.get_running_loop().run_in_executor(None, settled_rss, t, settle)
        kept = await asyncio.wait_for(still_served(conns), limit_s)
        return {"rss_mib": rss, "opened": len(conns), "failed": failed, "kept": kept, "open_s": open_s}
    finally:
        for _, writer in conns:
            writer.close()


def measure_connections(name, args, workdir):
    """RSS without and with args.connections idle keep-alive connections, and KiB per connection."""
    def one(t):
        post_small(t.port)
        before = settled_rss(t, args.settle)
        held = asyncio.run(hold_connections(t, args.connections, args.settle, args.limit_s))
        added = held["rss_mib"] - before
        return {"rss_before_mib": before, **held, "added_mib": added,
                "kib_per_connection": added * 1024 / held["opened"] if held["opened"] else None}

    out = {"connections": args.connections,
           **on_fresh_server(name, args, workdir, one, "--timeout-keep-alive", "600")}
    print(f"  .. memory {name:<7} {args.connections} idle connections: {shown(out)}"
          + (f" (kept {out['kept']}/{out['opened']})" if "kept" in out else ""), flush=True)
    return out


# --------------------------------------------------------------------------- requests

def h2load_requests(port, body_file, count, limit_s):
    """count small v2 requests, HTTP/1.1, 32 connections; (2xx answers, seconds) or raise RuntimeError."""
    cmd = ["h2load", "--h1", "-n", str(count), "-c", "32", "-t", "1", "-m", "1", "-d", body_file,
           "-H", "content-type: application/json", f"http://{HOST}:{port}{INFER}"]
    done = benchlib.run_bounded(cmd, limit_s)
    if done is None:
        raise RuntimeError(f"h2load: {count} requests did not finish within {limit_s:.0f}s")
    rc, out, err = done
    m = re.search(r"status codes: (\d+) 2xx", out)
    secs = re.search(r"finished in ([\d.]+)(m?s)", out)
    if rc != 0 or m is None or secs is None:
        raise RuntimeError(f"h2load failed (rc={rc}): {(out + err).strip()[-300:]}")
    return int(m.group(1)), float(secs.group(1)) / (1000 if secs.group(2) == "ms" else 1)


def measure_requests(name, args, workdir):
    """RSS after a warm-up and after args.requests more requests: the growth while serving."""
    body_file = os.path.join(workdir, "small-v2.json")
    with open(body_file, "wb") as f:
        f.write(SMALL_BODY)

    def one(t):
        warm_ok, _ = h2load_requests(t.port, body_file, args.warmup_requests, args.limit_s)
        warm = settled_rss(t, args.settle)
        ok, secs = h2load_requests(t.port, body_file, args.requests, args.limit_s)
        after = settled_rss(t, args.settle)
        return {"ok": warm_ok + ok, "seconds": secs, "rss_after_warmup_mib": warm, "rss_mib": after,
                "growth_mib": after - warm}

    out = {"warmup_requests": args.warmup_requests, "requests": args.requests,
           **on_fresh_server(name, args, workdir, one)}
    print(f"  .. memory {name:<7} after {args.requests} requests: {shown(out)}"
          + (f" (growth {out['growth_mib']:+.1f} MiB)" if "growth_mib" in out else ""), flush=True)
    return out


# --------------------------------------------------------------------------- many concurrent connections

def measure_concurrency(name, args, workdir):
    """req/s with args.concurrent connections against 32, paired over args.conc_rounds rounds (wrk, the
    small v2 JSON body): the ratio and every error. Served well means no error at >= 0.8x the c32 rate."""
    case = benchlib.Case("v2-json-small", 32, "v2json", 16)
    payload = http_bench.make_payload(case, workdir)
    wrk = argparse.Namespace(threads=1, timeout=10)

    def one(t):
        # A first untimed second at many connections: the server's first accept storm is not the steady state.
        http_bench.run_wrk(wrk, t, dataclasses.replace(case, conc=args.concurrent), payload, 1)
        benchlib.wait_idle(t.proc.pid)
        rounds = []
        for _ in range(args.conc_rounds):
            pair = {}
            for conc in (32, args.concurrent):
                res, err = http_bench.run_wrk(wrk, t, dataclasses.replace(case, conc=conc), payload,
                                              args.conc_seconds)
                if res is None:
                    raise RuntimeError(f"wrk at c{conc}: {err}")
                benchlib.wait_idle(t.proc.pid)
                pair[conc] = (res.ok / res.seconds, sum(res.errors.values()))   # non-2xx and socket errors
            rounds.append(pair)
        ratios = [r[args.concurrent][0] / r[32][0] for r in rounds if r[32][0]]
        return {"rps_c32": [r[32][0] for r in rounds], "rps_many": [r[args.concurrent][0] for r in rounds],
                "errors_many": sum(r[args.concurrent][1] for r in rounds),
                "ratio": statistics.median(ratios) if ratios else None}

    out = {"concurrent": args.concurrent, **on_fresh_server(name, args, workdir, one)}
    print(f"  .. memory {name:<7} {args.concurrent} concurrent connections: "
          + (f"{out['ratio']:.2f}x the c32 rate, {out['errors_many']} errors" if out.get("ratio") else
             out.get("note", "no rate")), flush=True)
    return out


# --------------------------------------------------------------------------- main

def raise_fd_limit():
    """Soft RLIMIT_NOFILE up to the hard limit (inherited by the servers started after); the new soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run(args):
    """Every measurement for every target; the results as data (run_all.py's memory group)."""
    fd_limit = raise_fd_limit()
    if fd_limit < 2 * args.connections + 100:
        args.connections = max(0, (fd_limit - 100) // 2)
        print(f"  fd limit {fd_limit}: holding {args.connections} connections")
    if fd_limit < 2 * args.concurrent + 100:
        args.concurrent = max(32, (fd_limit - 100) // 2)
        print(f"  fd limit {fd_limit}: {args.concurrent} concurrent connections")
    workdir = tempfile.mkdtemp(prefix="memory-")
    out = {"fd_limit": fd_limit, "targets": {}}
    try:
        for name in args.targets.split(","):
            out["targets"][name] = {"models": measure_models(name, args, workdir),
                                    "connections": measure_connections(name, args, workdir),
                                    "requests": measure_requests(name, args, workdir),
                                    "concurrency": measure_concurrency(name, args, workdir)}
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def parser():
    """The command line of this bench."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="ours", help=f"comma list from {','.join(TARGETS)} (default ours)")
    ap.add_argument("--model-counts", type=lambda s: [int(x) for x in s.split(",")], default=MODEL_COUNTS,
                    help="registered models per server, the first being the base (default 1,1000,10000)")
    ap.add_argument("--connections", type=int, default=5000, help="idle keep-alive connections (default 5000)")
    ap.add_argument("--warmup-requests", type=int, default=10000, help="requests before the first reading")
    ap.add_argument("--requests", type=int, default=100000, help="requests between the two readings")
    ap.add_argument("--concurrent", type=int, default=2000,
                    help="connections in the concurrency cell (default 2000)")
    ap.add_argument("--conc-rounds", type=int, default=3, help="paired rounds c32 / --concurrent (default 3)")
    ap.add_argument("--conc-seconds", type=float, default=3, help="wrk seconds per run there (default 3)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds of quiet before each RSS reading")
    ap.add_argument("--limit-s", type=float, default=600, help="bound on each load step in s (default 600)")
    ap.add_argument("--quick", action="store_true", help="smaller counts: " + str(QUICK))
    ap.add_argument("--ready-timeout", type=float, default=300, help="server start timeout in s (default 300)")
    ap.add_argument("--venvs", default=os.environ.get("BENCH_VENVS", "/tmp/bench-venvs"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for ours")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the server logs")
    return ap


def parse(argv=None):
    """Parsed flags, --quick applied."""
    args = parser().parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    bad = [n for n in args.targets.split(",") if n not in TARGETS]
    if bad:
        raise SystemExit(f"memory_bench measures {', '.join(TARGETS)}, not {', '.join(bad)}")
    return args


def main():
    benchlib.raise_on_signals()
    args = parse()
    try:
        print(orjson.dumps(run(args), option=orjson.OPT_INDENT_2).decode())
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); servers stopped", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
