"""A Prometheus scrape of a server of many models: its time, and what it costs the other requests meanwhile.

    .venv/bin/python hack/bench/scrape_bench.py [--models 200] [--scrapes 20] [--rounds 2]

Serves many_models.py (--models add-one models, one worker, REST only) twice, targets alternating per round:
  ours    kserve_sdk as it ships: internals/prometheus_scrape.py reads the metric files, on a thread
  plain   the same with KSERVE_SDK_INTERNALS=off: prometheus-client's MultiProcessCollector and encoder (what
          KServe and MLServer scrape with), on the same thread
Each model gets one v1 predict first, so every model has its request and stage series. Then, per round:
  scrape       the median and largest time of --scrapes GET /metrics one after another (text 0.0.4), and the
               samples (lines) of a scrape; the first scrape is counted apart (it reads every file whole)
  live beside  GET /v2/health/live in a loop from another process while --scrapes more scrapes run: its p50,
               p99 and largest time, beside the same probes with no scrape running, and those scrapes' median
All traffic goes to 127.0.0.1; servers are stopped by process group at the end. Quote the ratios.
"""
import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

import benchlib
from benchlib import HERE, HOST, REPO


def target(name: str, args) -> benchlib.Target:
    port = benchlib.free_ports(1)[0]
    env = {"PYTHONPATH": f"{HERE}:{REPO}", "BENCH_IMPL": "ours"}
    if name == "plain":
        env["KSERVE_SDK_INTERNALS"] = "off"
    cmd = [args.python, os.path.join(HERE, "many_models.py"), "--model_name", "addone", "--models", str(args.models),
           "--http_port", str(port), "--enable_grpc", "false"]
    return benchlib.Target(name, cmd=cmd, env=env, port=port, http_port=port,
                           ready=benchlib.http_ready("/v2/health/ready"))


def get(connection: http.client.HTTPConnection, path: str) -> "tuple[float, bytes]":
    started = time.perf_counter()
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"GET {path} answered {response.status}: {body[:200]!r}")
    return time.perf_counter() - started, body


def call_every_model(port: int, models: int) -> None:
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    body = json.dumps({"instances": [[1.0, 2.0]]})
    for index in range(models):
        name = "addone" if index == 0 else f"addone-{index}"
        connection.request("POST", f"/v1/models/{name}:predict", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"{name} answered {response.status}")
    connection.close()


def probe(port: int, done, times) -> None:
    """GET /v2/health/live in a loop on one connection until ``done`` is set (120 s at most); the seconds of
    each into ``times`` (a queue)."""
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    taken = []
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        taken.append(get(connection, "/v2/health/live")[0])
    connection.close()
    times.put(taken)


def probes_while(port: int, work) -> "tuple[list, object]":
    """Seconds of each probe sent from another process (not to share this one's interpreter lock with the
    scrapes' reads) while ``work()`` runs; its result."""
    context = multiprocessing.get_context("fork")
    done, times = context.Event(), context.Queue()
    prober = context.Process(target=probe, args=(port, done, times))
    prober.start()
    try:
        time.sleep(0.2)
        result = work()
    finally:
        done.set()
        taken = times.get(timeout=150)
        prober.join(10)
    return taken, result


def measure(port: int, args) -> dict:
    connection = http.client.HTTPConnection(HOST, port, timeout=60)
    first, body = get(connection, "/metrics")

    def scrapes() -> list:
        return [get(connection, "/metrics")[0] for _ in range(args.scrapes)]

    alone = scrapes()
    live_alone, _ = probes_while(port, lambda: time.sleep(0.5))
    live_beside, beside = probes_while(port, scrapes)
    connection.close()
    return {"samples": body.count(b"\n") - body.count(b"\n#"), "first_ms": first * 1000,
            "scrape_p50_ms": ms(alone, 50), "scrape_max_ms": max(alone) * 1000,
            "scrape_beside_p50_ms": ms(beside, 50),
            "live_alone_p50_ms": ms(live_alone, 50), "live_alone_p99_ms": ms(live_alone, 99),
            "live_beside_p50_ms": ms(live_beside, 50), "live_beside_p99_ms": ms(live_beside, 99),
            "live_beside_max_ms": max(live_beside) * 1000}


def ms(values: list, percent: int) -> float:
    """The ``percent`` percentile of times in seconds, in ms."""
    return 1000 * (statistics.quantiles(values, n=100)[percent - 1] if len(values) > 1 else values[0])


def run(args) -> dict:
    results: dict = {"models": args.models, "scrapes": args.scrapes, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="scrape-bench-") as workdir:
        for round_index in range(args.rounds):
            order = ["ours", "plain"] if round_index % 2 == 0 else ["plain", "ours"]
            found = {}
            for name in order:
                server = target(name, args)
                server.start(workdir)
                try:
                    why = server.wait_ready(args.ready_timeout)
                    if why:
                        raise SystemExit(f"{name}: {why}\n{server.log_tail()}")
                    call_every_model(server.http_port, args.models)
                    found[name] = measure(server.http_port, args)
                finally:
                    server.stop()
                print(f"  round {round_index + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in found[name].items()),
                      flush=True)
            results["rounds"].append(found)
    return results


def report(results: dict) -> str:
    keys = ["samples", "first_ms", "scrape_p50_ms", "scrape_max_ms", "scrape_beside_p50_ms", "live_alone_p99_ms",
            "live_beside_p99_ms", "live_beside_max_ms"]
    lines = [f"{results['models']} models, {results['scrapes']} scrapes per round",
             f"{'round':<6} {'target':<6} " + " ".join(f"{k:>19}" for k in keys)]
    for index, found in enumerate(results["rounds"], 1):
        for name, row in found.items():
            lines.append(f"{index:<6} {name:<6} " + " ".join(f"{row[k]:>19.2f}" for k in keys))
        ratio = found["plain"]["scrape_p50_ms"] / found["ours"]["scrape_p50_ms"]
        lines.append(f"{index:<6} plain ÷ ours, scrape p50: {ratio:.1f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, default=200)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ready-timeout", type=float, default=120)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    print(report(run(args)))


if __name__ == "__main__":
    main()
