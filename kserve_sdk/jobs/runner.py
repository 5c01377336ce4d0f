"""The claim loop of one worker: claim jobs, run each as a task, keep their leases, store how they ended.

- **Claiming.** Up to ``--job_concurrency`` jobs run at once in a worker. The loop claims as many as are free
  as soon as a submit in this worker wakes it or a job of its ends, and otherwise looks every 0.1 s (every
  second once it has found nothing for a while: jobs submitted to a sibling worker or another replica).
- **Leases.** Every 0.25 s the worker renews the leases of the jobs it runs; a job it no longer holds (canceled,
  or claimed by another worker after its lease ran out) is cancelled where it runs (its model call sees
  CancelledError, as when a client leaves), and nothing of it is stored.
- **Ending.** A reply with a status below 400 completes the job, any other fails it with the reply's error
  message; a reply over ``--max_job_result_bytes`` fails it, naming the limit. The job is then counted and its
  callback sent. A job this worker cannot run now (it is stopping, or at ``--max_concurrent_requests``) goes
  back to pending, its attempt not counted.
- **Retention.** Jobs that finished longer than ``--job_retention_seconds`` ago are purged at the start and then
  every minute (sooner with a shorter retention).
- **Trouble.** A store that fails is logged once per distinct error; the loop backs off and goes on.
"""
import asyncio
import os
import secrets
import socket
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple

from ..handlers.responder import JSON, error_document
from ..logging import logger
from . import callbacks
from .replay import Postponed, replay, reply_error
from .store import COMPLETED, FAILED, Job, JobRequest, JobStore, StoredReply

if TYPE_CHECKING:
    from .service import JobsService

#: Seconds between looks for jobs while some were found lately, and once none has been for IDLE_AFTER_S.
POLL_S, IDLE_POLL_S, IDLE_AFTER_S = 0.1, 1.0, 10.0
#: Seconds between lease renewals, which also tell which jobs were canceled.
RENEW_S = 0.25
#: The longest pause between purges of expired jobs.
PURGE_EVERY_S = 60.0
#: Seconds the loop waits before claiming again after a job was handed back (the worker was busy).
POSTPONE_S = 0.5
#: How long a stopping worker waits for a claim under way.
STOP_CLAIM_S = 2.0
#: The first and longest pause after a store error.
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.1, 5.0


