"""The durable job stores, one suite run against both: SQLite (a file in the test's folder) and Redis (a real
redis-server this module starts on a free port, emptied before each test). Time moves through the stores'
``clock`` argument, never by sleeping. Besides the rules every method keeps, the suite checks that concurrent
claims (one store, two store objects, two processes) never hand one job to two workers, and that a submitted
job outlives a process killed right after its submit returned."""
import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine, Iterator, List, Optional, Tuple, TypeVar

import pytest
import redis

from helpers import ROOT, eventually, redis_server, stop_process_group
from kserve_sdk.jobs import open_store
from kserve_sdk.jobs.redis_store import PREFIX, RedisJobStore
from kserve_sdk.jobs.sqlite_store import SQLiteJobStore
from kserve_sdk.jobs.store import (
    JOB_ID,
    STATUSES,
    Job,
    JobRequest,
    JobsFull,
    JobStore,
    StoredReply,
)

T = TypeVar("T")
LEASE = 0.2
EVERY_BYTE = bytes(range(256))


class Clock:
    """The stores' clock, moved by the tests."""

    def __init__(self) -> None:
        self.time = time.time()

    def __call__(self) -> float:
        return self.time

    def advance(self, seconds: float) -> None:
        self.time += seconds


@dataclass
class Case:
    """One store under test, the event loop its calls run on, and how to reach what it keeps."""

    kind: str
    url: str  # for open_store, in another process
    clock: Clock
    loop: asyncio.AbstractEventLoop
    make: Callable[[], JobStore]
    opened: List[JobStore] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = self.another()

    def another(self) -> JobStore:
        """One more store object on the same file or server (its own connection)."""
        self.opened.append(self.make())
        return self.opened[-1]

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(call)

    def submit(self, count: int = 1, model: str = "m", body: bytes = b"{}", **kwargs: Any) -> List[Job]:
        """``count`` jobs, one after another, the clock moving 1 ms between them."""
        jobs = []
        for i in range(count):
            request = JobRequest(route="v2", model=model, version=None, headers={"content-type": "application/json"},
                                 body=body)
            jobs.append(self.run(self.store.submit(request, f"rid-{i}", **kwargs)))
            self.clock.advance(0.001)
        return jobs

    def claim(self, owner: str, limit: int = 100, max_attempts: int = 3) -> List[Job]:
        return [job for job, _ in self.run(self.store.claim(owner, LEASE, limit, max_attempts))]

    def fetch(self, job_id: str) -> Job:
        """The job as the store has it now (it must have it)."""
        found = self.run(self.store.get(job_id))
        assert found is not None, f"job {job_id} is gone"
        return found

    def status(self, job: Job) -> str:
        return self.fetch(job.id).status

    def traces(self, job: Job) -> int:
        """How many places of the store still hold anything of ``job``."""
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.url[len("sqlite:///"):])) as db:
                return sum(db.execute(f"SELECT COUNT(*) FROM {table} WHERE seq = ?", (job.extra["seq"],)).fetchone()[0]
                           for table in ("jobs", "requests", "replies"))
        with redis.Redis.from_url(self.url) as client:
            keys = [PREFIX + kind + job.id for kind in ("job:", "request:", "reply:")]
            sets = [key for key in client.scan_iter(PREFIX + "*") if client.type(key) == b"zset"]
            return client.exists(*keys) + sum(client.zscore(key, job.id) is not None for key in sets)


# --- the stores ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this module's own (tests/helpers.py), stopped at the end."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    """A fresh store of each kind: a new file, or the module's redis-server emptied."""
    clock, loop = Clock(), asyncio.new_event_loop()
    if request.param == "sqlite":
        path = str(tmp_path / "jobs.sqlite3")
        case = Case("sqlite", "sqlite:///" + path, clock, loop, lambda: SQLiteJobStore(path, clock=clock))
    else:
        url = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushall()
        case = Case("redis", url, clock, loop, lambda: RedisJobStore(url, clock=clock))
    yield case
    for store in case.opened:
        loop.run_until_complete(store.close())
    loop.close()


def _request(body: bytes = EVERY_BYTE) -> JobRequest:
    return JobRequest(route="v2", model="adder", version="2",
                      headers={"content-type": "application/octet-stream", "inference-header-content-length": "17",
                               "x-request-id": "rid-7"}, body=body)


