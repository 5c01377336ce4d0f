"""Start real servers on free loopback ports and stop them (by PID) when the tests are done."""
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Sequence

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "models")


#: Each pytest-xdist worker hands out ports of a range of its own, below the range the system takes
#: the ports of clients' connections and of port-0 binds from (32768 and up on Linux).
_PORTS_FROM, _PORTS_PER_WORKER, _RANGES = 12000, 5000, 4
_ports = None


def free_port() -> int:
    """A port nothing listens on right now (the server binds it a moment later), never handed out before
    in this run. (A port the system picked was free when asked, and another test's server could be
    given it too before the first bound it: a server that installs packages first waits minutes.)"""
    global _ports
    if _ports is None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        first = _PORTS_FROM + int(worker[2:] or 0) % _RANGES * _PORTS_PER_WORKER
        start = random.randrange(_PORTS_PER_WORKER)  # another run beside this one starts elsewhere
        _ports = (first + (start + i) % _PORTS_PER_WORKER for i in range(_PORTS_PER_WORKER))
    for port in _ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use
            return port
    raise RuntimeError(f"every port of this test worker's range was handed out ({_PORTS_PER_WORKER})")


def side_by_side(call: Callable[[], Any], enough: Callable[[List[Any]], bool], width: int = 8,
                 seconds: float = 30.0) -> List[Any]:
    """The results of ``call()`` made ``width`` at a time, round after round, until ``enough(results)``
    or ``seconds`` have passed. With ``--workers N``, calls made one at a time may all go to one worker
    (the kernel wakes the same idle worker first for each new connection); while a worker has calls in
    flight its siblings accept first, so the calls of a round reach them."""
    results: List[Any] = []
    deadline = time.monotonic() + seconds
    with ThreadPoolExecutor(width) as pool:
        while not enough(results) and time.monotonic() < deadline:
            results += pool.map(lambda _: call(), range(width))
    return results


def http_get(url: str, timeout: float = 5.0):
    """(status, body bytes) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def stop_process_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """Signal a process started with ``start_new_session=True`` and its group; SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass


class Server:
    """A server process started from a script with KServe CLI flags."""

    def __init__(self, script: str, args: List[str], env: Optional[dict] = None, grpc: bool = True,
                 python_args: Sequence[str] = ()):
        self.script, self.args, self.extra_env, self.grpc = script, list(args), env or {}, grpc
        self.python_args = list(python_args)  # what goes between python and the script, e.g. -m kserve_sdk
        self.proc: Optional[subprocess.Popen] = None
        self.log_file = tempfile.NamedTemporaryFile(prefix="kserve-sdk-test-", suffix=".log", delete=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, wait_ready: bool = True, attempts: int = 3) -> "Server":
        for _ in range(attempts):
            self.http_port, self.grpc_port = free_port(), free_port()
            argv = [sys.executable, *self.python_args, self.script, "--http_port", str(self.http_port),
                    "--grpc_port", str(self.grpc_port), "--enable_grpc", str(self.grpc).lower(), *self.args]
            env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", **self.extra_env}
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self.log_file, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            if not wait_ready or self._wait_live():
                return self
            if " is in use" not in self.log():  # the one line a start on a taken port ends with
                break
        raise RuntimeError(f"server {self.script} did not start:\n{self.log()}")

    def _wait_live(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if http_get(self.url + "/v2/health/live", timeout=1)[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def log(self) -> str:
        with open(self.log_file.name, errors="replace") as f:
            return f.read()

    def log_with(self, text: str, timeout: float = 10.0) -> str:
        """The log once it holds ``text``: per-request lines (access, latency) are written a few
        milliseconds after their answer, with the others of that moment. Fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        log = self.log()
        while text not in log and time.monotonic() < deadline:
            time.sleep(0.05)
            log = self.log()
        assert text in log, f"{text!r} not in the log:\n{log[-3000:]}"
        return log

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, sig)


@pytest.fixture(scope="session")
def start_server():
    """A factory: ``start_server("tests/models/x.py", "--flag", "v")``; every server is stopped at the end."""
    started: List[Server] = []

    def start(script: str, *args: str, env: Optional[dict] = None, grpc: bool = True, wait: bool = True,
              python_args: Sequence[str] = ()) -> Server:
        server = Server(os.path.join(ROOT, script), list(args), env=env, grpc=grpc, python_args=python_args)
        started.append(server)
        return server.start(wait_ready=wait)

    yield start
    for server in started:
        server.stop()
        os.unlink(server.log_file.name)


@pytest.fixture(scope="session")
def zoo(start_server) -> Server:
    """One server with every test model of tests/models/zoo.py, REST and gRPC."""
    return start_server("tests/models/zoo.py")
