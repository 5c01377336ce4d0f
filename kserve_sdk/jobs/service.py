"""The jobs service of one worker: the store it shares with its siblings, the runner that claims and runs
jobs, and what the jobs API asks of them.

The entry layer (model_server.py) makes one :class:`JobsService` per worker from the ``--jobs_store`` and
``--job_*`` flags (:class:`JobOptions`), installs it (:func:`install`) and starts it once the servers
listen; the REST API (api.py) finds it with :func:`current` (None: jobs are off).

The SQLite store is opened lazily: its file is made at the first submit, and a worker's runner looks for
jobs only once the file exists, so a server that never gets a job writes nothing.
"""
import asyncio
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, FrozenSet, Literal, Optional, overload

from .. import metrics
from ..errors import ServerNotReady
from ..logging import logger
from . import open_store
from .store import CANCELED, Job, JobStore

if TYPE_CHECKING:
    from ..dataplane import DataPlane
    from .runner import Runner

#: The store a server uses unless ``--jobs_store`` names another: a SQLite file in the working directory.
DEFAULT_STORE = "sqlite:///kserve-jobs.sqlite3"
SQLITE_PREFIX = "sqlite:///"
REDIS_PREFIXES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class JobOptions:
    """How this server keeps and runs jobs (the ``--jobs_store`` and ``--job_*`` flags).

    ``store_url`` None turns jobs off. ``callback_hosts`` holds the ``host`` or ``host:port`` entries a
    ``callback_url`` may name (none by default: no callback is allowed).
    """

    store_url: Optional[str] = DEFAULT_STORE
    lease_seconds: float = 30.0
    max_attempts: int = 3
    max_pending: int = 100_000
    max_result_bytes: int = 64 * 1024 * 1024
    retention_seconds: float = 86_400.0
    callback_hosts: FrozenSet[str] = field(default_factory=frozenset)
    concurrency: int = 4

    def check(self) -> None:
        """Refuse options that cannot work: a ValueError naming the flag and what it wants."""
        _check_store_url(self.store_url)
        if not self.lease_seconds > 0:
            raise ValueError(f"--job_lease_seconds must be more than 0, got {self.lease_seconds}")
        if self.max_attempts < 1:
            raise ValueError(f"--job_max_attempts must be 1 or more, got {self.max_attempts}")
        for flag, number in (("--max_pending_jobs", self.max_pending),
                             ("--max_job_result_bytes", self.max_result_bytes),
                             ("--job_retention_seconds", self.retention_seconds)):
            if number < 0:
                raise ValueError(f"{flag} must be 0 or more, got {number}")
        if self.concurrency < 1:
            raise ValueError(f"--job_concurrency must be 1 or more, got {self.concurrency}")
        for host in self.callback_hosts:
            if not _is_host(host):
                raise ValueError(f"--job_callback_hosts: {host!r} is not a host or host:port")


def _check_store_url(url: Optional[str]) -> None:
    if url is None:
        return
    if url.startswith(SQLITE_PREFIX):
        path = url[len(SQLITE_PREFIX):]
        if not path or path.endswith("/"):
            raise ValueError(f"--jobs_store {url!r}: name the SQLite file, as in sqlite:///path/to/jobs.sqlite3")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"--jobs_store {url!r}: the folder {folder} does not exist")
        return
    if url.startswith(REDIS_PREFIXES):
        try:
            import redis  # noqa: F401  (the store needs it; told at start-up rather than at the first job)
        except ImportError:
            raise ValueError(f"--jobs_store {url!r} needs the redis client library: "
                             "pip install 'kserve-sdk[redis]'") from None
        return
    raise ValueError(f"--jobs_store {url!r}: use sqlite:///path/to/file, redis://host:port/db, or none")


def _is_host(entry: str) -> bool:
    parsed = urllib.parse.urlsplit(f"//{entry}")
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:  # not a number, or out of range
        return False
    return port_ok and bool(parsed.hostname) and parsed.netloc == entry and parsed.username is None \
        and not (parsed.path or parsed.query or parsed.fragment)