def _reply(body: bytes = EVERY_BYTE, status: int = 200) -> StoredReply:
    return StoredReply(status=status, headers={"content-type": "application/octet-stream",
                                               "inference-header-content-length": "9"}, body=body)


# --- submit, get, request_of ------------------------------------------------------------------------------------
def test_submit_keeps_the_request_exactly(case: Case) -> None:
    store, at = case.store, case.clock.time
    job = case.run(store.submit(_request(), "rid-7", callback_url="http://hooks.example/done"))
    assert JOB_ID.fullmatch(job.id), job.id
    assert (job.model, job.status, job.attempts, job.created, job.updated, job.request_id, job.callback_url) == \
        ("adder", "pending", 0, at, at, "rid-7", "http://hooks.example/done")
    got = case.run(store.get(job.id))
    assert got is not None and got.document() == job.document() == {
        "id": job.id, "model": "adder", "status": "pending", "created": at, "updated": at, "attempts": 0,
        "request_id": "rid-7", "callback_url": "http://hooks.example/done"}
    assert case.run(store.request_of(job.id)) == _request()
    assert case.run(store.result(job.id)) is None, "a pending job has no result"
    plain = case.run(store.submit(JobRequest("v1", "m", None, {}, b""), "rid-8"))
    assert case.run(store.request_of(plain.id)) == JobRequest("v1", "m", None, {}, b"")
    assert case.fetch(plain.id).document() == {
        "id": plain.id, "model": "m", "status": "pending", "created": at, "updated": at, "attempts": 0,
        "request_id": "rid-8"}
    unknown = "0" * 32
    assert (case.run(store.get(unknown)), case.run(store.request_of(unknown)), case.run(store.result(unknown))) == \
        (None, None, None)
    assert case.run(store.counts()) == {"pending": 2, "in_progress": 0, "completed": 0, "failed": 0, "canceled": 0}


def test_a_full_pending_queue_refuses_and_writes_nothing(case: Case) -> None:
    case.submit(3, max_pending=3)
    with pytest.raises(JobsFull, match=r"^3 jobs are pending, the server's --max_pending_jobs; retry later$") as e:
        case.submit(1, max_pending=3)
    assert e.value.limit == 3
    assert case.run(case.store.counts())["pending"] == 3
    assert len(case.run(case.store.list())[0]) == 3, "the refused job was written"
    case.claim("a", limit=1)
    case.submit(1, max_pending=3)  # an in-progress job is not pending
    case.submit(5, max_pending=0)  # no limit
    assert case.run(case.store.counts())["pending"] == 8


def test_concurrent_submits_respect_the_limit(case: Case) -> None:
    async def submit_many() -> List[Any]:
        calls = [case.store.submit(_request(str(i).encode()), f"rid-{i}", max_pending=4) for i in range(10)]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = case.run(submit_many())
    kept = [outcome for outcome in outcomes if isinstance(outcome, Job)]
    assert len(kept) == 4 and sum(isinstance(outcome, JobsFull) for outcome in outcomes) == 6, outcomes
    assert case.run(case.store.counts())["pending"] == 4
    listed = case.run(case.store.list())[0]
    assert [job.id for job in listed] == [job.id for job in sorted(kept, key=lambda job: job.extra["seq"])]
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, Job):
            assert case.run(case.store.request_of(outcome.id)) == _request(str(i).encode())


# --- claim -----------------------------------------------------------------------------------------------------
def test_claim_takes_the_oldest_up_to_the_limit(case: Case) -> None:
    submitted = [case.run(case.store.submit(_request(bytes([i]) * 3), f"rid-{i}")) for i in range(5)]
    at = case.clock.time
    first = case.run(case.store.claim("worker-a", LEASE, 2, 3))
    assert [job.id for job, _ in first] == [job.id for job in submitted[:2]]
    for (job, request), i in zip(first, range(2), strict=True):
        assert (job.status, job.attempts, job.started, job.updated, job.extra["owner"], job.extra["lease_until"]) \
            == ("in_progress", 1, at, at, "worker-a", at + LEASE)
        assert request == _request(bytes([i]) * 3)
    assert case.status(submitted[0]) == "in_progress"
    assert case.claim("worker-b", limit=10) == [case.fetch(job.id) for job in submitted[2:]]
    assert case.claim("worker-b") == [], "every job is taken"
    assert case.claim("worker-b", limit=0) == []
    assert case.run(case.store.counts())["in_progress"] == 5


