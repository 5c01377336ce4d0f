"""``--workers N``: fork N worker processes that each serve, restart any that dies, drain them on SIGTERM.

The parent binds the HTTP socket before forking so every worker accepts on it (the kernel spreads
connections); each worker binds the gRPC port itself with SO_REUSEPORT, since grpc.aio cannot adopt a
socket. The parent never starts an event loop, thread or gRPC object, so nothing half-made is forked.
Models are built by the user's script before ``start``, so each worker gets a copy-on-write copy;
per-process resources (threads, connection pools, devices) belong in ``Model.start()``, which each
worker calls after the fork.

A worker that dies is replaced after a delay that doubles with each death close to the last ones (0.1 s,
0.2 s, 0.4 s ... at most 10 s). When ``KSERVE_SDK_WORKER_RESTARTS`` workers (5) died within
``KSERVE_SDK_WORKER_RESTART_WINDOW`` seconds (60), restarting is not helping: the parent stops the others
and exits with status 1, so that whatever runs the server (Kubernetes, systemd) sees a failure.
"""
import asyncio
import contextlib
import ctypes
import fcntl
import glob
import json
import os
import signal
import time
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, Iterator, List, Optional, Tuple

from .. import metrics
from ..logging import logger
from ..storage.atomic import pid_alive

RESTARTS_ENV = "KSERVE_SDK_WORKER_RESTARTS"
RESTART_WINDOW_ENV = "KSERVE_SDK_WORKER_RESTART_WINDOW"
DEFAULT_RESTARTS = 5
DEFAULT_RESTART_WINDOW_S = 60.0
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 10.0
GAVE_UP_STATUS = 1
_PR_SET_PDEATHSIG = 1


def _restart_policy() -> Tuple[int, float]:
    """(deaths, seconds): that many worker deaths within that many seconds stop the server."""
    try:
        deaths = max(1, int(os.environ.get(RESTARTS_ENV, DEFAULT_RESTARTS)))
    except ValueError:
        deaths = DEFAULT_RESTARTS
    try:
        window = max(0.0, float(os.environ.get(RESTART_WINDOW_ENV, DEFAULT_RESTART_WINDOW_S)))
    except ValueError:
        window = DEFAULT_RESTART_WINDOW_S
    return deaths, window


