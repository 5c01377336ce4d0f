"""``--workers N``: fork N worker processes that each serve, restart any that dies, drain them on SIGTERM.

The parent binds the HTTP socket before forking so every worker accepts on it (the kernel spreads
connections); each worker binds the gRPC port itself with SO_REUSEPORT, since grpc.aio cannot adopt a
socket. The parent never starts an event loop, thread or gRPC object, so nothing half-made is forked.
Models are built by the user's script before ``start``, so each worker gets a copy-on-write copy;
per-process resources (threads, connection pools, devices) belong in ``Model.start()``, which each
worker calls after the fork.
"""
import os
import signal
import time
from typing import Callable, Dict

from .. import metrics
from ..logging import logger

_QUICK_EXIT_S = 2.0  # a worker that dies sooner than this after starting is failing at start-up
_MAX_QUICK_EXITS = 5


class Supervisor:
    """Runs ``serve`` in ``count`` forked workers until SIGTERM/SIGINT, then waits for them to drain."""

    def __init__(self, count: int, serve: Callable[[], None], grace_period: float, control_dir: str = ""):
        self.count = count
        self.serve = serve
        self.grace_period = grace_period
        self.control_dir = control_dir
        self.children: Dict[int, float] = {}  # pid -> start time
        self.stopping = False
        self.quick_exits = 0

    def run(self) -> None:
        """Fork the workers and supervise them; returns when all have exited after a stop."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGUSR1, lambda sig, frame: self._signal_all(signal.SIGUSR1))
        for _ in range(self.count):
            self._spawn()
        logger.info("Started %d workers: %s", self.count, sorted(self.children))
        deadline = None
        while self.children:
            if self.stopping and deadline is None:
                deadline = time.monotonic() + self.grace_period + 10
            try:
                pid, status = os.waitpid(-1, os.WNOHANG if deadline else 0)
            except ChildProcessError:
                break
            if pid == 0:  # stopping: poll until the workers are gone or the deadline passes
                if time.monotonic() > deadline:
                    self._signal_all(signal.SIGKILL)
                time.sleep(0.05)
                continue
            self._reap(pid, status)

    def _spawn(self) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_DFL if sig != signal.SIGUSR1 else signal.SIG_IGN)
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

    def _write_workers(self) -> None:
        if self.control_dir:
            path = os.path.join(self.control_dir, "workers")
            with open(path + ".tmp", "w") as f:
                f.write(" ".join(str(pid) for pid in self.children))
            os.replace(path + ".tmp", path)

    def _reap(self, pid: int, status: int) -> None:
        started = self.children.pop(pid, None)
        if started is None:
            return
        self._write_workers()
        metrics.worker_exited(pid)
        if self.stopping:
            return
        logger.error("worker %d exited (%s); starting a new one", pid, _describe(status))
        if time.monotonic() - started < _QUICK_EXIT_S:
            self.quick_exits += 1
            if self.quick_exits >= _MAX_QUICK_EXITS:
                logger.error("workers keep failing at start-up; stopping")
                self.stopping = True
                self._signal_all(signal.SIGTERM)
                return
            time.sleep(0.5 * self.quick_exits)
        self._spawn()

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


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


class ControlChannel:
    """Changes to a worker's state (model load / unload, shared-memory regions) shared by all workers
    through a directory.

    The worker that performs a change writes it as a command file and signals the parent (SIGUSR1),
    which signals every worker; each applies the commands it has not seen, in order, and acknowledges
    the newest one. The originating worker answers its client once every live worker has acknowledged,
    so the next call finds the change on whichever worker it reaches. A replaced worker replays the log.
    """

    def __init__(self, directory: str):
        self.directory = directory
        self.applied = ""  # name of the newest command applied by this process

    def publish(self, op: str, name: str, args: dict) -> str:
        """Record a change made by this worker; returns its sequence key."""
        import json

        key = f"{time.time_ns():020d}-{os.getpid()}"
        path = os.path.join(self.directory, f"cmd-{key}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"op": op, "name": name, "args": args, "origin": os.getpid()}, f)
        os.replace(path + ".tmp", path)
        self.applied = max(self.applied, key)
        self.acknowledge()
        os.kill(os.getppid(), signal.SIGUSR1)
        return key

    def unseen(self) -> list:
        """Commands newer than the last one applied here, oldest first: [(key, op, name, args, origin)]."""
        import json

        out = []
        for entry in sorted(os.listdir(self.directory)):
            if entry.startswith("cmd-") and entry.endswith(".json") and entry[4:-5] > self.applied:
                with open(os.path.join(self.directory, entry)) as f:
                    doc = json.load(f)
                out.append((entry[4:-5], doc["op"], doc["name"], doc["args"], doc["origin"]))
        return out

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