def test_concurrent_claims_never_share_a_job(case: Case) -> None:
    submitted = {job.id for job in case.submit(300)}
    second = case.another()  # its own connection (SQLite) or connection pool (Redis)

    async def claim_all() -> List[List[Tuple[Job, JobRequest]]]:
        calls = [(second if i % 2 else case.store).claim(f"worker-{i % 3}", 60, 7, 3) for i in range(60)]
        return await asyncio.gather(*calls)

    claimed = [job.id for batch in case.run(claim_all()) for job, _ in batch]
    assert len(claimed) == len(set(claimed)), "a job was handed to two claims"
    assert set(claimed) == submitted, "60 claims of 7 take all 300 jobs"


#: The start of a worker process: ``url name ready go`` in argv; it opens the store, says it is ready (a file),
#: waits for the go file, runs ``work(store, name)`` and prints what that returns as JSON.
_WORKER = """
import asyncio, json, os, sys, time
from kserve_sdk.jobs import open_store
from kserve_sdk.jobs.store import JobRequest

url, name, ready, go = sys.argv[1:5]

async def main():
    store = open_store(url)
    open(ready, "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("no go file within 30 s")
        await asyncio.sleep(0.002)
    done = await work(store, name)
    await store.close()
    print(json.dumps(done))
"""

_CLAIM_ALL = """
async def work(store, owner):
    taken = []
    while claimed := await store.claim(owner, 60, 5, 3):
        for job, _ in claimed:
            if not await store.finish(owner, job.id, "completed", None):
                sys.exit(f"could not finish {job.id}")
            taken.append(job.id)
    return taken
"""

_SUBMIT_100 = """
async def work(store, name):
    jobs = await asyncio.gather(*(store.submit(JobRequest("v1", "m", None, {}, b"x"), name) for _ in range(100)))
    return [job.id for job in jobs]
"""


def _together(url: str, work: str, processes: int, folder: Path) -> List[Any]:
    """What each of ``processes`` worker processes running ``work`` on the store at ``url`` returned; they start
    working at one moment."""
    ready, go = [folder / f"ready-{i}" for i in range(processes)], folder / "go"
    code, env = _WORKER + work + "\nasyncio.run(main())\n", {**os.environ, "PYTHONPATH": ROOT}
    workers = [subprocess.Popen([sys.executable, "-c", code, url, f"worker-{i}", str(ready[i]), str(go)], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True) for i in range(processes)]
    try:
        eventually(lambda: all(path.exists() for path in ready) or any(w.poll() is not None for w in workers), 60)
        go.touch()
        outputs = [worker.communicate(timeout=90) for worker in workers]
    finally:
        for worker in workers:
            stop_process_group(worker)
    assert [worker.returncode for worker in workers] == [0] * processes, [err for _, err in outputs]
    return [json.loads(out) for out, _ in outputs]


def test_two_processes_never_claim_one_job(case: Case, tmp_path: Path) -> None:
    submitted = {job.id for job in case.submit(1500)}
    taken = _together(case.url, _CLAIM_ALL, 2, tmp_path)
    assert all(taken), f"each process should claim some of 1500 jobs, took {[len(ids) for ids in taken]}"
    every = taken[0] + taken[1]
    assert len(every) == len(set(every)), "a job was claimed by both processes"
    assert set(every) == submitted
    assert case.run(case.store.counts())["completed"] == 1500


# --- leases ----------------------------------------------------------------------------------------------------
def test_an_expired_lease_is_claimed_again_with_one_more_attempt(case: Case) -> None:
    job, = case.submit(1)
    assert [got.id for got in case.claim("worker-a")] == [job.id]
    case.clock.advance(LEASE / 2)
    assert case.claim("worker-b") == [], "the lease still runs"
    case.clock.advance(LEASE)
    again, = case.claim("worker-b")
    assert (again.id, again.attempts, again.extra["owner"], again.started) == (job.id, 2, "worker-b", case.clock.time)
    assert not case.run(case.store.finish("worker-a", job.id, "completed", _reply())), "the first owner lost it"
    assert case.run(case.store.finish("worker-b", job.id, "completed", _reply()))
    assert case.run(case.store.result(job.id)) == _reply()


