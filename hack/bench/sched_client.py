"""sched_bench.py's load client, in its own process: raw HTTP/1.1 keep-alive connections on one asyncio loop.

    python hack/bench/sched_client.py --port P --model work --mode unloaded [--calls 200]
    python hack/bench/sched_client.py --port P --model work --mode load [--rate 200] [--seconds 20] \
        [--high-share 0.1] [--priorities on|off] [--timeout-ms 200] [--arrivals poisson|fixed] [--seed 1]

Every call is a v2 JSON POST /v2/models/<model>/infer of INT32 "x" = [call number], with the v2 parameter
``timeout`` (microseconds, as tritonclient sends it; 0: none) and, with priorities on, ``priority`` (1 for the
high class, 2 for the others); without priorities the calls carry none (the model's default). The header
``x-bench-deadline`` is the call's absolute deadline, time.time() + timeout at sending, for the model to check.
  unloaded  --calls calls one after another, all in the high class (after --calls / 10 not counted)
  load      open loop: calls sent at --rate per second (exponential gaps, or fixed ones) for --seconds,
            whether or not earlier ones were answered, each on an idle connection of the pool (a new one
            when none is idle); --high-share of them (drawn with --seed) in the high class. The stats model
            (<model>_stats) begins its window just before the first call and reports it at the last call's
            sending (busy) and again when every call has been answered (executions, late ones).
Prints one line `SCHED_RESULT {json}`.
"""

import argparse
import asyncio
import json
import random
import resource
import time

import orjson

HOST = "127.0.0.1"
DEADLINE_HEADER = "x-bench-deadline"


class Connection:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port):
        return cls(*await asyncio.open_connection(HOST, port))

    async def post(self, path, body, headers=b""):
        """(status, body) of a POST with a JSON body; headers: extra header lines, each ending in CRLF."""
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n%s\r\n" % (path.encode(), HOST.encode(), len(body), headers) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length) if length else b""

    def close(self):
        self.writer.close()


class Pool:
    """Idle connections, opened ahead; a call takes one or opens another."""

    def __init__(self, port):
        self.port, self.idle, self.opened = port, [], 0

    async def fill(self, n):
        for _ in range(n):
            self.idle.append(await Connection.open(self.port))

    async def post(self, path, body, headers=b""):
        conn = self.idle.pop() if self.idle else None
        if conn is None:
            conn = await Connection.open(self.port)
            self.opened += 1
        try:
            answer = await conn.post(path, body, headers)
        except BaseException:
            conn.close()
            raise
        self.idle.append(conn)
        return answer

    def close(self):
        for conn in self.idle:
            conn.close()


def infer_body(number, priority, timeout_us):
    parameters = {}
    if priority:
        parameters["priority"] = priority
    if timeout_us:
        parameters["timeout"] = timeout_us
    return orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [number]}],
                         "parameters": parameters})


def outcome(status, body):
    """ok, expired (504: its wait in the queue ran out), cut (504: its run passed the deadline), full (503), or
    the status."""
    if status == 200:
        return "ok"
    if status == 504:
        return "expired" if b"queue" in body else "cut"
    return "full" if status == 503 else f"http {status}"


async def call(pool, path, number, priority, timeout_s, send_timeout=True):
    """One call: (outcome, seconds from sending to the whole answer). send_timeout: whether the request carries
    its timeout (else the model's policy has it, and only the deadline header says it)."""
    deadline = time.time() + timeout_s if timeout_s else None
    headers = b"%s: %.6f\r\n" % (DEADLINE_HEADER.encode(), deadline) if deadline else b""
    body = infer_body(number, priority, int(timeout_s * 1e6) if send_timeout else 0)
    start = time.perf_counter()
    try:
        status, answer = await pool.post(path, body, headers)
    except Exception as e:  # noqa: BLE001 - counted as this call's outcome
        return f"error {type(e).__name__}", time.perf_counter() - start
    return outcome(status, answer), time.perf_counter() - start


async def stats(conn, model, op):
    """The stats model's report (op 0 begins a new window first)."""
    body = orjson.dumps({"inputs": [{"name": "op", "shape": [1], "datatype": "INT32", "data": [op]}]})
    status, answer = await conn.post(f"/v2/models/{model}_stats/infer", body)
    if status != 200:
        raise SystemExit(f"stats model answered {status}: {answer[:300]!r}")
    return json.loads(orjson.loads(answer)["outputs"][0]["data"][0])