class Supervisor:
    """Runs ``serve`` in ``count`` forked workers until SIGTERM/SIGINT, then waits for them to drain.

    ``run`` raises SystemExit(1) when workers die too often to go on (see the module's docstring).
    """

    def __init__(self, count: int, serve: Callable[[], None], grace_period: float, control_dir: str = ""):
        self.count = count
        self.serve = serve
        self.grace_period = grace_period
        self.control_dir = control_dir
        self.children: Dict[int, float] = {}  # pid -> start time
        self.stopping = False
        self.gave_up = False
        self.restart_limit, self.restart_window = _restart_policy()
        self.deaths: Deque[float] = deque()  # when workers died, within the window
        self.due: List[Tuple[float, int]] = []  # (when, pid of the worker it replaces) of restarts to make
        self.parent = os.getpid()

    def run(self) -> None:
        """Fork the workers and supervise them; returns when all have exited after a stop."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGUSR1, lambda sig, frame: self._signal_all(signal.SIGUSR1))
        for _ in range(self.count):
            self._spawn()
        logger.info("Started %d workers: %s", self.count, sorted(self.children))
        deadline = None
        while self.children or (self.due and not self.stopping):
            if self.stopping:
                self.due.clear()
                deadline = deadline or time.monotonic() + self.grace_period + 10
            self._start_due()
            reaped = self._wait(block=not self.stopping and not self.due)
            if reaped is not None:
                self._reap(*reaped)
                continue
            if deadline is not None and time.monotonic() > deadline:
                self._signal_all(signal.SIGKILL)
            time.sleep(0.05 if not self.due else max(0.0, min(0.05, self.due[0][0] - time.monotonic())))
        if self.gave_up:
            raise SystemExit(GAVE_UP_STATUS)

    def _wait(self, block: bool) -> Optional[Tuple[int, int]]:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:  # none left (a restart may be due)
            self.children.clear()
            return None
        return (pid, status) if pid else None

    def _start_due(self) -> None:
        now = time.monotonic()
        while self.due and self.due[0][0] <= now and not self.stopping:
            _, replaced = self.due.pop(0)
            pid = self._spawn()
            logger.info("worker %d started in place of worker %d", pid, replaced)

    def _spawn(self) -> int:
        pid = os.fork()
        if pid == 0:  # the worker
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_DFL if sig != signal.SIGUSR1 else signal.SIG_IGN)
            _stop_with_parent(self.parent)
            code = 0
            try:
                self.serve()
            except BaseException as e:  # a worker must never return into the parent's loop
                logger.exception("worker %d failed: %s", os.getpid(), e)
                code = 1
            finally:
                os._exit(code)
        self.children[pid] = time.monotonic()
        self._write_workers()
        return pid

    def _write_workers(self) -> None:
        if self.control_dir:
            path = os.path.join(self.control_dir, "workers")
            with open(path + ".tmp", "w") as f:
                f.write(" ".join(str(pid) for pid in self.children))
            os.replace(path + ".tmp", path)

    def _reap(self, pid: int, status: int) -> None:
        if self.children.pop(pid, None) is None:
            return
        self._write_workers()
        self._forget(pid)
        if self.stopping:
            return
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and self.deaths[0] < now - self.restart_window:
            self.deaths.popleft()
        recent = len(self.deaths)
        if recent >= self.restart_limit:
            logger.error("worker %d exited (%s): %d workers exited within %g s (%s=%d, %s=%g); restarting is not "
                         "helping, stopping the server with exit status %d", pid, _describe(status), recent,
                         self.restart_window, RESTARTS_ENV, self.restart_limit, RESTART_WINDOW_ENV,
                         self.restart_window, GAVE_UP_STATUS)
            self.gave_up = self.stopping = True
            self._signal_all(signal.SIGTERM)
            return
        delay = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (recent - 1))
        logger.error("worker %d exited (%s); starting a new one in %.1f s (%d exit%s within %g s; %d stop the server)",
                     pid, _describe(status), delay, recent, "" if recent == 1 else "s", self.restart_window,
                     self.restart_limit)
        self.due.append((now + delay, pid))
        self.due.sort()

    def _forget(self, pid: int) -> None:
        """A dead worker's traces: its acknowledgement of control commands, its metric files."""
        if self.control_dir:
            for name in (f"ack-{pid}", f"ack-{pid}.tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.control_dir, name))
        metrics.worker_exited(pid)
        try:
            fold_metric_files(pid)
        except OSError as e:  # the counts stay in the dead worker's files, which still count
            logger.warning("could not fold the metrics files of worker %d: %s", pid, e)

    def _on_signal(self, sig: int, frame) -> None:
        if not self.stopping:
            logger.info("Stopping %d workers (signal %d)", len(self.children), sig)
        self.stopping = True
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _stop_with_parent(parent: int) -> None:
    """In a worker: be sent SIGTERM when the parent dies (killed outright, it cannot stop its workers)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # it died before the call
        os._exit(0)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


# --- a dead worker's metric files ----------------------------------------------------------------------
#: How a dead worker's values join those of the workers that died before it, by prometheus-client file kind
#: (gauges "all" are left: they are reported per process, dead ones included; "live" ones are deleted).
_FOLD = {
    "counter": lambda old, new: new[0] + old[0],
    "histogram": lambda old, new: new[0] + old[0],
    "summary": lambda old, new: new[0] + old[0],
    "gauge_sum": lambda old, new: new[0] + old[0],
    "gauge_max": lambda old, new: max(new[0], old[0]),
    "gauge_min": lambda old, new: min(new[0], old[0]),
    "gauge_mostrecent": lambda old, new: new[0] if new[1] >= old[1] else old[0],
}


def fold_metric_files(pid: int) -> None:
    """Add a dead worker's counts to the metrics directory's ``<kind>_dead`` files and delete its own, so the
    totals keep them and restarts do not pile files up."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return
    suffix = f"_{pid}.db"
    for path in glob.glob(os.path.join(glob.escape(directory), "*" + suffix)):
        kind = os.path.basename(path)[:-len(suffix)]
        if not kind.startswith("gauge"):  # "counter_3": one of the shards of internals/prometheus_values.py
            kind = kind.split("_")[0]
        if kind in _FOLD:
            _fold_values(path, os.path.join(directory, f"{kind}_dead.db"), _FOLD[kind])
            os.remove(path)
    suffix = f"_{pid}.bin"
    for path in glob.glob(os.path.join(glob.escape(directory), "triton_*" + suffix)):
        _fold_counts(path, path[:-len(suffix)] + "_dead.bin")
        os.remove(path)


def _fold_values(path: str, into: str, combine: Callable[[Tuple[float, float], Tuple[float, float]], float]) -> None:
    from prometheus_client.mmap_dict import MmapedDict

    target = MmapedDict(into)
    try:
        for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(path):
            old = target.read_value(key)
            new = (value, timestamp)
            target.write_value(key, combine(old, new) if old != (0.0, 0.0) else value, max(timestamp, old[1]))
    finally:
        target.close()


def _fold_counts(path: str, into: str) -> None:
    """Triton statistics counters (kserve_sdk.triton.statistics): int64 slots that add up, except the time of
    the last inference, which is the latest."""
    import numpy as np

    from ..triton.statistics import LAST

    counts = np.fromfile(path, dtype=np.int64)
    if not os.path.exists(into):
        counts.tofile(into + ".tmp")
        os.replace(into + ".tmp", into)
        return
    total = np.memmap(into, dtype=np.int64, mode="r+")
    if total.size == counts.size:
        latest = max(total[LAST], counts[LAST]) if os.path.basename(into).startswith("triton_stats_") else None
        total += counts
        if latest is not None:
            total[LAST] = latest
        total.flush()
    del total


# --- changes shared by the workers ----------------------------------------------------------------------
Change = Tuple[str, str, str, Dict[str, Any], int]  # (key, op, name, args, origin pid)
Apply = Callable[[str, str, Dict[str, Any]], Awaitable[None]]


class ControlChannel:
    """Changes to a worker's state (model load / unload, shared-memory regions, log and trace settings)
    shared by all workers through a directory.

    The worker that performs a change writes it as a numbered command file and signals the parent
    (SIGUSR1), which signals every worker; each applies the commands it has not seen, in order, and
    acknowledges the newest one. The originating worker answers its client once every live worker has
    acknowledged, so the next call finds the change on whichever worker it reaches.

    The directory stays small however many changes are made: once every worker has applied a run of
    commands, they are folded into one snapshot that keeps what a new worker needs to reach the same state
    (the latest change of each kind and name), and deleted. A worker that replaces a dead one reads the
    snapshot, then the commands after it. A file lock keeps readers from seeing a fold half done.
    """

    #: Command files that make the next change fold those every worker has applied.
    FOLD_AFTER = 32

    def __init__(self, directory: str):
        self.directory = directory
        self.applied = ""  # key of the newest command applied by this process
        self._lock = asyncio.Lock()
        self._wanted = False  # a signal came while catching up: catch up once more
        self._catching_up: Optional[asyncio.Future[None]] = None

    # --- the worker's side ---
    async def share(self, op: str, name: str, args: Dict[str, Any]) -> None:
        """Pass a change made here on to every worker; returns when each live one has it (10 s at most)."""
        key, waiting = self.publish(op, name, args)
        deadline, pause = time.monotonic() + 10, 0.0005
        while not self.all_acknowledged(key) and time.monotonic() < deadline:
            await asyncio.sleep(pause)
            pause = min(0.005, pause * 2)
        if waiting > self.FOLD_AFTER:
            self.fold()

    def signalled(self, apply: Apply) -> Callable[[], None]:
        """The SIGUSR1 handler: catch up with ``apply``; signals that come meanwhile make one more pass,
        not one each."""
        def on_signal() -> None:
            self._wanted = True
            if self._catching_up is None or self._catching_up.done():
                self._catching_up = asyncio.ensure_future(self._catch_up_while_wanted(apply))
        return on_signal

    async def _catch_up_while_wanted(self, apply: Apply) -> None:
        while self._wanted:
            self._wanted = False
            await self.catch_up(apply)

    async def catch_up(self, apply: Apply) -> None:
        """Apply every change other workers made that this one has not, in order, then acknowledge."""
        async with self._lock:
            changes, snapshot = self.unseen()
            for key, op, name, args, origin in changes:
                if origin != os.getpid():
                    try:
                        await apply(op, name, args)
                    except Exception as e:  # the originating worker reported it to its client
                        logger.warning("applying %s of %s from worker %s: %s", op, name, origin, e)
                self.applied = max(self.applied, key)
            self.applied = max(self.applied, snapshot)
            self.acknowledge()

    # --- the files ---
    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[bool]:
        fd = os.open(os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, how)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # which releases the lock

    def publish(self, op: str, name: str, args: Dict[str, Any]) -> Tuple[str, int]:
        """Record a change made by this worker and signal it; returns its key and how many command files
        there are now."""
        with self._locked(fcntl.LOCK_EX):
            names = os.listdir(self.directory)
            key = f"{_newest_key(names) + 1:020d}"
            path = os.path.join(self.directory, f"cmd-{key}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"op": op, "name": name, "args": args, "origin": os.getpid()}, f)
            os.replace(path + ".tmp", path)
        os.kill(os.getppid(), signal.SIGUSR1)
        return key, sum(1 for entry in names if _command_key(entry)) + 1

    def unseen(self) -> Tuple[List[Change], str]:
        """Changes newer than the last one applied here, oldest first: [(key, op, name, args, origin)], and
        the key of the snapshot. A worker behind the snapshot (a new one) gets the snapshot's changes first;
        once it applied them, it is at the snapshot's key."""
        with self._locked(fcntl.LOCK_SH):
            if not self.applied:  # before reading: no fold may pass what this worker is about to read
                self.acknowledge()
            names = os.listdir(self.directory)
            snapshot = _snapshot_key(names)
            out: List[Change] = []
            if snapshot and self.applied < snapshot:
                with open(os.path.join(self.directory, f"snapshot-{snapshot}.json")) as f:
                    out += [tuple(entry) for entry in json.load(f) if entry[0] > self.applied]
            after = max(self.applied, snapshot)
            for key in sorted(k for k in map(_command_key, names) if k and k > after):
                with open(os.path.join(self.directory, f"cmd-{key}.json")) as f:
                    doc = json.load(f)
                out.append((key, doc["op"], doc["name"], doc["args"], doc["origin"]))
        return out, snapshot

    def acknowledge(self) -> None:
        """Say which command this worker has applied up to."""
        path = os.path.join(self.directory, f"ack-{os.getpid()}")
        with open(path + ".tmp", "w") as f:
            f.write(self.applied)
        os.replace(path + ".tmp", path)

    def all_acknowledged(self, key: str) -> bool:
        """Whether every live worker has applied the command ``key``."""
        try:
            with open(os.path.join(self.directory, "workers")) as f:
                pids = f.read().split()
        except FileNotFoundError:
            return True
        for pid in pids:
            try:
                with open(os.path.join(self.directory, f"ack-{pid}")) as f:
                    if f.read() < key:
                        return False
            except FileNotFoundError:
                return False
        return True

    def fold(self) -> None:
        """Fold the commands every worker has applied into the snapshot and delete them (skipped while
        another worker reads or folds: the next change folds)."""
        with self._locked(fcntl.LOCK_EX | fcntl.LOCK_NB) as locked:
            if not locked:
                return
            names = os.listdir(self.directory)
            acks = self._live_acks(names)
            if not acks:
                return
            upto = min(acks)
            keys = sorted(k for k in map(_command_key, names) if k and k <= upto)
            if not keys:
                return
            snapshot = _snapshot_key(names)
            changes: List[Change] = []
            if snapshot:
                with open(os.path.join(self.directory, f"snapshot-{snapshot}.json")) as f:
                    changes = [tuple(entry) for entry in json.load(f)]
            for key in keys:
                with open(os.path.join(self.directory, f"cmd-{key}.json")) as f:
                    doc = json.load(f)
                changes.append((key, doc["op"], doc["name"], doc["args"], doc["origin"]))
            path = os.path.join(self.directory, f"snapshot-{keys[-1]}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(compacted(changes), f)
            os.replace(path + ".tmp", path)
            for stale in ([f"snapshot-{snapshot}.json"] if snapshot else []) + [f"cmd-{k}.json" for k in keys]:
                os.remove(os.path.join(self.directory, stale))

    def _live_acks(self, names: List[str]) -> List[str]:
        """What each live worker acknowledged (files of dead ones are removed on the way)."""
        acks = []
        for entry in names:
            if not entry.startswith("ack-") or entry.endswith(".tmp"):
                continue
            path = os.path.join(self.directory, entry)
            if not pid_alive(int(entry[4:])):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                continue
            try:
                with open(path) as f:
                    acks.append(f.read())
            except FileNotFoundError:
                continue
        return acks


def compacted(changes: List[Change]) -> List[Change]:
    """What a new worker needs of ``changes`` (oldest first) to reach the same state, oldest first: the
    last load or unload of each model, the log settings merged into one change, the last trace settings
    of each scope, the shared-memory regions still registered, the last change of each other (op, name)."""
    kept: Dict[Tuple[str, str], Change] = {}
    for key, op, name, args, origin in changes:
        if op == "shm_unregister":  # a new worker has no regions: forgetting them needs no replay
            for what in [k for k in kept if k[0] == "shm" and (not name or k[1] == name)]:
                del kept[what]
            continue
        what = ("model", name) if op in ("load", "unload") else ("shm", name) if op == "shm_register" else (op, name)
        if op == "log_settings" and what in kept:
            args = {**kept[what][3], **args}
        kept[what] = (key, op, name, args, origin)
    return sorted(kept.values(), key=lambda change: change[0])


def _command_key(entry: str) -> str:
    return entry[4:-5] if entry.startswith("cmd-") and entry.endswith(".json") else ""


def _snapshot_key(names: List[str]) -> str:
    keys = [entry[9:-5] for entry in names if entry.startswith("snapshot-") and entry.endswith(".json")]
    return max(keys, default="")


def _newest_key(names: List[str]) -> int:
    keys = [k for k in map(_command_key, names) if k] + [_snapshot_key(names)]
    return max((int(k) for k in keys if k), default=0)
