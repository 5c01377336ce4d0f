"""The job store in one SQLite file (stdlib ``sqlite3``), shared by every worker process of a server.

The file runs in WAL mode with ``synchronous=NORMAL``: a committed transaction is in the write-ahead log
before the call returns, so it survives the process being killed (only a power loss or an operating-system
crash can drop the last transactions). That is what "on disk before the 202" means for this store.

Each store object keeps one connection, made and used on one thread of its own, so the event loop never
waits on the file. Writes that arrive while that thread is busy wait for it together and are then committed
in one transaction (a group commit): each still answers only once its write is committed. Several processes
share the file through SQLite's locks: a write transaction starts with ``BEGIN IMMEDIATE`` (it takes the
write lock before reading what it changes, so two workers never claim one job), and a busy file is waited
for (``busy_timeout``) rather than failed.

The file and its tables are created by the first submit; until then reads answer as for an empty store (a
server that never gets a job leaves no file behind).
"""
import asyncio
import json
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

from .store import (
    CANCELED,
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    PENDING,
    STATUSES,
    Job,
    JobRequest,
    JobsFull,
    JobStore,
    StoredReply,
    new_job_id,
    now,
)

T = TypeVar("T")
Clock = Callable[[], float]
Connection = sqlite3.Connection

#: How long a call waits for another process's write transaction to end before it fails.
BUSY_TIMEOUT_SECONDS = 30.0
#: Jobs deleted per transaction by purge, so other workers are never kept waiting long.
PURGE_BATCH = 1000

_SCHEMA = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,            -- submission order: listing order, claim order, cursor position
    id TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    request_id TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    started REAL,
    finished REAL,
    error TEXT,
    callback_url TEXT,
    owner TEXT,                         -- the worker holding an in-progress job's lease
    lease_until REAL
);
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY, route TEXT NOT NULL, version TEXT, headers TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS replies (
    seq INTEGER PRIMARY KEY, status INTEGER NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL);
-- claim (pending jobs in submission order; in-progress ones for expired leases) and listing by status
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, seq);
-- listing by model, and by model and status
CREATE INDEX IF NOT EXISTS jobs_by_model ON jobs (model, status, seq);
-- purge
CREATE INDEX IF NOT EXISTS jobs_by_finished ON jobs (finished) WHERE finished IS NOT NULL;
-- jobs per status, kept by triggers in the transaction that changes them: counts() and max_pending read one row
CREATE TABLE IF NOT EXISTS counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO counts VALUES {", ".join(f"('{status}', 0)" for status in STATUSES)};
CREATE TRIGGER IF NOT EXISTS jobs_counted_in AFTER INSERT ON jobs BEGIN
    UPDATE counts SET n = n + 1 WHERE status = NEW.status; END;
CREATE TRIGGER IF NOT EXISTS jobs_counted_out AFTER DELETE ON jobs BEGIN
    UPDATE counts SET n = n - 1 WHERE status = OLD.status; END;
CREATE TRIGGER IF NOT EXISTS jobs_counted_moved AFTER UPDATE OF status ON jobs WHEN OLD.status <> NEW.status BEGIN
    UPDATE counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE counts SET n = n + 1 WHERE status = NEW.status; END;
