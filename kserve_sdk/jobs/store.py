"""What a durable job is, and the store that keeps it: one interface, two stores (SQLite, Redis).

A job is a request to a model's synchronous route (v1 ``predict`` or v2 ``infer``), kept as the route got it
(:class:`JobRequest`), run later by whichever worker claims it, and answered with exactly what the route would
have answered (:class:`StoredReply`). Its life::

    pending ──claim──▶ in_progress ──finish──▶ completed | failed
       ▲                  │  (lease lost: claimed again, up to max_attempts, then failed)
       └──retry / release─┘──cancel──▶ canceled        (failed, canceled ──retry──▶ pending)

A claim is a lease: the worker that claimed a job owns it until the lease runs out, and renews it while it
runs; a worker that dies leaves its jobs to be claimed again once their leases expire. Only the owner of an
in-progress job can finish it, so a result is stored once.
"""
import abc
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

PENDING, IN_PROGRESS, COMPLETED, FAILED, CANCELED = "pending", "in_progress", "completed", "failed", "canceled"
STATUSES = (PENDING, IN_PROGRESS, COMPLETED, FAILED, CANCELED)
FINISHED = frozenset((COMPLETED, FAILED, CANCELED))

#: A job's id: 32 lowercase hexadecimal digits (a version-4 UUID's).
JOB_ID = re.compile(r"[0-9a-f]{32}")


def new_job_id() -> str:
    """A fresh job id."""
    return uuid.uuid4().hex


@dataclass
class JobRequest:
    """What a job runs: the synchronous route's request as it arrived.

    ``route`` is ``"v1"`` (``POST /v1/models/{model}:predict``) or ``"v2"`` (``POST /v2/models/{model}
    [/versions/{version}]/infer``); ``headers`` are the request headers that shape the answer (lowercase
    names: ``content-type``, ``inference-header-content-length``, ``x-request-id``, ``ce-*``, ``x-kserve-*``).
    """

    route: str
    model: str
    version: Optional[str]
    headers: Dict[str, str]
    body: bytes


@dataclass
class StoredReply:
    """Exactly what the synchronous route answered: status, headers (``content-type`` among them), body."""

    status: int
    headers: Dict[str, str]
    body: bytes


@dataclass
class Job:
    """A job's record (its status document; the request and the reply are kept beside it)."""

    id: str
    model: str
    status: str
    created: float  # Unix seconds
    updated: float
    request_id: str
    attempts: int = 0
    started: Optional[float] = None
    finished: Optional[float] = None
    error: Optional[str] = None
    callback_url: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)  # a store's own bookkeeping, never shown

    def document(self) -> Dict[str, Any]:
        """The job as ``GET /v2/jobs/{id}`` shows it."""
        doc: Dict[str, Any] = {"id": self.id, "model": self.model, "status": self.status,
                               "created": self.created, "updated": self.updated, "attempts": self.attempts,
                               "request_id": self.request_id}
        for name in ("started", "finished", "error", "callback_url"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = value
        return doc


class JobsFull(Exception):
    """``max_pending`` jobs are pending already: the submission is refused (503 with ``Retry-After``)."""

    def __init__(self, limit: int):
        super().__init__(f"{limit} jobs are pending, the server's --max_pending_jobs; retry later")
        self.limit = limit


class JobStore(abc.ABC):
    """Where jobs live. Every method is safe to call from several workers (processes) and replicas at once;
    a method that changes a job changes it atomically."""

    @abc.abstractmethod
    async def submit(self, request: JobRequest, request_id: str, callback_url: Optional[str] = None,
                     max_pending: int = 0) -> Job:
        """Keep a new pending job; it is durable when this returns (written to the file or the server). With
        ``max_pending`` above 0, JobsFull when that many jobs are pending (nothing is written)."""

    @abc.abstractmethod
    async def get(self, job_id: str) -> Optional[Job]:
        """The job, or None (unknown or purged)."""

    @abc.abstractmethod
    async def request_of(self, job_id: str) -> Optional[JobRequest]:
        """The job's request, or None."""

    @abc.abstractmethod
    async def result(self, job_id: str) -> Optional[StoredReply]:
        """The job's stored reply once it has finished with one (completed or failed), else None."""

    @abc.abstractmethod
    async def claim(self, owner: str, lease_seconds: float, limit: int, max_attempts: int
                    ) -> List[Tuple[Job, JobRequest]]:
        """Claim up to ``limit`` jobs for ``owner``, oldest first: pending ones, and in-progress ones whose
        lease has expired (their worker stopped). Each becomes in progress, owned by ``owner`` for
        ``lease_seconds``, with one more attempt and ``started`` set. An expired one that has had
        ``max_attempts`` attempts is not claimed: it becomes failed ("its worker stopped during each of its N
        attempts"), keeping its last error if it has one."""

    @abc.abstractmethod
    async def renew(self, owner: str, job_ids: Sequence[str], lease_seconds: float) -> Set[str]:
        """Extend ``owner``'s leases of ``job_ids``; returns those it still holds (in progress and owned): a
        job left out was canceled, or claimed by another worker after its lease ran out."""

    @abc.abstractmethod
    async def finish(self, owner: str, job_id: str, status: str, reply: Optional[StoredReply],
                     error: Optional[str] = None) -> bool:
        """Store how the job ended (``status`` completed or failed, its reply, its error message), once: only
        while it is in progress and owned by ``owner``; False otherwise (nothing is written)."""

    @abc.abstractmethod
    async def release(self, owner: str, job_ids: Sequence[str]) -> None:
        """Give ``owner``'s in-progress jobs back: pending again, their attempt not counted (a stopping worker)."""

    @abc.abstractmethod
    async def cancel(self, job_id: str) -> Optional[Job]:
        """Cancel a pending or in-progress job (the latter's worker stops it when it next renews); a finished
        one is left as it is. Returns the job after the change, or None when there is no such job."""

    @abc.abstractmethod
    async def retry(self, job_id: str) -> Optional[Job]:
        """Queue a failed or canceled job again: pending, its attempts, error and reply cleared. Any other job is
        left as it is. Returns the job after the change, or None when there is no such job."""

    @abc.abstractmethod
    async def list(self, model: Optional[str] = None, status: Optional[str] = None, limit: int = 100,
                   after: Optional[str] = None) -> Tuple[List[Job], Optional[str]]:
        """Jobs in the order they were submitted, those of ``model`` and in ``status`` when given, starting after
        the job ``after`` (a cursor); returns them and the cursor of the next page (None on the last page)."""

    @abc.abstractmethod
    async def purge(self, finished_before: float) -> int:
        """Delete the jobs that finished before ``finished_before`` (Unix seconds), with their requests and
        replies; returns how many."""

    @abc.abstractmethod
    async def counts(self) -> Dict[str, int]:
        """How many jobs are in each status (every status present, 0 when none)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Let go of the file or the connection."""


def now() -> float:
    """The stores' clock: Unix seconds."""
    return time.time()
