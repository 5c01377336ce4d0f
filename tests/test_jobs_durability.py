"""Issue 32's durability and fairness acceptance, on real servers (tests/models/job_durability_models.py).

- A ``--workers 2`` server killed with SIGKILL (its whole process group) half-way through 1,000 jobs, then started
  again on the same store, completes every job exactly once with its right answer, running none more than
  ``--job_max_attempts`` times, and runs again the jobs the kill cut short. Once with a SQLite file, once with a
  real redis-server this module starts (appendonly, its own folder and port, stopped by PID at the end).
- With 5,000 jobs waiting for a model that runs one call at a time, each synchronous call waits for at most
  about one job execution, and the jobs go on completing in the pauses between the calls that are longer than
  ``--job_yield_ms``.
"""
import asyncio
import collections
import http.client
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Coroutine, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

import pytest
import redis

from helpers import Server, eventually, redis_server
from kserve_sdk.jobs import open_store
from kserve_sdk.jobs.store import Job, StoredReply

T = TypeVar("T")
MODELS = "tests/models/job_durability_models.py"
LEDGER_ENV = "JOB_EXECUTIONS"  # the models file's: where addone notes its executions
JOBS = 1000
MAX_ATTEMPTS = 3
LEASE_S = 2
SUBMIT_WIDTH = 8  # submitting threads, each on a keep-alive connection
BACKLOG = 5000
WORK_MS = 10.0  # the models file's: the time of one call of `work`
SYNC_CALLS = 40
PAUSE_S = 0.04  # between synchronous calls: room for a few job executions after the --job_yield_ms
#: How long a synchronous call may take with jobs waiting: its own execution and about one job's ahead of it, and
#: room for a busy shared machine. A queue that let the claimed jobs (--job_concurrency 32) go first would take
#: about 330 ms.
SYNC_LIMIT_MS = 2.5 * WORK_MS + 90


# --- the stores ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this module's own (tests/helpers.py), stopped at the end."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file in the test's folder, or the module's redis-server emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    url = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


class StoreReader:
    """The server's store, opened in this process on an event loop of its own (a thread)."""

    def __init__(self, url: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store = open_store(url)

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self.loop).result(60)

    def counts(self) -> Dict[str, int]:
        return self.run(self.store.counts())

    def counts_once_done(self) -> Optional[Dict[str, int]]:
        """The counts once no job is pending or in progress, else None."""
        counts = self.counts()
        return None if counts["pending"] + counts["in_progress"] else counts

    def every_job(self) -> List[Job]:
        async def pages() -> List[Job]:
            jobs: List[Job] = []
            after = None
            while True:
                page, after = await self.store.list(limit=1000, after=after)
                jobs += page
                if after is None:
                    return jobs
        return self.run(pages())

    def results(self, job_ids: Sequence[str]) -> Dict[str, StoredReply]:
        async def read() -> List[Any]:
            return await asyncio.gather(*(self.store.result(job_id) for job_id in job_ids))
        return dict(zip(job_ids, self.run(read()), strict=True))

    def close(self) -> None:
        self.run(self.store.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def reader(store_url: str) -> Iterator[StoreReader]:
    opened = StoreReader(store_url)
    yield opened
    opened.close()


# --- talking to the server -------------------------------------------------------------------------------------
def infer_body(x: int) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [x]}]}).encode()


def submit_jobs(port: int, model: str, count: int) -> Dict[str, int]:
    """Submit ``count`` jobs of ``model`` (inputs 0 .. count-1, x-request-id ``job-<input>``), SUBMIT_WIDTH at a
    time; {job id: input}."""
    local = threading.local()

    def submit(x: int) -> Tuple[str, int]:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        local.connection.request("POST", f"/v2/models/{model}/jobs", infer_body(x),
                                 {"Content-Type": "application/json", "x-request-id": f"job-{x}"})
        answer = local.connection.getresponse()
        body = answer.read()
        assert answer.status == 202, (answer.status, body[:300])
        return json.loads(body)["id"], x

    with ThreadPoolExecutor(SUBMIT_WIDTH) as pool:
        return dict(pool.map(submit, range(count)))


def executions(ledger: Path) -> Dict[str, List[str]]:
    """{request id: the pids of the processes that started executing it} from addone's ledger."""
    found: Dict[str, List[str]] = collections.defaultdict(list)
    for line in ledger.read_text().splitlines():
        request_id, pid = line.split()
        found[request_id].append(pid)
    return found


def answer_of(reply: StoredReply) -> Any:
    assert reply.status == 200, (reply.status, reply.body[:300])
    return json.loads(reply.body)["outputs"][0]["data"]