def test_a_job_out_of_attempts_fails_with_the_reason(case: Case) -> None:
    tired, fresh = case.submit(2)
    for attempt in (1, 2):
        claimed = case.claim("worker-a", limit=1, max_attempts=2)
        assert [(job.id, job.attempts) for job in claimed] == [(tired.id, attempt)]
        case.clock.advance(LEASE * 2)
    claimed = case.claim("worker-b", limit=1, max_attempts=2)
    assert [job.id for job in claimed] == [fresh.id], "the next job fills the claim"
    failed = case.fetch(tired.id)
    assert (failed.status, failed.error, failed.attempts, failed.finished) == \
        ("failed", "its worker stopped during each of its 2 attempts", 2, case.clock.time)
    assert "owner" not in failed.extra
    assert case.run(case.store.result(tired.id)) is None, "it failed with no reply"
    assert not case.run(case.store.finish("worker-a", tired.id, "completed", _reply()))
    counts = case.run(case.store.counts())
    assert (counts["failed"], counts["in_progress"], counts["pending"]) == (1, 1, 0)


def test_renew_answers_the_jobs_still_held(case: Case) -> None:
    first, second, third = case.submit(3)
    ids = [first.id, second.id, third.id]
    case.claim("worker-a")
    case.run(case.store.cancel(first.id))
    assert case.run(case.store.renew("worker-a", [*ids, "0" * 32], LEASE)) == {second.id, third.id}
    assert case.fetch(second.id).extra["lease_until"] == case.clock.time + LEASE
    case.clock.advance(LEASE / 2)
    assert case.run(case.store.renew("worker-a", [second.id], LEASE)) == {second.id}
    case.clock.advance(LEASE * 3 / 4)  # third's lease ran out, second's still runs
    assert [job.id for job in case.claim("worker-b")] == [third.id]
    assert case.run(case.store.renew("worker-a", ids, LEASE)) == {second.id}
    assert case.run(case.store.renew("worker-b", ids, LEASE)) == {third.id}
    assert case.run(case.store.renew("worker-b", [], LEASE)) == set()


# --- finish, release -------------------------------------------------------------------------------------------
def test_finish_stores_the_result_once_and_only_for_the_owner(case: Case) -> None:
    job, waiting = case.submit(2)
    case.claim("worker-a", limit=1)
    assert not case.run(case.store.finish("worker-b", job.id, "completed", _reply(b"theirs")))
    assert case.status(job) == "in_progress"
    with pytest.raises(ValueError, match="a job finishes completed or failed, not 'canceled'"):
        case.run(case.store.finish("worker-a", job.id, "canceled", None))
    case.clock.advance(1)
    assert case.run(case.store.finish("worker-a", job.id, "completed", _reply()))
    assert not case.run(case.store.finish("worker-a", job.id, "failed", _reply(b"again", 500), "late"))
    done = case.fetch(job.id)
    assert (done.status, done.finished, done.updated, done.error) == ("completed", case.clock.time, case.clock.time,
                                                                      None)
    assert case.run(case.store.result(job.id)) == _reply(), "the first result stays"
    assert not case.run(case.store.finish("worker-a", waiting.id, "completed", _reply())), "never claimed"
    assert case.status(waiting) == "pending"


def test_a_failed_job_keeps_its_error_and_reply(case: Case) -> None:
    with_reply, without = case.submit(2)
    case.claim("worker-a")
    error_body = b'{"error": "boom"}'
    assert case.run(case.store.finish("worker-a", with_reply.id, "failed", _reply(error_body, 500), "boom"))
    assert case.run(case.store.finish("worker-a", without.id, "failed", None, "the result is too big"))
    assert case.run(case.store.result(with_reply.id)) == _reply(error_body, 500)
    assert case.run(case.store.result(without.id)) is None
    assert [case.fetch(job.id).error for job in (with_reply, without)] == ["boom", "the result is too big"]
    assert case.run(case.store.counts())["failed"] == 2