COMMIT;
"""

_COLUMNS = ("seq, id, model, status, created, updated, request_id, attempts, started, finished, error, "
            "callback_url, owner, lease_until")
#: ``WHERE id IN (...)`` over a list of ids handed in as one JSON array (no limit on how many).
_IDS = "id IN (SELECT value FROM json_each(?))"


def _job(row: Tuple[Any, ...]) -> Job:
    (seq, job_id, model, status, created, updated, request_id, attempts, started, finished, error, callback_url,
     owner, lease_until) = row
    extra: Dict[str, Any] = {"seq": seq}
    if owner is not None:
        extra.update(owner=owner, lease_until=lease_until)
    return Job(id=job_id, model=model, status=status, created=created, updated=updated, request_id=request_id,
               attempts=attempts, started=started, finished=finished, error=error, callback_url=callback_url,
               extra=extra)


def stopped_message(attempts: int) -> str:
    """The error of a job whose worker stopped during every attempt it had."""
    return f"its worker stopped during each of its {attempts} attempts"


class _Write:
    """One write waiting for the store's thread: what it does, what it answers while there is no file, and
    where its caller waits."""

    __slots__ = ("do", "empty", "create", "future")

    def __init__(self, do: Callable[[Connection], Any], empty: Any, create: bool, future: "asyncio.Future[Any]"):
        self.do, self.empty, self.create, self.future = do, empty, create, future


def _set_up(connection: Connection) -> None:
    """WAL mode and the tables. Workers starting together on a new file race for it: switching to WAL and
    making the schema can be refused at once as locked (SQLite does not wait there, to avoid a deadlock), so
    the set-up is tried again until the busy timeout."""
    give_up = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            connection.execute("PRAGMA journal_mode = WAL")
            # A committed transaction is then in the WAL file when the call returns: it survives a killed process.
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.executescript(_SCHEMA)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > give_up:
                raise
            if connection.in_transaction:
                connection.rollback()
            time.sleep(0.01)


class SQLiteJobStore(JobStore):
    """Jobs in the SQLite file at ``path`` (relative to the working directory, or absolute); its directory must
    exist. ``clock`` gives the time in Unix seconds (tests move it)."""

    def __init__(self, path: str, clock: Clock = now):
        self.path = os.path.abspath(path)
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise ValueError(f"jobs store {self.path}: its directory {folder} does not exist")
        self.clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobs-sqlite")
        self._connection: Optional[Connection] = None  # made and used on self._thread only
        self._lock = threading.Lock()
        self._writes: List[_Write] = []
        self._flush_queued = False
        self._closed = False

    # --- on the store's thread --------------------------------------------------------------------------------
    def _connect(self, create: bool) -> Optional[Connection]:
        """The connection (None while there is no file and ``create`` is false); the file, its WAL mode and
        tables are set up on first use."""
        if self._connection is not None:
            return self._connection
        if not create and not os.path.exists(self.path):
            return None
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        except sqlite3.Error as e:
            raise OSError(f"jobs store {self.path}: cannot open or create the file: {e}") from e
        try:
            _set_up(connection)
        except sqlite3.Error as e:
            connection.close()
            raise OSError(f"jobs store {self.path}: cannot set up the file: {e}") from e
        self._connection = connection
        return connection

    def _flush(self) -> None:
        """Run every write queued so far in one transaction, then answer each."""
        with self._lock:
            writes, self._writes, self._flush_queued = self._writes, [], False
        try:
            answers = self._run(writes)
        except Exception as e:  # nothing of this batch was written
            answers = [(False, e)] * len(writes)
        for write, (ok, value) in zip(writes, answers, strict=True):
            _answer(write.future, ok, value)

    def _run(self, writes: List[_Write]) -> List[Tuple[bool, Any]]:
        connection = self._connect(any(write.create for write in writes))
        if connection is None:
            return [(True, write.empty) for write in writes]
        answers: List[Tuple[bool, Any]] = []
        connection.execute("BEGIN IMMEDIATE")
        try:
            for write in writes:
                try:
                    answers.append((True, write.do(connection)))
                except JobsFull as e:  # refused before it wrote anything
                    answers.append((False, e))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return answers

    def _read_now(self, read: Callable[[Connection], T], empty: T) -> T:
        connection = self._connect(False)
        return empty if connection is None else read(connection)

    def _close_now(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # --- on the event loop ------------------------------------------------------------------------------------
    async def _write(self, do: Callable[[Connection], T], empty: T, create: bool = False) -> T:
        """``do(connection)`` in a write transaction on the store's thread; ``empty`` while there is no file
        (unless ``create``: then the file is made)."""
        self._check_open()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._writes.append(_Write(do, empty, create, future))
            start, self._flush_queued = not self._flush_queued, True
        if start:
            self._thread.submit(self._flush)
        return await future

    async def _read(self, read: Callable[[Connection], T], empty: T) -> T:
        """``read(connection)`` on the store's thread; ``empty`` while there is no file."""
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._read_now, read, empty)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"jobs store {self.path} is closed")

    # --- the interface ----------------------------------------------------------------------------------------
    async def submit(self, request: JobRequest, request_id: str, callback_url: Optional[str] = None,
                     max_pending: int = 0) -> Job:
        job_id, at = new_job_id(), self.clock()
        headers, body = json.dumps(request.headers), bytes(request.body)

        def insert(connection: Connection) -> Job:
            if max_pending > 0:
                (pending,), = connection.execute(f"SELECT n FROM counts WHERE status = '{PENDING}'")
                if pending >= max_pending:
                    raise JobsFull(max_pending)
            seq = connection.execute(
                "INSERT INTO jobs (id, model, status, created, updated, request_id, callback_url) "
                f"VALUES (?, ?, '{PENDING}', ?, ?, ?, ?)",
                (job_id, request.model, at, at, request_id, callback_url)).lastrowid
            connection.execute("INSERT INTO requests VALUES (?, ?, ?, ?, ?)",
                               (seq, request.route, request.version, headers, body))
            return Job(id=job_id, model=request.model, status=PENDING, created=at, updated=at,
                       request_id=request_id, callback_url=callback_url, extra={"seq": seq})

        return await self._write(insert, None, create=True)  # type: ignore[arg-type]  # never empty: creates

    async def get(self, job_id: str) -> Optional[Job]:
        return await self._read(lambda connection: _one_job(connection, job_id), None)

    async def request_of(self, job_id: str) -> Optional[JobRequest]:
        def select(connection: Connection) -> Optional[JobRequest]:
            row = connection.execute(
                "SELECT j.model, r.route, r.version, r.headers, r.body FROM jobs j JOIN requests r USING (seq) "
                "WHERE j.id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            model, route, version, headers, body = row
            return JobRequest(route=route, model=model, version=version, headers=json.loads(headers), body=body)

        return await self._read(select, None)

    async def result(self, job_id: str) -> Optional[StoredReply]:
        def select(connection: Connection) -> Optional[StoredReply]:
            row = connection.execute(
                "SELECT r.status, r.headers, r.body FROM jobs j JOIN replies r USING (seq) "
                f"WHERE j.id = ? AND j.status IN ('{COMPLETED}', '{FAILED}')", (job_id,)).fetchone()
            return None if row is None else StoredReply(status=row[0], headers=json.loads(row[1]), body=row[2])

        return await self._read(select, None)

    async def claim(self, owner: str, lease_seconds: float, limit: int, max_attempts: int
                    ) -> List[Tuple[Job, JobRequest]]:
        if limit < 1:
            return []
        at = self.clock()
        return await self._write(lambda connection: _claim(connection, owner, at, at + lease_seconds, limit,
                                                           max_attempts), [])

    async def renew(self, owner: str, job_ids: Sequence[str], lease_seconds: float) -> Set[str]:
        if not job_ids:
            return set()
        until, ids = self.clock() + lease_seconds, json.dumps(list(job_ids))

        def extend(connection: Connection) -> Set[str]:
            return {job_id for job_id, in connection.execute(
                f"UPDATE jobs SET lease_until = ? WHERE {_IDS} AND status = '{IN_PROGRESS}' AND owner = ? "
                "RETURNING id", (until, ids, owner))}

        return await self._write(extend, set())

    async def finish(self, owner: str, job_id: str, status: str, reply: Optional[StoredReply],
                     error: Optional[str] = None) -> bool:
        if status not in (COMPLETED, FAILED):
            raise ValueError(f"a job finishes completed or failed, not {status!r}")
        at = self.clock()
        kept = None if reply is None else (reply.status, json.dumps(reply.headers), bytes(reply.body))

        def store(connection: Connection) -> bool:
            row = connection.execute(
                "UPDATE jobs SET status = ?, error = ?, finished = ?, updated = ?, owner = NULL, lease_until = NULL "
                f"WHERE id = ? AND status = '{IN_PROGRESS}' AND owner = ? RETURNING seq",
                (status, error, at, at, job_id, owner)).fetchone()
            if row is None:
                return False
            if kept is not None:
                connection.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?)", (row[0], *kept))
            return True

        return await self._write(store, False)

    async def release(self, owner: str, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        at, ids = self.clock(), json.dumps(list(job_ids))

        def give_back(connection: Connection) -> None:
            connection.execute(
                f"UPDATE jobs SET status = '{PENDING}', attempts = MAX(attempts - 1, 0), started = NULL, updated = ?, "
                f"owner = NULL, lease_until = NULL WHERE {_IDS} AND status = '{IN_PROGRESS}' AND owner = ?",
                (at, ids, owner))

        await self._write(give_back, None)

    async def cancel(self, job_id: str) -> Optional[Job]:
        at = self.clock()
        return await self._write(lambda connection: _change(
            connection, job_id, (PENDING, IN_PROGRESS),
            f"status = '{CANCELED}', finished = ?, updated = ?, owner = NULL, lease_until = NULL", (at, at)), None)

    async def retry(self, job_id: str) -> Optional[Job]:
        at = self.clock()

        def requeue(connection: Connection) -> Optional[Job]:
            job = _change(connection, job_id, (FAILED, CANCELED), f"status = '{PENDING}', attempts = 0, error = NULL, "
                          "started = NULL, finished = NULL, updated = ?", (at,))
            if job is not None and job.status == PENDING:
                connection.execute("DELETE FROM replies WHERE seq = ?", (job.extra["seq"],))
            return job

        return await self._write(requeue, None)

    async def list(self, model: Optional[str] = None, status: Optional[str] = None, limit: int = 100,
                   after: Optional[str] = None) -> Tuple[List[Job], Optional[str]]:
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown job status {status!r}: one of {', '.join(STATUSES)}")
        if limit < 1:
            raise ValueError(f"a page holds at least 1 job, not {limit}")
        return await self._read(lambda connection: _page(connection, model, status, limit, after), ([], None))

    async def purge(self, finished_before: float) -> int:
        def delete(connection: Connection) -> int:
            seqs = json.dumps([seq for seq, in connection.execute(
                "SELECT seq FROM jobs WHERE finished IS NOT NULL AND finished < ? LIMIT ?",
                (finished_before, PURGE_BATCH))])
            for table in ("requests", "replies", "jobs"):
                deleted = connection.execute(f"DELETE FROM {table} WHERE seq IN (SELECT value FROM json_each(?))",
                                             (seqs,)).rowcount
            return deleted

        purged = 0
        while True:  # a batch per transaction: other workers wait for the file a short while only
            deleted = await self._write(delete, 0)
            purged += deleted
            if deleted < PURGE_BATCH:
                return purged

    async def counts(self) -> Dict[str, int]:
        def select(connection: Connection) -> Dict[str, int]:
            found = dict(connection.execute("SELECT status, n FROM counts").fetchall())
            return {status: found.get(status, 0) for status in STATUSES}

        return await self._read(select, dict.fromkeys(STATUSES, 0))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close_now)  # after the queued writes
        self._thread.shutdown(wait=False)