def callback_refusal(url: str, allowed_hosts: FrozenSet[str]) -> Optional[str]:
    """Why a job may not call ``url`` back (None: it may): an http or https URL whose ``host`` or
    ``host:port`` (the port as written, or the scheme's) is one of ``allowed_hosts``."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return f"callback_url {url!r} is not a URL"
    if parts.scheme not in ("http", "https"):
        return f"callback_url {url!r} must be an http:// or https:// URL"
    host = parts.hostname
    if not host or parts.username is not None or parts.password is not None:
        return f"callback_url {url!r} must name a host (and no user or password)"
    port = port if port is not None else (443 if parts.scheme == "https" else 80)
    named = f"[{host}]" if ":" in host else host
    if named in allowed_hosts or f"{named}:{port}" in allowed_hosts or host in allowed_hosts:
        return None
    if not allowed_hosts:
        return (f"callback_url {url!r}: this server allows no callbacks "
                "(--job_callback_hosts lists the hosts it may call)")
    return (f"callback_url {url!r}: {named}:{port} is not among the hosts this server may call back "
            f"(--job_callback_hosts)")


class JobsService:
    """The jobs of one worker: the shared store, opened when first needed, and the runner claiming from it."""

    def __init__(self, dataplane: "DataPlane", options: JobOptions):
        if options.store_url is None:
            raise ValueError("JobsService needs a store: jobs are off without one")
        self.dataplane = dataplane
        self.options = options
        self._store: Optional[JobStore] = None
        self._opening: Optional[asyncio.Lock] = None
        self._closed = False
        self._runner: Optional[Runner] = None

    @property
    def store_url(self) -> str:
        """The store's URL (``--jobs_store``)."""
        assert self.options.store_url is not None
        return self.options.store_url

    def _sqlite_path(self) -> Optional[str]:
        url = self.store_url
        return url[len(SQLITE_PREFIX):] if url.startswith(SQLITE_PREFIX) else None

    def store_exists(self) -> bool:
        """Whether there may be jobs: a Redis store always, a SQLite store once its file exists."""
        path = self._sqlite_path()
        return self._store is not None or path is None or os.path.exists(path)

    @overload
    async def store(self, create: Literal[True] = True) -> JobStore: ...

    @overload
    async def store(self, create: bool) -> Optional[JobStore]: ...

    async def store(self, create: bool = True) -> Optional[JobStore]:
        """The store, opened on first use; a SQLite store makes its file then, so a submit calls this with
        ``create`` True. With ``create`` False (to read, list or cancel), a SQLite store whose file does not
        exist yet is None: no job was ever submitted. ServerNotReady (503) once the service has stopped."""
        if self._closed:
            raise ServerNotReady("The server is shutting down.")
        if self._store is None:
            if not create and not self.store_exists():
                return None
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self._store is None:
                    self._store = open_store(self.store_url)
        return self._store

    def wake(self) -> None:
        """A job was submitted (or retried) in this worker: the runner looks for jobs at once."""
        if self._runner is not None:
            self._runner.wake()

    def submitted(self, job: Job) -> None:
        """The API kept a new job (or queued one again): it is counted and the runner woken."""
        metrics.job_submitted(job.model)
        self.wake()

    def canceled(self, job: Job) -> None:
        """The API turned a pending or in-progress job canceled (not one that already was): it is counted as
        finished and its callback fires. (A worker running it only stops it: it does neither.)"""
        if job.status == CANCELED:
            self.ended(job)

    def ended(self, job: Job) -> None:
        """``job`` has ended (completed, failed or canceled): counted, and its callback sent if it has one."""
        metrics.job_finished(job.model, job.status, job.created, job.attempts)
        if job.callback_url:
            from .callbacks import send_status

            send_status(job.callback_url, job.document())

    def allowed_callback(self, url: str) -> Optional[str]:
        """Why ``url`` may not be a job's ``callback_url`` (the API answers 400 with it), or None when it may:
        it must be http(s) and its ``host`` or ``host:port`` among ``--job_callback_hosts``."""
        return callback_refusal(url, self.options.callback_hosts)

    async def start(self) -> None:
        """Start claiming and running jobs in this worker (after its servers listen)."""
        from .runner import Runner

        if self._runner is None:
            self._runner = Runner(self)
            self._runner.start()

    async def stop(self, grace_seconds: float) -> None:
        """Stop claiming; let running jobs finish within ``grace_seconds``, give the others back (pending again,
        their attempt not counted), then close the store. The API's store calls then answer 503."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.stop(grace_seconds)
        self._closed = True
        store, self._store = self._store, None
        if store is not None:
            try:
                await store.close()
            except Exception as e:  # noqa: BLE001 - a store that cannot close cleanly must not stop the shutdown
                logger.warning("closing the jobs store: %s", e)


_current: Optional[JobsService] = None


def install(service: Optional[JobsService]) -> None:
    """Make ``service`` the one :func:`current` returns in this worker (None: jobs are off)."""
    global _current
    _current = service


def current() -> Optional[JobsService]:
    """This worker's jobs service, or None when jobs are off (``--jobs_store none``) or not set up."""
    return _current