def test_release_gives_jobs_back_without_counting_the_attempt(case: Case) -> None:
    first, second = case.submit(2)
    case.claim("worker-a")
    case.run(case.store.release("worker-b", [first.id]))
    assert case.status(first) == "in_progress", "not worker-b's to give back"
    case.run(case.store.release("worker-a", [first.id, second.id, "0" * 32]))
    for job in (first, second):
        back = case.fetch(job.id)
        assert (back.status, back.attempts, back.started, back.updated) == ("pending", 0, None, case.clock.time)
        assert "owner" not in back.extra
    assert [(job.id, job.attempts) for job in case.claim("worker-b")] == [(first.id, 1), (second.id, 1)]
    assert case.run(case.store.renew("worker-a", [first.id], LEASE)) == set()


# --- cancel, retry ---------------------------------------------------------------------------------------------
def test_cancel_stops_pending_and_running_jobs_only(case: Case) -> None:
    running, done, waiting = case.submit(3)
    case.claim("worker-a", limit=2)
    case.run(case.store.finish("worker-a", done.id, "completed", _reply()))
    done_at = case.clock.time
    case.clock.advance(LEASE / 4)  # running's lease still runs
    canceled = case.run(case.store.cancel(waiting.id))
    assert canceled is not None
    assert (canceled.status, canceled.finished, canceled.updated) == ("canceled", case.clock.time, case.clock.time)
    assert case.claim("worker-b") == [], "a canceled job is never claimed"
    stopped = case.run(case.store.cancel(running.id))
    assert stopped is not None and stopped.status == "canceled" and "owner" not in stopped.extra
    assert case.run(case.store.renew("worker-a", [running.id], LEASE)) == set(), "its worker learns at renew"
    assert not case.run(case.store.finish("worker-a", running.id, "completed", _reply()))
    assert case.run(case.store.result(running.id)) is None
    left = case.run(case.store.cancel(done.id))
    assert left is not None and left.status == "completed" and left.finished == done_at
    assert case.run(case.store.result(done.id)) == _reply()
    assert case.run(case.store.cancel("0" * 32)) is None
    assert case.run(case.store.counts()) == {"pending": 0, "in_progress": 0, "completed": 1, "failed": 0,
                                             "canceled": 2}


def test_retry_queues_failed_and_canceled_jobs_again(case: Case) -> None:
    failed, canceled, done, running, waiting = case.submit(5)
    case.claim("worker-a", limit=4)
    case.run(case.store.finish("worker-a", failed.id, "failed", _reply(b"bad", 500), "boom"))
    case.run(case.store.cancel(canceled.id))
    case.run(case.store.finish("worker-a", done.id, "completed", _reply()))
    case.clock.advance(LEASE / 4)  # running's lease still runs
    for job in (failed, canceled):
        again = case.run(case.store.retry(job.id))
        assert again is not None
        assert (again.status, again.attempts, again.error, again.started, again.finished, again.updated) == \
            ("pending", 0, None, None, None, case.clock.time)
    assert case.run(case.store.result(failed.id)) is None, "the old reply is gone"
    for job, status in ((done, "completed"), (running, "in_progress"), (waiting, "pending")):
        same = case.run(case.store.retry(job.id))
        assert same is not None and same.status == status and same == case.fetch(job.id)
    assert case.run(case.store.result(done.id)) == _reply()
    assert case.run(case.store.retry("0" * 32)) is None
    assert [job.id for job in case.claim("worker-b")] == [failed.id, canceled.id, waiting.id]


# --- list, purge, counts ---------------------------------------------------------------------------------------
def test_list_pages_through_jobs_in_submission_order(case: Case) -> None:
    jobs = [case.submit(1, model="even" if i % 2 == 0 else "odd")[0] for i in range(250)]
    claimed = {job.id for job in case.claim("worker-a", limit=40)}  # the 40 oldest
    assert claimed == {job.id for job in jobs[:40]}
    pages, after = [], None
    for _ in range(10):
        page, after = case.run(case.store.list(limit=100, after=after))
        pages.append(page)
        if after is None:
            break
    assert [len(page) for page in pages] == [100, 100, 50]
    assert [job.id for page in pages for job in page] == [job.id for job in jobs]
    assert pages[0][-1].id == case.run(case.store.list(limit=100))[1]
    assert case.run(case.store.list(limit=50, after=jobs[199].id)) == (pages[2], None), "an exact last page"

    def ids(**filters: Any) -> List[str]:
        page, cursor = case.run(case.store.list(limit=1000, **filters))
        assert cursor is None
        return [job.id for job in page]

    assert ids(model="even") == [job.id for job in jobs[::2]]
    assert ids(status="in_progress") == [job.id for job in jobs[:40]]
    assert ids(model="odd", status="pending") == [job.id for job in jobs[41::2]]
    assert ids(model="none") == [] and ids(status="failed") == []
    page, after = case.run(case.store.list(model="odd", status="in_progress", limit=7, after=jobs[1].id))
    assert ([job.id for job in page], after) == ([job.id for job in jobs[3:17:2]], jobs[15].id)
    page, after = case.run(case.store.list(model="even", limit=10, after=jobs[30].id))  # in progress, then pending
    assert ([job.id for job in page], after) == ([job.id for job in jobs[32:52:2]], jobs[50].id)