# --- the statements of the longer operations (run on the store's thread, in its transaction) -------------------
def _one_job(connection: Connection, job_id: str) -> Optional[Job]:
    row = connection.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return None if row is None else _job(row)


def _claim(connection: Connection, owner: str, at: float, until: float, limit: int, max_attempts: int
           ) -> List[Tuple[Job, JobRequest]]:
    """Fail the expired jobs out of attempts, then take the ``limit`` oldest of the pending and the expired."""
    expired = connection.execute(
        f"SELECT seq, attempts FROM jobs WHERE status = '{IN_PROGRESS}' AND lease_until < ? ORDER BY seq",
        (at,)).fetchall()
    connection.executemany(
        f"UPDATE jobs SET status = '{FAILED}', error = COALESCE(error, ?), finished = ?, updated = ?, owner = NULL, "
        "lease_until = NULL WHERE seq = ?",
        [(stopped_message(attempts), at, at, seq) for seq, attempts in expired if attempts >= max_attempts])
    again = [seq for seq, attempts in expired if attempts < max_attempts][:limit]
    waiting = [seq for seq, in connection.execute(
        f"SELECT seq FROM jobs WHERE status = '{PENDING}' ORDER BY seq LIMIT ?", (limit,))]
    chosen = json.dumps(sorted(again + waiting)[:limit])
    rows = connection.execute(
        f"UPDATE jobs SET status = '{IN_PROGRESS}', owner = ?, lease_until = ?, attempts = attempts + 1, started = ?, "
        f"updated = ? WHERE seq IN (SELECT value FROM json_each(?)) RETURNING {_COLUMNS}",
        (owner, until, at, at, chosen)).fetchall()
    requests = {row[0]: row[1:] for row in connection.execute(
        "SELECT seq, route, version, headers, body FROM requests WHERE seq IN (SELECT value FROM json_each(?))",
        (chosen,))}
    claimed = []
    for row in sorted(rows):
        job = _job(row)
        route, version, headers, body = requests[job.extra["seq"]]
        claimed.append((job, JobRequest(route=route, model=job.model, version=version, headers=json.loads(headers),
                                        body=body)))
    return claimed


