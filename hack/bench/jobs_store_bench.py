"""How fast the job stores take submissions and hand jobs out, in one process (not a test).

    .venv/bin/python hack/bench/jobs_store_bench.py [--jobs 20000] [--concurrency 64] [--claim-limit 64]
        [--stores sqlite,redis] [--redis-url redis://host:port/db]

For each store: a fresh SQLite file in a temporary folder, or a redis-server of its own (``appendonly yes``,
started on a free 127.0.0.1 port and stopped at the end) unless ``--redis-url`` names one (its jobs keys are
deleted first). Three timed phases, each printed as calls per second:
  submit xC     --jobs submits of a small v2 JSON body, --concurrency of them in flight
  submit x1     a tenth as many submits, one after another
  claim+finish  claims of --claim-limit jobs until none is left, each claimed job finished (completed, with a
                small stored reply) concurrently before the next claim: one job's claim and finish per unit
"""
import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Awaitable, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from kserve_sdk.jobs import open_store  # noqa: E402
from kserve_sdk.jobs.store import JobRequest, JobStore, StoredReply  # noqa: E402

BODY = b'{"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
REPLY = StoredReply(200, {"content-type": "application/json"},
                    b'{"model_name": "addone", "outputs": [{"name": "OUTPUT0", "shape": [1, 4], "datatype": "FP32", '
                    b'"data": [2, 3, 4, 5]}]}')
REQUEST = JobRequest("v2", "addone", None, {"content-type": "application/json"}, BODY)


async def rate(count: int, call: Callable[[int], Awaitable[object]], in_flight: int) -> float:
    """Calls per second of ``count`` calls, ``in_flight`` of them running at once."""
    next_index = 0

    async def lane() -> None:
        nonlocal next_index
        while next_index < count:
            next_index += 1
            await call(next_index)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return count / (time.perf_counter() - started)


async def claim_and_finish(store: JobStore, limit: int) -> float:
    """Jobs claimed and finished per second until none is left."""
    done, started = 0, time.perf_counter()
    while claimed := await store.claim("bench", 60, limit, 3):
        await asyncio.gather(*(store.finish("bench", job.id, "completed", REPLY) for job, _ in claimed))
        done += len(claimed)
    return done / (time.perf_counter() - started)


async def measure(url: str, args: argparse.Namespace) -> Dict[str, float]:
    store = open_store(url)
    try:
        figures = {"submit xC": await rate(args.jobs, lambda i: store.submit(REQUEST, f"rid-{i}"), args.concurrency),
                   "submit x1": await rate(args.jobs // 10, lambda i: store.submit(REQUEST, f"rid-{i}"), 1),
                   "claim+finish": await claim_and_finish(store, args.claim_limit)}
        counts = await store.counts()
        expected = args.jobs + args.jobs // 10
        if counts["completed"] != expected:
            raise SystemExit(f"{url}: {counts} after the run, expected {expected} completed")
        return figures
    finally:
        await store.close()


def start_redis(folder: str) -> "tuple[subprocess.Popen[bytes], str]":
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server), or pass --redis-url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "yes", "--dir", folder], stdout=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return server, f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit("redis-server did not answer PING within 20 s")
        time.sleep(0.05)


def clear_redis(url: str) -> None:
    import redis

    from kserve_sdk.jobs.redis_store import PREFIX

    with redis.Redis.from_url(url) as client:
        for key in client.scan_iter(PREFIX + "*", count=1000):
            client.delete(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--claim-limit", type=int, default=64)
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    rows: List[tuple] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="jobs-bench-") as folder:
        for kind in args.stores.split(","):
            server: Optional[subprocess.Popen[bytes]] = None
            if kind == "sqlite":
                url = "sqlite:///" + os.path.join(folder, "jobs.sqlite3")
            elif args.redis_url:
                url = args.redis_url
                clear_redis(url)
            else:
                server, url = start_redis(folder)
            try:
                figures = asyncio.run(measure(url, args))
            finally:
                if server is not None:
                    server.terminate()
                    server.wait(timeout=20)
            rows.append((kind, figures))
    print(f"{args.jobs} jobs, {args.concurrency} submits in flight, claims of {args.claim_limit}, "
          f"{os.cpu_count()} cores, load average {load:.1f} at the start")
    print(f"{'store':8} {'submit xC /s':>14} {'submit x1 /s':>14} {'claim+finish /s':>16}")
    for kind, figures in rows:
        print(f"{kind:8} {figures['submit xC']:14,.0f} {figures['submit x1']:14,.0f} {figures['claim+finish']:16,.0f}")


if __name__ == "__main__":
    main()