def test_list_refuses_unknown_statuses_and_empty_pages(case: Case) -> None:
    with pytest.raises(ValueError, match=r"unknown job status 'done': one of pending, in_progress, completed, "
                                         r"failed, canceled"):
        case.run(case.store.list(status="done"))
    with pytest.raises(ValueError, match="a page holds at least 1 job, not 0"):
        case.run(case.store.list(limit=0))
    assert case.run(case.store.list(after="0" * 32)) == ([], None), "a cursor whose job is gone ends the listing"


def test_purge_deletes_jobs_finished_before_the_time_and_all_they_kept(case: Case) -> None:
    jobs = case.submit(6)
    old_done, old_failed, old_canceled, new_done, running, waiting = jobs
    case.claim("worker-a", limit=5)
    case.run(case.store.finish("worker-a", old_done.id, "completed", _reply()))
    case.run(case.store.finish("worker-a", old_failed.id, "failed", _reply(b"x", 500), "boom"))
    case.run(case.store.cancel(old_canceled.id))
    cutoff = case.clock.time + 1
    case.clock.advance(2)
    case.run(case.store.finish("worker-a", new_done.id, "completed", _reply()))
    assert case.run(case.store.purge(cutoff)) == 3
    for job in (old_done, old_failed, old_canceled):
        assert (case.run(case.store.get(job.id)), case.run(case.store.request_of(job.id)),
                case.run(case.store.result(job.id))) == (None, None, None)
        assert case.traces(job) == 0, f"something of purged job {job.id} is left"
    assert [case.status(job) for job in (new_done, running, waiting)] == ["completed", "in_progress", "pending"]
    assert case.run(case.store.result(new_done.id)) == _reply()
    assert [job.id for job in case.run(case.store.list())[0]] == [new_done.id, running.id, waiting.id]
    assert case.run(case.store.counts()) == {"pending": 1, "in_progress": 1, "completed": 1, "failed": 0,
                                             "canceled": 0}
    assert case.run(case.store.purge(cutoff)) == 0
    assert case.run(case.store.purge(case.clock.time + 1)) == 1


def test_purge_of_many_jobs_goes_batch_by_batch(case: Case) -> None:
    async def finish_all() -> None:
        requests = [case.store.submit(_request(b"x"), "rid") for _ in range(2500)]
        await asyncio.gather(*requests)
        while claimed := await case.store.claim("worker-a", LEASE, 500, 3):
            await asyncio.gather(*(case.store.finish("worker-a", job.id, "completed", None) for job, _ in claimed))

    case.run(finish_all())
    case.clock.advance(1)
    assert case.run(case.store.purge(case.clock.time)) == 2500
    assert case.run(case.store.counts()) == dict.fromkeys(STATUSES, 0)


def test_counts_name_every_status(case: Case) -> None:
    assert case.run(case.store.counts()) == {"pending": 0, "in_progress": 0, "completed": 0, "failed": 0,
                                             "canceled": 0}
    jobs = case.submit(7)
    case.claim("worker-a", limit=4)
    case.run(case.store.finish("worker-a", jobs[0].id, "completed", None))
    case.run(case.store.finish("worker-a", jobs[1].id, "failed", None, "boom"))
    case.run(case.store.cancel(jobs[4].id))
    assert case.run(case.store.counts()) == {"pending": 2, "in_progress": 2, "completed": 1, "failed": 1,
                                             "canceled": 1}
    case.run(case.store.retry(jobs[1].id))
    case.run(case.store.release("worker-a", [jobs[2].id]))
    assert case.run(case.store.counts()) == {"pending": 4, "in_progress": 1, "completed": 1, "failed": 0,
                                             "canceled": 1}


