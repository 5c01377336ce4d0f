"""Adaptive batching on vs off: kserve_sdk serving a model with a fixed cost per predict call.

    .venv/bin/python hack/bench/batch_bench.py [--duration 10] [--cost-ms 20] [--slots 1] \
        [--max-batch-size 64] [--max-latency-ms 5]

Two servers of hack/bench/batch_model.py (predict sleeps --cost-ms per call, at most --slots calls at
once, then output-0 = input-0 + 1) on free 127.0.0.1 ports: `batch-off` (no batching) and `batch-on`
(Model(..., max_batch_size=64, max_latency_ms=5)). Each is first checked with 64 concurrent requests
of different values (each answer must be its own input + 1), then loaded by wrk at concurrency 64
with the v2 JSON FP32 [1,16] body of http_bench.py. Prints req/s, p50/p99, the on/off ratio and,
from /metrics, the kserve_batch_size histogram of the timed window. See README.md.
"""

import http.client
import re
from concurrent.futures import ThreadPoolExecutor

import benchlib
import http_bench
import numpy as np
import orjson
from benchlib import HERE, HOST, MODEL, REPO, Case

CASES = [Case("v2-json-16", 64, "v2json", 16)]
TARGETS = ["batch-off", "batch-on"]
BUCKET = re.compile(r'^kserve_batch_size_bucket\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')


def make_targets(names, args, workdir):
    targets = []
    for name in names:
        if name not in TARGETS:
            raise SystemExit(f"unknown target {name!r}; known: {', '.join(TARGETS)}")
        http_port, grpc_port = benchlib.free_ports(2)
        cmd = [args.python, f"{HERE}/batch_model.py", "--model_name", MODEL, "--http_port", str(http_port),
               "--grpc_port", str(grpc_port), "--enable_grpc", "false", "--cost_ms", str(args.cost_ms),
               "--slots", str(args.slots)]
        slots = f"{args.slots} at a time" if args.slots > 0 else "as many at a time as the thread pool runs"
        desc = f"kserve_sdk, sync predict sleeping {args.cost_ms:g} ms per call, {slots}"
        if name == "batch-on":
            cmd += ["--batch_max_size", str(args.max_batch_size),
                    "--batch_max_latency_ms", str(args.max_latency_ms)]
            desc += f", max_batch_size={args.max_batch_size}, max_latency_ms={args.max_latency_ms:g}"
        else:
            desc += ", no batching"
        targets.append(benchlib.Target(name, desc=desc, cmd=cmd, env={"PYTHONPATH": REPO}, port=http_port,
                                       http_port=http_port, ready=benchlib.http_ready("/v2/health/ready")))
    return targets


def check(target, case, payload, n=64):
    """n concurrent requests with different values; each answer must be its own input + 1."""
    rng = np.random.default_rng(7)

    def one(i):
        x = (rng.random((1, case.n), dtype=np.float32) + np.float32(i)).astype(np.float32)
        body = orjson.dumps({"id": f"check-{i}", "inputs": [{"name": "input-0", "shape": [1, case.n],
                                                             "datatype": "FP32", "data": x.reshape(-1)}]},
                            option=orjson.OPT_SERIALIZE_NUMPY)
        p = http_bench.Payload(payload.path, None, body, "application/json", "", x)
        try:
            err = http_bench.check_response(case, p, *http_bench.one_request(target.port, p))
        except OSError as e:
            err = f"request failed: {e!r}"
        return f"request {i}: {err}" if err else None

    with ThreadPoolExecutor(n) as pool:
        errors = [e for e in pool.map(one, range(n)) if e]
    return f"{len(errors)}/{n} wrong, first: {errors[0]}" if errors else None


def batch_histogram(port):
    """{le: cumulative count} of kserve_batch_size for MODEL, from /metrics."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        m = BUCKET.match(line)
        if m and f'model_name="{MODEL}"' in m["labels"]:
            le = re.search(r'le="([^"]+)"', m["labels"]).group(1)
            out[float(le)] = out.get(float(le), 0) + float(m["value"])
    return out


def parser():
    """The command line of this bench (benchlib's flags, the model's cost and batching, wrk's)."""
    ap = benchlib.arg_parser("Adaptive batching on vs off (kserve_sdk), wrk at concurrency 64.", CASES)
    ap.set_defaults(targets=",".join(TARGETS), duration=10, warmup=2)
    ap.add_argument("--cost-ms", type=float, default=20.0, help="sleep per predict call (default 20)")
    ap.add_argument("--slots", type=int, default=1,
                    help="predict calls that may sleep at once (default 1: one device; 0: no limit)")
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--max-latency-ms", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    ap.add_argument("--timeout", type=int, default=10, help="wrk per-request timeout in s (default 10)")
    return ap


def histogram_delta(before, after):
    """(predict calls, [(batch size label, calls)]) between two batch_histogram snapshots."""
    les = sorted(after)
    cum = [after[le] - before.get(le, 0) for le in les]
    per, lo = [], 1
    for le, c, prev in zip(les, cum, [0] + cum[:-1], strict=False):  # [0] + [] when empty
        label = f">{lo - 1}" if le == float("inf") else (f"{lo}" if lo == int(le) else f"{lo}-{int(le)}")
        if c - prev:
            per.append((label, int(c - prev)))
        lo = int(le) + 1 if le != float("inf") else lo
    return int(cum[-1]) if cum else 0, per


def spec(args):
    """This bench as a benchlib.Bench; its data gets 'batch_sizes': {target: [(label, calls)]} and
    'on_off' (req/s ratio) once the report ran."""
    windows = {}    # target name -> (before, after) histogram around the last (timed) load run

    def load(args, target, case, payload, seconds):
        before = batch_histogram(target.port)
        res = http_bench.run_wrk(args, target, case, payload, seconds)
        windows[target.name] = (before, batch_histogram(target.port))
        return res

    def report(rows, targets, cases):
        print("\nkserve_batch_size over the timed window (requests merged per predict call, from /metrics):")
        for t in targets:
            total, per = histogram_delta(*windows.get(t.name, ({}, {})))
            bench.data.setdefault("batch_sizes", {})[t.name] = per
            if not total:
                print(f"  {t.name:<9} no batches recorded" + (" (batching off)" if t.name == "batch-off" else ""))
                continue
            print(f"  {t.name:<9} {total} predict calls; " + ", ".join(f"[{lb}] {n}" for lb, n in per))
        off, on = rows.get(("batch-off", cases[0].key)), rows.get(("batch-on", cases[0].key))
        if off and on and off.rps and on.rps:
            bench.data["on_off"] = on.rps / off.rps
            print(f"\nbatching on/off: {on.rps / off.rps:.2f}x req/s; "
                  f"p50 {fmt_ratio(on.p50, off.p50)}, p99 {fmt_ratio(on.p99, off.p99)} (on/off)")

    bench = benchlib.Bench(tag="batch_bench", cases=CASES, proto="http", make_payload=http_bench.make_payload,
                           check=check, load=load, err_cols=[("non2xx", "non2xx"), ("sockerr", "sockerr")],
                           banner=f"wrk -t{args.threads}, wrk timeout {args.timeout}s",
                           make_targets=make_targets, base="batch-off", report=report)
    return bench


def main():
    args = parser().parse_args()
    http_bench.require_wrk()
    benchlib.main(args, spec(args))


def fmt_ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


if __name__ == "__main__":
    main()