def percentile(values, q):
    """The q-quantile (0..1) of values, nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def summarize(results):
    """Per class: counts by outcome, and latency p50 / p99 / max in ms of the answered calls."""
    out = {}
    for klass, kind, seconds in results:
        row = out.setdefault(str(klass), {"sent": 0, "latencies": []})
        row["sent"] += 1
        row[kind] = row.get(kind, 0) + 1
        if kind == "ok":
            row["latencies"].append(seconds * 1000)
    for row in out.values():
        lat = row.pop("latencies")
        row.update(p50_ms=percentile(lat, 0.5), p99_ms=percentile(lat, 0.99), max_ms=max(lat, default=None))
    return out


async def unloaded(args):
    """Sequential high-class calls: the model's latency as this client sees it when nothing waits."""
    pool = Pool(args.port)
    await pool.fill(1)
    path = f"/v2/models/{args.model}/infer"
    warm = max(1, args.calls // 10)
    results = []
    for number in range(warm + args.calls):
        kind, seconds = await call(pool, path, number, 1, args.timeout_ms / 1000, args.timeout_via == "request")
        if number >= warm:
            results.append((1, kind, seconds))
    pool.close()
    return {"mode": "unloaded", "calls": args.calls, "classes": summarize(results)}


def arrival_times(args):
    """Seconds from the start of each call's sending, and its class, for the whole run."""
    rng = random.Random(args.seed)
    count = int(args.rate * args.seconds)
    times, at = [], 0.0
    for _ in range(count):
        times.append(at)
        at += rng.expovariate(args.rate) if args.arrivals == "poisson" else 1 / args.rate
    return [(t, 1 if rng.random() < args.high_share else 2) for t in times]


async def load(args):
    """The open-loop run (see the module's docstring)."""
    pool = Pool(args.port)
    await pool.fill(args.connections)
    stats_conn = await Connection.open(args.port)
    path, timeout_s = f"/v2/models/{args.model}/infer", args.timeout_ms / 1000
    plan = arrival_times(args)
    loop = asyncio.get_running_loop()
    lags, tasks = [], []
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    await stats(stats_conn, args.model, 0)
    start = loop.time()
    for number, (at, klass) in enumerate(plan):
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, -delay) * 1000)
        priority = klass if args.priorities == "on" else 0
        tasks.append((klass, asyncio.ensure_future(call(pool, path, number, priority, timeout_s,
                                                                args.timeout_via == "request"))))
    busy = await stats(stats_conn, args.model, 1)
    sent_s = loop.time() - start
    done, pending = await asyncio.wait([t for _, t in tasks], timeout=args.drain_s)
    for task in pending:
        task.cancel()
    after = await stats(stats_conn, args.model, 1)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    results = [(klass, *task.result()) if task in done else (klass, "unanswered", 0.0) for klass, task in tasks]
    stats_conn.close()
    pool.close()
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return {"mode": "load", "priorities": args.priorities == "on", "rate": args.rate, "sent": len(plan),
            "sent_s": sent_s, "classes": summarize(results), "busy": busy, "model": after,
            "busy_fraction": busy["busy_s"] / busy["window_s"] if busy["window_s"] else None,
            "send_lag_p99_ms": percentile(lags, 0.99), "send_lag_max_ms": max(lags, default=None),
            "client_cpu_s": cpu, "connections_opened": pool.opened}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="work")
    ap.add_argument("--mode", choices=["unloaded", "load"], required=True)
    ap.add_argument("--calls", type=int, default=200, help="unloaded: calls measured (default 200)")
    ap.add_argument("--rate", type=float, default=200, help="load: calls per second (default 200)")
    ap.add_argument("--seconds", type=float, default=20, help="load: seconds of sending (default 20)")
    ap.add_argument("--high-share", type=float, default=0.1, help="load: share of high-class calls (default 0.1)")
    ap.add_argument("--priorities", choices=["on", "off"], default="on")
    ap.add_argument("--timeout-ms", type=float, default=200, help="each call's timeout (0: none; default 200)")
    ap.add_argument("--timeout-via", choices=["request", "policy"], default="request",
                    help="request: the v2 timeout parameter; policy: none (the model's default_timeout_microseconds)")
    ap.add_argument("--arrivals", choices=["poisson", "fixed"], default="poisson")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=64, help="load: connections opened ahead (default 64)")
    ap.add_argument("--drain-s", type=float, default=30, help="load: longest wait for the last answers")
    return ap.parse_args(argv)


def main():
    args = parse()
    result = asyncio.run(unloaded(args) if args.mode == "unloaded" else load(args))
    print("SCHED_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