# --- what each store adds -------------------------------------------------------------------------------------
def test_sqlite_makes_its_file_at_the_first_submit(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    store = SQLiteJobStore(str(path))

    async def scenario() -> Job:
        assert await store.counts() == dict.fromkeys(STATUSES, 0)
        assert await store.get("0" * 32) is None
        assert (await store.claim("w", 1, 10, 3), await store.list()) == ([], ([], None))
        assert not path.exists(), "reads and claims made the file"
        job = await store.submit(_request(), "rid")
        await store.close()
        return job

    job = asyncio.run(scenario())
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT id, status FROM jobs").fetchall() == [(job.id, "pending")]
    missing = tmp_path / "missing"
    with pytest.raises(ValueError, match=re.escape(f"jobs store {missing}/jobs.sqlite3: its directory {missing} "
                                                   "does not exist")):
        SQLiteJobStore(str(missing / "jobs.sqlite3"))


def test_sqlite_names_a_file_it_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    path.write_bytes(b"not a database, " * 100)
    store = SQLiteJobStore(str(path))

    async def submit() -> None:
        try:
            await store.submit(_request(), "rid")
        finally:
            await store.close()

    with pytest.raises(OSError, match=re.escape(f"jobs store {path}: cannot set up the file: file is not a database")):
        asyncio.run(submit())


def test_worker_processes_make_one_file_together(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    submitted = _together(f"sqlite:///{path}", _SUBMIT_100, 3, tmp_path)
    ids = [job_id for some in submitted for job_id in some]
    assert len(ids) == len(set(ids)) == 300
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (300,)
        assert db.execute("SELECT n FROM counts WHERE status = 'pending'").fetchone() == (300,)


def test_a_submitted_job_outlives_its_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    code = """if True:
        import asyncio, os, signal, sys
        from kserve_sdk.jobs.store import JobRequest
        from kserve_sdk.jobs.sqlite_store import SQLiteJobStore

        async def main():
            job = await SQLiteJobStore(sys.argv[1]).submit(JobRequest("v1", "m", None, {}, b"kept"), "rid")
            print(job.id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no exit handlers

        asyncio.run(main())
    """
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    job_id = done.stdout.strip()

    async def read() -> Tuple[Optional[Job], Optional[JobRequest]]:
        store = SQLiteJobStore(str(path))
        try:
            return await store.get(job_id), await store.request_of(job_id)
        finally:
            await store.close()

    job, request = asyncio.run(read())
    assert job is not None and job.status == "pending"
    assert request == JobRequest("v1", "m", None, {}, b"kept")


@pytest.mark.parametrize("case", ["redis"], indirect=True)
def test_redis_keys_stay_under_the_prefix(case: Case) -> None:
    with redis.Redis.from_url(case.url) as client:
        client.set("other:data", b"theirs")
        done, _ = case.submit(2)
        case.claim("worker-a", limit=1)
        case.run(case.store.finish("worker-a", done.id, "completed", _reply()))
        keys = set(client.scan_iter("*"))
        assert all(key.startswith(PREFIX.encode()) for key in keys - {b"other:data"}), keys
        case.clock.advance(1)
        assert case.run(case.store.purge(case.clock.time)) == 1
        assert client.get("other:data") == b"theirs"


def test_the_redis_store_says_how_to_install_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("redis", "redis.asyncio"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    monkeypatch.delitem(sys.modules, "kserve_sdk.jobs.redis_store")
    with pytest.raises(ImportError, match=r"the Redis job store needs the redis client library: "
                                          r"pip install 'kserve-sdk\[redis\]'"):
        open_store("redis://127.0.0.1:6379/0")


def test_open_store_reads_the_url(tmp_path: Path) -> None:
    sqlite = open_store(f"sqlite:///{tmp_path}/jobs.sqlite3")
    assert isinstance(sqlite, SQLiteJobStore) and sqlite.path == f"{tmp_path}/jobs.sqlite3"
    assert isinstance(open_store("redis://127.0.0.1:1/0"), RedisJobStore)
    with pytest.raises(ValueError, match=r"--jobs_store 'mysql://x': use sqlite:///path/to/file or "
                                         r"redis://host:port/db"):
        open_store("mysql://x")
    asyncio.run(sqlite.close())