def new_owner() -> str:
    """This worker's owner id in the store: host, process and a random part (a restarted process differs)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def outcome(reply: StoredReply, max_result_bytes: int) -> Tuple[str, StoredReply, Optional[str]]:
    """How a job with ``reply`` ends: (status, the reply to keep, error message). A reply larger than
    ``max_result_bytes`` (0: no limit) is not kept: the job fails with a 500 naming the limit."""
    size = len(reply.body)
    if max_result_bytes and size > max_result_bytes:
        message = (f"the job's result is {size} bytes, more than the server keeps "
                   f"(--max_job_result_bytes {max_result_bytes}); it was not stored")
        return FAILED, StoredReply(500, {"content-type": JSON}, error_document(500, message)), message
    error = reply_error(reply)
    return (COMPLETED if error is None else FAILED), reply, error


@dataclass
class _Running:
    """A job this worker runs: its task, and whether it has its reply (then it is no longer cancelled)."""

    job: Job
    task: "asyncio.Task[None]"
    finishing: bool = False
    lost: bool = False  # no longer held: canceled, or claimed elsewhere


class StoreTrouble:
    """Store errors, each logged once until the store works again; the pause before the next try."""

    def __init__(self) -> None:
        self._seen: Set[str] = set()
        self.backoff = 0.0

    def failed(self, doing: str, exc: BaseException) -> float:
        """The store failed while ``doing``: logged if new; returns how long to pause."""
        text = f"{type(exc).__name__}: {exc}"
        if text not in self._seen and len(self._seen) < 100:
            self._seen.add(text)
            logger.warning("jobs store error while %s (this worker goes on trying): %s", doing, text)
        self.backoff = min(max(self.backoff * 2, FIRST_BACKOFF_S), MAX_BACKOFF_S)
        return self.backoff

    def worked(self) -> None:
        """The store answered: the next error is logged again."""
        if self._seen:
            logger.info("jobs store answering again")
            self._seen.clear()
        self.backoff = 0.0


class Runner:
    """Claims and runs the jobs of one worker (see the module's docstring)."""

    def __init__(self, service: "JobsService"):
        self.service = service
        self.options = service.options
        self.owner = new_owner()
        self.trouble = StoreTrouble()
        self._running: Dict[str, _Running] = {}
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._tasks: List[asyncio.Task[None]] = []
        self._postponed_until = 0.0

    def start(self) -> None:
        """Begin claiming (the loop waits for a SQLite store's file to exist) and keeping leases."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._claim_loop()), loop.create_task(self._keep_leases())]

    def wake(self) -> None:
        """Look for jobs now."""
        self._wakeup.set()

    async def _nap(self, seconds: float) -> None:
        """Wait ``seconds``, or less when woken."""
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except TimeoutError:
            pass

    # --- claiming ------------------------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self.service.store_exists():  # a stat of the SQLite file: nothing is written before a submit
            if self._stopping:
                return
            await self._nap(POLL_S)
        store = await self.service.store()
        loop = asyncio.get_running_loop()
        purge_every = min(PURGE_EVERY_S, max(self.options.retention_seconds, 1.0))
        next_purge, found_at = 0.0, loop.time()
        while not self._stopping:
            now = loop.time()
            if now >= next_purge:
                await self._purge(store)
                next_purge = now + purge_every
            self._wakeup.clear()  # a wake from here on is kept for the nap below
            free = self.options.concurrency - len(self._running)
            if free > 0 and now >= self._postponed_until:
                try:
                    claimed = await store.claim(self.owner, self.options.lease_seconds, free,
                                                self.options.max_attempts)
                except Exception as e:  # noqa: BLE001 - the loop never dies of the store
                    await self._nap(self.trouble.failed("claiming jobs", e))
                    continue
                self.trouble.worked()
                for job, request in claimed:
                    self._run(job, request)
                if claimed:
                    found_at = now
                    continue
            await self._nap(POLL_S if now - found_at < IDLE_AFTER_S else IDLE_POLL_S)

    async def _purge(self, store: JobStore) -> None:
        try:
            purged = await store.purge(time.time() - self.options.retention_seconds)
        except Exception as e:  # noqa: BLE001
            self.trouble.failed("purging expired jobs", e)
            return
        if purged:
            logger.info("purged %d jobs that finished more than %ss ago (--job_retention_seconds)", purged,
                        self.options.retention_seconds)

    def _run(self, job: Job, request: JobRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._execute(job, request))
        self._running[job.id] = _Running(job, task)

    # --- one job -------------------------------------------------------------------------------------------
    async def _execute(self, job: Job, request: JobRequest) -> None:
        try:
            await self._execute_here(job, request)
        finally:
            self._running.pop(job.id, None)
            self.wake()  # a place is free

    async def _execute_here(self, job: Job, request: JobRequest) -> None:
        running = self._running[job.id]
        try:
            reply = await replay(self.service.dataplane, job, request)
        except Postponed as e:
            running.finishing = True
            self._postponed_until = asyncio.get_running_loop().time() + POSTPONE_S
            logger.info("job %s handed back to pending: %s", job.id, e)
            await self._release([job.id])
            return
        except asyncio.CancelledError:
            if running.lost:  # canceled in the store, or taken over: nothing is stored
                logger.info("job %s stopped: it was canceled (or another worker took it over)", job.id)
                return
            raise  # the worker stops: stop() gives the job back
        running.finishing = True
        status, kept, error = outcome(reply, self.options.max_result_bytes)
        await self._finish(job, status, kept, error)

    async def _finish(self, job: Job, status: str, reply: StoredReply, error: Optional[str]) -> None:
        store = await self.service.store()
        while True:
            try:
                stored = await store.finish(self.owner, job.id, status, reply, error)
                break
            except Exception as e:  # noqa: BLE001 - tried again while the lease lasts (the keeper renews it)
                if self._stopping:
                    self.trouble.failed("storing a job's result", e)
                    return
                await asyncio.sleep(self.trouble.failed("storing a job's result", e))
        self.trouble.worked()
        if not stored:
            logger.info("job %s: its result was not stored (it was canceled or taken over meanwhile)", job.id)
            return
        ended = replace(job, status=status, error=error, finished=time.time())
        if job.callback_url:
            try:
                ended = await store.get(job.id) or ended
            except Exception as e:  # noqa: BLE001 - the callback then carries what this worker knows
                self.trouble.failed("reading a finished job", e)
        self.service.ended(ended)

    async def _release(self, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        try:
            store = await self.service.store()
            await store.release(self.owner, job_ids)
        except Exception as e:  # noqa: BLE001 - their leases then run out and another worker claims them
            self.trouble.failed("handing jobs back", e)

    # --- leases --------------------------------------------------------------------------------------------
    async def _keep_leases(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            ids = [job_id for job_id, running in self._running.items() if not running.finishing]
            if not ids:
                continue
            store = await self.service.store()
            try:
                held = await store.renew(self.owner, ids, self.options.lease_seconds)
            except Exception as e:  # noqa: BLE001
                self.trouble.failed("renewing job leases", e)
                continue
            for job_id in ids:
                running = self._running.get(job_id)
                if job_id not in held and running is not None and not running.finishing:
                    running.lost = True
                    running.task.cancel()

    # --- stopping ------------------------------------------------------------------------------------------
    async def stop(self, grace_seconds: float) -> None:
        """Claim no more; wait up to ``grace_seconds`` for the running jobs, then cancel those left and hand
        them back (pending again); wait for callbacks under way with what is left of the grace period."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(grace_seconds, 0.0)
        self._stopping = True
        claim_loop, keeper = self._tasks or (None, None)
        if claim_loop is not None:  # let a claim under way end (its jobs then see the drain and go back)
            self.wake()
            await asyncio.wait([claim_loop], timeout=STOP_CLAIM_S)
            claim_loop.cancel()
            await asyncio.gather(claim_loop, return_exceptions=True)
        tasks = [running.task for running in self._running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=max(deadline - loop.time(), 0.0))
        left = [job_id for job_id, running in self._running.items() if not running.finishing]
        for job_id in left:
            self._running[job_id].task.cancel()
        await asyncio.gather(*(running.task for running in list(self._running.values())), return_exceptions=True)
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if left:
            logger.warning("%d jobs still running after the %ss grace period: handed back to pending",
                           len(left), grace_seconds)
            await self._release(left)
        await callbacks.drain(deadline - loop.time())
