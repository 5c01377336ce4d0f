"""repo_bench.py's load client, in its own process: raw HTTP/1.1 keep-alive connections on one asyncio loop.

    python hack/bench/repo_client.py --port P --mode zipf --models 10000 [--zipf-s 1.1] [--seconds 60] \
        [--concurrency 4] [--seed 1]
    python hack/bench/repo_client.py --port P --mode hot --models 100 [--seconds 10] [--concurrency 4]

Closed loop: --concurrency workers, each on its own keep-alive connection (sched_client.Connection), send one
v2 JSON POST /v2/models/<model>/infer after another for --seconds (one row of 4 FP64 features, repo_models.ROW);
every answer is checked to come from the model asked (repo_models.model_of). The model of each request is drawn
(seeded) from Zipf's law over --models models, P(rank k) proportional to k^-s; rank k is model ranks[k], a seeded
shuffle of the models, so the hot models are spread over the repository.
  zipf  over every model (--zipf-s, default 1.1). A request is `cold` when it is the first sent to its model in
        this run (the server was started just before, in lazy mode: that model is not loaded), `joined` when
        it was sent while that first one was still unanswered, `repeat` otherwise (a loaded model, or one
        loaded again after its eviction: the client cannot tell which)
  hot   over models 0 .. --models - 1, the same law; warm: each of them asked once before the clock starts, so
        every timed request finds its model loaded
Prints one line `REPO_RESULT {json}`: per class, count, latency p50 / p99 / mean in ms; requests per second; errors
(by HTTP status or exception) with one sample; the distinct models asked.
"""

import argparse
import asyncio
import bisect
import json
import random
import resource
import time

import orjson
import repo_models
from sched_client import Connection, percentile

BODY = orjson.dumps({"inputs": [{"name": "predict", "shape": [1, repo_models.FEATURES], "datatype": "FP64",
                                 "data": repo_models.ROW}]})


class Zipf:
    """Seeded draws of a model index: rank k (1-based) with weight k^-s, rank k being model ranks[k - 1]."""

    def __init__(self, models, s, seed):
        self.rng = random.Random(seed)
        self.ranks = list(range(models))
        random.Random(seed + 1).shuffle(self.ranks)
        total, self.cumulative = 0.0, []
        for k in range(1, models + 1):
            total += k ** -s
            self.cumulative.append(total)

    def draw(self):
        at = bisect.bisect_left(self.cumulative, self.rng.random() * self.cumulative[-1])
        return self.ranks[min(at, len(self.ranks) - 1)]


def wrong_answer(status, body, index):
    """None when the answer is 200 from model ``index``, else what is wrong (its error key)."""
    if status != 200:
        return f"http {status}"
    try:
        got = orjson.loads(body)["outputs"][0]["data"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return "undecodable answer"
    return None if repo_models.model_of(got) == index else "answer of another model"


class Run:
    """What the workers of one run share: the draws, the models asked so far and every outcome."""

    def __init__(self, args):
        self.args = args
        self.zipf = Zipf(args.models, args.zipf_s, args.seed)
        self.first_pending = {}          # model index -> True while its first request is unanswered
        self.latencies = {"cold": [], "joined": [], "repeat": []}
        self.errors, self.samples = {}, {}

    def classify(self, index):
        if index not in self.first_pending:
            self.first_pending[index] = True
            return "cold"
        return "joined" if self.first_pending[index] else "repeat"

    async def worker(self, port, deadline, cold_classes):
        conn = await Connection.open(port)
        try:
            while time.monotonic() < deadline:
                index = self.zipf.draw()
                kind = self.classify(index) if cold_classes else "repeat"
                start = time.perf_counter()
                try:
                    status, body = await conn.post(f"/v2/models/{repo_models.model_name(index)}/infer", BODY)
                except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                    self.error(f"{type(e).__name__}", repr(e))
                    conn.close()
                    conn = await Connection.open(port)
                    continue
                finally:
                    if kind == "cold":
                        self.first_pending[index] = False
                seconds = time.perf_counter() - start
                problem = wrong_answer(status, body, index)
                if problem:
                    self.error(problem, body[:300].decode(errors="replace"))
                else:
                    self.latencies[kind].append(seconds * 1000)
        finally:
            conn.close()

    def error(self, key, sample):
        self.errors[key] = self.errors.get(key, 0) + 1
        self.samples.setdefault(key, sample)


async def warm(port, models):
    """One request to each of models 0 .. models - 1, one after another; the errors."""
    conn, errors = await Connection.open(port), {}
    try:
        for index in range(models):
            status, body = await conn.post(f"/v2/models/{repo_models.model_name(index)}/infer", BODY)
            problem = wrong_answer(status, body, index)
            if problem:
                errors[problem] = errors.get(problem, 0) + 1
    finally:
        conn.close()
    return errors


async def run(args):
    """The whole run (see the module's docstring); the result as a dict."""
    out = {"mode": args.mode, "models": args.models, "concurrency": args.concurrency, "seconds": args.seconds,
           "zipf_s": args.zipf_s}
    if args.mode == "hot":
        out["warm_errors"] = await warm(args.port, args.models)
    state = Run(args)
    cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    deadline = start + args.seconds
    await asyncio.gather(*(state.worker(args.port, deadline, args.mode == "zipf") for _ in range(args.concurrency)))
    elapsed = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    answered = sum(len(v) for v in state.latencies.values())
    out.update(elapsed_s=elapsed, answered=answered, rps=answered / elapsed if elapsed else None,
               errors=state.errors, error_samples=state.samples, distinct_models=len(state.first_pending),
               client_cpu_s=(cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
               classes={kind: summary(values) for kind, values in state.latencies.items() if values})
    every = [v for values in state.latencies.values() for v in values]
    out["all"] = summary(every)
    return out


def summary(values):
    return {"count": len(values), "p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99),
            "mean_ms": sum(values) / len(values) if values else None, "max_ms": max(values, default=None)}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["zipf", "hot"], required=True)
    ap.add_argument("--models", type=int, required=True, help="models drawn from: m00000 .. (models - 1)")
    ap.add_argument("--zipf-s", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    ap.add_argument("--seconds", type=float, default=60, help="timed seconds (default 60)")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args(argv)


def main():
    args = parse()
    print("REPO_RESULT " + json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