def _change(connection: Connection, job_id: str, when: Tuple[str, ...], assignments: str, values: Tuple[Any, ...]
            ) -> Optional[Job]:
    """Apply ``assignments`` to the job if its status is one of ``when``; the job after, or None (no such job)."""
    row = connection.execute(
        f"UPDATE jobs SET {assignments} WHERE id = ? AND status IN ({', '.join('?' * len(when))}) "
        f"RETURNING {_COLUMNS}", (*values, job_id, *when)).fetchone()
    return _job(row) if row is not None else _one_job(connection, job_id)


def _page(connection: Connection, model: Optional[str], status: Optional[str], limit: int, after: Optional[str]
          ) -> Tuple[List[Job], Optional[str]]:
    start = 0
    if after is not None:
        found = connection.execute("SELECT seq FROM jobs WHERE id = ?", (after,)).fetchone()
        if found is None:
            return [], None  # the cursor's job was purged: where its page ended is lost with it
        start = found[0]
    if model is not None and status is None:
        # one ordered range of the (model, status, seq) index per status, merged: no sort of the model's jobs
        rows = sorted(row for each in STATUSES for row in _rows(connection, model, each, start, limit + 1))
        rows = rows[:limit + 1]
    else:
        rows = _rows(connection, model, status, start, limit + 1)
    jobs = [_job(row) for row in rows[:limit]]
    return jobs, (jobs[-1].id if len(rows) > limit else None)


def _rows(connection: Connection, model: Optional[str], status: Optional[str], start: int, limit: int
          ) -> List[Tuple[Any, ...]]:
    """Up to ``limit`` jobs after submission ``start``, of ``model`` and in ``status`` when given, in order."""
    terms = ["seq > ?"]
    values: List[Any] = [start]
    for column, value in (("model", model), ("status", status)):
        if value is not None:
            terms.append(f"{column} = ?")
            values.append(value)
    return connection.execute(f"SELECT {_COLUMNS} FROM jobs WHERE {' AND '.join(terms)} ORDER BY seq LIMIT ?",
                              (*values, limit)).fetchall()


def _answer(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """Hand a write's answer to the loop its caller waits on (unless that loop is gone)."""
    def settle() -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    try:
        future.get_loop().call_soon_threadsafe(settle)
    except RuntimeError:  # the caller's event loop was closed
        pass