# --- durability ------------------------------------------------------------------------------------------------
def test_a_server_killed_half_way_runs_every_job_to_one_right_answer_after_its_restart(
        start_server, store_url: str, reader: StoreReader, tmp_path: Path) -> None:
    ledger = tmp_path / "executions.log"
    flags = ("--jobs_store", store_url, "--workers", "2", "--job_lease_seconds", str(LEASE_S),
             "--job_max_attempts", str(MAX_ATTEMPTS), "--job_concurrency", "2")
    first = start_server(MODELS, *flags, env={LEDGER_ENV: str(ledger)}, grpc=False)
    inputs = submit_jobs(first.http_port, "addone", JOBS)
    eventually(lambda: reader.counts()["completed"] >= JOBS // 2, 60, message=first.log)
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.wait_exit(10)
    at_kill = reader.counts()
    assert at_kill["completed"] < JOBS * 0.9, f"the kill came too late to cut any job short: {at_kill}"

    second = start_server(MODELS, *flags, env={LEDGER_ENV: str(ledger)}, grpc=False)
    try:
        ended = eventually(reader.counts_once_done, 60, message=second.log)
    finally:
        second.stop()
    assert ended == {"pending": 0, "in_progress": 0, "completed": JOBS, "failed": 0, "canceled": 0}, ended

    jobs = {job.id: job for job in reader.every_job()}
    assert sorted(jobs) == sorted(inputs)  # each job once in the store, no other
    replies = reader.results(list(jobs))
    answers = {job_id: answer_of(reply) for job_id, reply in replies.items()}
    wrong = {job_id: answer for job_id, answer in answers.items() if answer != [inputs[job_id] + 1]}
    assert not wrong, f"{len(wrong)} jobs kept a wrong answer, e.g. {list(wrong.items())[:5]}"

    ran = executions(ledger)
    for job_id, job in jobs.items():
        pids = ran.get(job.request_id, [])
        assert job.request_id == f"job-{inputs[job_id]}"
        assert 1 <= len(pids) <= job.attempts <= MAX_ATTEMPTS, (job.document(), pids)
        assert len(set(pids)) == len(pids), f"job {job_id} ran twice in one process: {pids}"
    again = {request_id: pids for request_id, pids in ran.items() if len(pids) > 1}
    if not again:
        pytest.fail(f"no job was running when the server was killed (counts then: {at_kill}), so nothing shows "
                    "that a job cut short runs again: the kill must land while jobs execute")


# --- fairness --------------------------------------------------------------------------------------------------
def timed_calls(port: int, count: int, pause_s: float = 0.0) -> List[float]:
    """Milliseconds of ``count`` synchronous calls of `work`, one after another on one keep-alive connection,
    ``pause_s`` apart."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took = []
    try:
        for x in range(count):
            time.sleep(pause_s)
            started = time.perf_counter()
            connection.request("POST", "/v2/models/work/infer", infer_body(x), {"Content-Type": "application/json"})
            answer = connection.getresponse()
            body = answer.read()
            took.append((time.perf_counter() - started) * 1000)
            assert answer.status == 200, body[:300]
            assert json.loads(body)["outputs"][0]["data"] == [x]
    finally:
        connection.close()
    return took


def test_with_5000_jobs_waiting_each_synchronous_call_waits_for_about_one_job_at_most(start_server,
                                                                                       tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    server: Server = start_server(MODELS, "--jobs_store", url, "--job_concurrency", "32", grpc=False)
    reader = StoreReader(url)
    try:
        timed_calls(server.http_port, 5)  # the connection's and the model thread's first use
        submit_jobs(server.http_port, "work", BACKLOG)
        eventually(lambda: reader.counts()["in_progress"] >= 16, 10, message=server.log)  # claimed, queued
        before = reader.counts()
        took = timed_calls(server.http_port, SYNC_CALLS)
        between = reader.counts()
        took_paused = timed_calls(server.http_port, SYNC_CALLS, pause_s=PAUSE_S)
        after = reader.counts()
    finally:
        reader.close()
    # Nine calls in ten within the limit: a queue that let jobs go first makes every call wait for all the claimed
    # ones (about 330 ms each), while a pause of the shared machine may slow one call or two.
    for calls, pending in ((took, before["pending"]), (took_paused, between["pending"])):
        slow = [round(ms, 1) for ms in calls if ms >= SYNC_LIMIT_MS]
        assert len(slow) <= SYNC_CALLS // 10, (
            f"{len(slow)} of {SYNC_CALLS} synchronous calls took {SYNC_LIMIT_MS:.0f} ms or more with "
            f"{pending} jobs pending: {slow}; all: {[round(ms, 1) for ms in calls]}")
    assert after["pending"] > BACKLOG // 2, after  # the backlog was there throughout
    # In each pause (longer than --job_yield_ms, 5 ms by default) the free instance goes to the jobs.
    assert after["completed"] - between["completed"] >= SYNC_CALLS // 2, (between, after)
