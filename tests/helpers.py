"""What the tests share: server processes on free loopback ports, waiting with a deadline (``eventually``), raw
HTTP and one JSON POST, SSE readers, Prometheus scrapes, tensor builders, error-answer checks, the OpenAPI
document's checks and the samples' READMEs. Test files import from here, never from one another
(tests/test_test_helpers.py checks it); fixtures stay in tests/conftest.py."""
import contextlib
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import pytest

# httpx, httpx_sse, openapi_schema_validator, prometheus_client and tritonclient are imported by the helpers
# that use them: every pytest run imports this module through conftest.py, the fast tier too.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = TypeVar("T")


# --- waiting ---------------------------------------------------------------------------------------------------
def eventually(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               message: Union[str, Callable[[], str]] = "") -> T:
    """The first true value ``check()`` returns, asking every ``interval`` s. ``check`` may instead fail with an
    AssertionError until it passes (such a check returns True at its end). After ``timeout`` s, raises an
    AssertionError with ``message`` (or what ``message()`` returns then, e.g. a server's log) and the last
    failure."""
    deadline = time.monotonic() + timeout
    while True:
        last: Optional[AssertionError] = None
        try:
            got = check()
        except AssertionError as e:
            last, got = e, None
        if got:
            return got
        if time.monotonic() >= deadline:
            failure = str(last) if last is not None else f"{getattr(check, '__name__', 'check')}() returned {got!r}"
            said = message() if callable(message) else message
            raise AssertionError(f"{said + ': ' if said else ''}not so after {timeout} s: {failure}") from last
        time.sleep(interval)


# --- ports and processes ---------------------------------------------------------------------------------------
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


def run_python(code: str, *argv: str, env: Optional[Dict[str, str]] = None,
               pythonpath: str = ROOT) -> subprocess.CompletedProcess:
    """``python -c code argv...`` (``python argv...`` when ``code`` is empty) from the checkout, with this
    PYTHONPATH and ``env`` added to ours; its output captured as text."""
    command = [sys.executable, "-c", textwrap.dedent(code), *argv] if code else [sys.executable, *argv]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})})


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
        """Whether the server answers live within ``timeout`` s (False as soon as it exits)."""
        try:
            eventually(lambda: self.proc.poll() is not None or self._live(), timeout)
        except AssertionError:
            return False
        return self.proc.poll() is None

    def _live(self) -> bool:
        return answers_ok(self.url + "/v2/health/live")

    def log(self) -> str:
        with open(self.log_file.name, errors="replace") as f:
            return f.read()

    def log_with(self, text: str, timeout: float = 10.0) -> str:
        """The log once it holds ``text``: per-request lines (access, latency) are written a few
        milliseconds after their answer, with the others of that moment. Fails after ``timeout`` s."""
        def holding() -> str:
            log = self.log()
            assert text in log, f"{text!r} not in the log:\n{log[-3000:]}"
            return log
        return eventually(holding, timeout)

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, sig)


def repository_server(repository: str, *flags: str, env: Optional[Dict[str, str]] = None) -> Server:
    """A server of ``python -m kserve_sdk --model_repository repository flags...`` (not started yet)."""
    return Server(f"--model_repository={repository}", list(flags), env=env, python_args=["-m", "kserve_sdk"])


# --- HTTP --------------------------------------------------------------------------------------------------
def request(port: int, method: str, path: str, body: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None, timeout: float = 30.0) -> Tuple[int, Dict[str, str], bytes]:
    """curl-equivalent raw HTTP: exact bytes in; status, lower-cased headers and body bytes out."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post_json_raw(port: int, path: str, doc: Any, headers: Optional[Dict[str, str]] = None,
                  timeout: float = 30.0) -> Tuple[int, Dict[str, str], bytes]:
    """POST ``doc`` as JSON (bytes are sent as they are); returns (status, lower-cased headers, body bytes)."""
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return request(port, "POST", path, body, {"Content-Type": "application/json", **(headers or {})}, timeout)


def post_json(port: int, path: str, doc: Any, headers: Optional[Dict[str, str]] = None,
              timeout: float = 30.0) -> Tuple[int, Dict[str, str], Any]:
    """POST ``doc`` as JSON (bytes are sent as they are); returns (status, lower-cased headers, parsed JSON)."""
    status, hdrs, body = post_json_raw(port, path, doc, headers, timeout)
    return status, hdrs, json.loads(body)


def http_get(url: str, timeout: float = 5.0) -> Tuple[int, bytes]:
    """(status, body bytes) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def answers_ok(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 within a second (False while nothing listens there)."""
    try:
        return http_get(url, timeout=1)[0] == 200
    except OSError:
        return False


def binary_body(header: dict, *tensors: bytes) -> Tuple[bytes, Dict[str, str]]:
    """A v2 body with the binary-data extension, and the header naming the JSON part's length."""
    head = json.dumps(header).encode()
    return head + b"".join(tensors), {"Inference-Header-Content-Length": str(len(head))}


def exchange(port: int, data: bytes, read_timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; what comes back until one whole answer (by its Content-Length), the
    server closes the connection, or ``read_timeout`` passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(data)
        received = b""
        try:
            while chunk := s.recv(65536):
                received += chunk
                if _whole_answer(received):
                    break
        except TimeoutError:
            pass
        return received


def _whole_answer(raw: bytes) -> bool:
    head, blank, body = raw.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if blank and line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def json_of(raw: bytes) -> Any:
    """The parsed JSON body of a raw HTTP answer."""
    return json.loads(raw.partition(b"\r\n\r\n")[2])


def parsed_answer(raw: bytes) -> Tuple[int, Dict[str, str], Any]:
    """(status, lower-cased headers, parsed JSON body) of a raw HTTP answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def assert_error_answer(port: int, got: Tuple[int, Dict[str, str], bytes], status: int, message: str) -> None:
    """``got`` is KServe's ``{"error": "..."}`` with ``status`` and ``message`` in it, and the server at ``port``
    goes on serving."""
    code, headers, body = got
    assert code == status, body[:300]
    assert headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    assert set(doc) == {"error"} and isinstance(doc["error"], str), doc
    assert message in doc["error"], doc["error"]
    assert request(port, "GET", "/v2/health/live")[0] == 200  # the worker goes on


def assert_openai_error(got: Tuple[int, Dict[str, str], Any], status: int, message: str,
                        param: Optional[str] = None, kind: Optional[str] = None) -> None:
    """(status, headers, parsed body) in OpenAI's error shape, with the status as its code."""
    code, headers, body = got
    assert code == status, body
    assert headers["content-type"].startswith("application/json")
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    error = body["error"]
    assert message in error["message"], error
    assert error["code"] == str(status) and error["param"] == param, error
    if kind is not None:
        assert error["type"] == kind, error
    assert "x-request-id" in headers


COMPLETIONS = "/openai/v1/completions"
CHAT = "/openai/v1/chat/completions"


def open_openai_stream(port: int, request_id: str) -> socket.socket:
    """Start a slow streamed completion (model "objects" of tests/models/openai_models.py, prompt "slow") on
    a raw socket; return it once two events have arrived."""
    body = json.dumps({"model": "objects", "prompt": "slow", "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"POST " + COMPLETIONS.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"x-request-id: " + request_id.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    received = b""
    while received.count(b"data: ") < 2:  # each event is flushed as it is made: two arrive while it runs
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    assert b" 200 OK" in received.split(b"\r\n", 1)[0]
    return sock


# --- Server-Sent Events ----------------------------------------------------------------------------------------
def sse_data(raw: bytes) -> List[str]:
    """The ``data:`` payloads of a whole Server-Sent Events body, in order (every event one ``data:`` line,
    the body ending with the blank line of its last event)."""
    *events, end = raw.decode().split("\n\n")
    assert end == "" and all(event.startswith("data: ") for event in events), raw[-300:]
    return [event[len("data: "):] for event in events]


def read_sse(url: str, path: str, body: Any,
             headers: Optional[Dict[str, str]] = None) -> Tuple[Any, List[Tuple[float, Any]]]:
    """POST ``body`` as JSON to a stream (status 200); its headers (httpx.Headers) and (arrival time, parsed
    data) of each event, read with httpx and httpx-sse as they come."""
    import httpx
    from httpx_sse import connect_sse

    events = []
    with httpx.Client(base_url=url, timeout=30) as client:
        with connect_sse(client, "POST", path, json=body, headers=headers or {}) as source:
            assert source.response.status_code == 200, source.response.read()
            for event in source.iter_sse():
                events.append((time.monotonic(), json.loads(event.data)))
    return source.response.headers, events


# --- model archives --------------------------------------------------------------------------------------------
def tar_archive(entries: Sequence[Tuple[str, str, Any]], mode: str = "w") -> bytes:
    """A tar of ``entries``, in order: (name, "file", bytes), (name, "dir", None), (name, "symlink", target),
    (name, "hardlink", target), (name, "chr", None) or (name, "fifo", None); ``mode`` "w:gz" compresses it."""
    import io
    import tarfile

    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
             "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mtime, info.mode = kinds[kind], 1700000000, 0o755 if kind == "dir" else 0o644
            if kind in ("symlink", "hardlink"):
                info.linkname = payload
            if kind == "file":
                info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload) if kind == "file" else None)
    return out.getvalue()


def cve_2025_4517_entries(destination: str) -> List[Tuple[str, str, Any]]:
    """The archive of CVE-2025-4517 for one unpacked into ``destination`` (entries for :func:`tar_archive`):
    sixteen directories nested through sixteen links, so long that ``os.path.realpath`` stops expanding the
    last link, which goes back up sixteen levels; ``escape`` then points at the folder above ``destination``.
    A hard link ``flaglink`` to the file ``flag`` there is written through, and ``newfile`` is created there."""
    steps = "abcdefghijklmnop"
    room = os.pathconf(os.path.dirname(destination) or "/", "PC_PATH_MAX") - len(destination) - 1
    component = "d" * (room // (len(steps) + 1))
    entries: List[Tuple[str, str, Any]] = []
    path = ""
    for step in steps:
        entries += [(os.path.join(path, component), "dir", None), (os.path.join(path, step), "symlink", component)]
        path = os.path.join(path, component)
    last = os.path.join(*steps, "l" * 254)
    return entries + [(last, "symlink", os.path.join(*[".."] * len(steps))),
                      ("escape", "symlink", os.path.join(last, "..")),
                      ("flaglink", "hardlink", "escape/flag"), ("flaglink", "file", b"overwrite"),
                      ("escape/newfile", "file", b"new")]


def file_tree(root: str) -> Dict[str, Tuple[str, int, int]]:
    """Every entry below ``root``, links not followed: relative path -> (kind, size, modification time ns); a
    folder's size and time are 0 (they change as entries come and go, and a temporary one did)."""
    import stat

    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            kind = "link" if stat.S_ISLNK(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "file"
            out[os.path.relpath(path, root)] = (kind, 0, 0) if kind == "dir" else (kind, info.st_size, info.st_mtime_ns)
    return out


# --- Prometheus ------------------------------------------------------------------------------------------------
def scrape(server: Server) -> dict:
    """{(metric sample name, frozenset(labels)): value} of one /metrics answer."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly these ``labels`` (0 when there is none)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


# --- tensors ---------------------------------------------------------------------------------------------------
def v2_fp32_doc(**overrides: Any) -> Dict[str, Any]:
    """A v2 JSON request of one FP32 input, INPUT0 = [1.0, 2.0], with ``overrides`` of its fields."""
    return {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0], **overrides}]}


def triton_input(module: Any, name: str, array: np.ndarray, datatype: Optional[str] = None) -> Any:
    """A tritonclient input (``module`` is tritonclient.grpc or tritonclient.http) holding ``array``, of
    ``datatype`` or the one of the array's dtype (object arrays are BYTES)."""
    from tritonclient.utils import np_to_triton_dtype

    tensor = module.InferInput(name, list(array.shape), datatype or np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


# --- client errors ---------------------------------------------------------------------------------------------
def triton_error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Tuple[str, str]:
    """(status, message) of a tritonclient call that must fail."""
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return info.value.status(), info.value.message()


# --- the OpenAPI document --------------------------------------------------------------------------------------
def inline(doc: Dict[str, Any], node: Any, seen: Tuple[str, ...] = ()) -> Any:
    """``node`` with every local ``$ref`` replaced by what it points at."""
    if isinstance(node, list):
        return [inline(doc, item, seen) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"only local references are used: {ref}"
        assert ref not in seen, f"reference cycle through {ref}"
        target: Any = doc
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return inline(doc, target, seen + (ref,))
    return {key: inline(doc, value, seen) for key, value in node.items()}


def media_type(headers: Dict[str, str]) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def check_request(doc: Dict[str, Any], path: str, method: str, body: bytes, content_type: str) -> None:
    """The request body we send fits the operation's documented request schema."""
    from openapi_schema_validator import OAS30Validator

    operation = doc["paths"][path][method]
    request_body = inline(doc, operation["requestBody"])
    assert content_type in request_body["content"], f"{method.upper()} {path} documents no {content_type} body"
    schema = request_body["content"][content_type].get("schema", {})
    OAS30Validator(schema).validate(json.loads(body))


def check_response(doc: Dict[str, Any], path: str, method: str, status: int, headers: Dict[str, str],
                   body: bytes) -> None:
    """The response fits what the document says ``method path`` answers with ``status``."""
    from openapi_schema_validator import OAS30Validator

    what = f"{method.upper()} {path} -> {status}"
    responses = doc["paths"][path][method]["responses"]
    assert str(status) in responses, f"{what} is not documented (documented: {sorted(responses)}): {body[:300]!r}"
    response = inline(doc, responses[str(status)])
    media = media_type(headers)
    content = response.get("content", {})
    assert media in content, f"{what} answered {media}, documented: {sorted(content)}"
    schema = content[media].get("schema", {})
    if media == "application/json":
        instance: Any = json.loads(body)
    elif media == "text/event-stream":
        events = [line[len(b"data: "):] for line in body.split(b"\n") if line.startswith(b"data: ")]
        assert events, f"{what}: no event in {body[:300]!r}"
        event_schema = content[media].get("x-event-data", {})
        for event in events:
            OAS30Validator(event_schema).validate(json.loads(event))
        instance = body.decode("utf-8")
    elif media.startswith("text/"):
        instance = body.decode("utf-8")
    else:
        instance = "<binary>"  # format: binary strings: any bytes
    OAS30Validator(schema).validate(instance)


# --- the samples: READMEs, Procfiles, launched processes -------------------------------------------------------
SAMPLES_DIR = os.path.join(ROOT, "samples")
LAUNCHER = ["/cnb/lifecycle/launcher", "--"]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def markdown_parts(text: str) -> Iterator[Tuple[str, str, str]]:
    """(kind, info, body) in page order: ("code", info string, code) and ("text", "", paragraph)."""
    pos = 0
    for m in FENCE.finditer(text):
        for para in re.split(r"\n\s*\n", text[pos:m.start()]):
            if para.strip():
                yield "text", "", para
        yield "code", m.group(1).strip(), m.group(2)
        pos = m.end()
    for para in re.split(r"\n\s*\n", text[pos:]):
        if para.strip():
            yield "text", "", para


def shell_commands(block: str) -> List[Tuple[str, List[str]]]:
    """The commands of a shell block, each with the `# ...` lines right under it (its expected output)."""
    commands: List[Tuple[str, List[str]]] = []
    lines, i, attached = block.splitlines(), 0, False
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line:
            attached = False
        elif line.startswith("#"):
            if attached:
                commands[-1][1].append(line[1:].strip())
        else:
            while line.endswith("\\") and i < len(lines):
                line = line[:-1].rstrip() + " " + lines[i].strip()
                i += 1
            commands.append((line, []))
            attached = True
    return commands


def readme_commands(sample: str) -> List[Tuple[str, List[str]]]:
    """The shell commands of samples/<sample>/README.md, each with its expected output lines."""
    with open(os.path.join(SAMPLES_DIR, sample, "README.md")) as f:
        text = f.read()
    return [c for kind, info, body in markdown_parts(text)
            if kind == "code" and info in ("sh", "bash", "shell") for c in shell_commands(body)]


def same_line(got: str, want: str) -> bool:
    """Lines agree: equal as JSON (also after an SSE `data: ` prefix) or as text."""
    for prefix in ("", "data: "):
        if got.startswith(prefix) and want.startswith(prefix):
            try:
                return json.loads(got[len(prefix):]) == json.loads(want[len(prefix):])
            except ValueError:
                continue
    return got.strip() == want.strip()


def procfile(folder: str) -> Dict[str, str]:
    """{process type: command} of the folder's Procfile."""
    processes = {}
    with open(os.path.join(folder, "Procfile")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                kind, command = line.split(":", 1)
                processes[kind.strip()] = command.strip()
    return processes


def split_command(command: str) -> Tuple[List[str], Dict[str, str]]:
    """`python model.py --a 1 --b ${X:-2}` -> (["python", "model.py"], {"--a": "1", "--b": "2"})."""
    tokens = shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", command))
    program = []
    while tokens and not tokens[0].startswith("-"):
        program.append(tokens.pop(0))
    return program, flag_values(tokens)


def flag_values(tokens: List[str]) -> Dict[str, str]:
    """{--flag: value} of ``--flag value`` and ``--flag=value`` tokens."""
    values: Dict[str, str] = {}
    i = 0
    while i < len(tokens):
        assert tokens[i].startswith("--"), f"expected a --flag at {tokens[i:]}"
        if "=" in tokens[i]:
            name, value = tokens[i].split("=", 1)
            i += 1
        else:
            name, value = tokens[i], tokens[i + 1]
            i += 2
        values[name] = value
    return values


def server_flags() -> set:
    """Every --flag of the server's parser."""
    from kserve_sdk import model_server
    return {opt for action in model_server.parser._actions for opt in action.option_strings if opt.startswith("--")}


def wait_ready(port: int, proc: subprocess.Popen, log: str, timeout: float = 120.0) -> None:
    """Returns once the server ``proc`` started answers ready on ``port``; fails, with its ``log`` file, if it
    exits first or is not ready after ``timeout`` s."""
    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode} before port {port} was ready:\n{_read(log)}")
        return answers_ok(f"http://127.0.0.1:{port}/v2/health/ready")
    try:
        eventually(ready, timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(f"port {port} not ready after {timeout}s:\n{_read(log)}") from None


def _read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


# --- an OTLP/gRPC trace collector -------------------------------------------------------------------------------
class Span(NamedTuple):
    """One exported span: ids as hex, OTLP's kind number, its attributes, its resource's, its events' names."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    kind: int
    attributes: Dict
    resource: Dict
    events: List[str]
    links: Tuple[Tuple[str, str], ...] = ()  # (trace id, span id) of each span this one links to
    start_ns: int = 0
    end_ns: int = 0


def _otlp_value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None


class SpanCollector:
    """An OTLP/gRPC trace receiver on loopback keeping every span it is sent: ``start()``, point a server at it
    with ``env(service)``, read ``spans`` / ``of(trace id)``, ``stop()``."""

    SERVER_KIND = 2  # OTLP's SPAN_KIND_SERVER

    def __init__(self) -> None:
        self.spans: List[Span] = []
        self.lock = threading.Lock()
        self.port = 0
        self._server: Any = None

    def start(self) -> "SpanCollector":
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        collector = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                collector.keep(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(0)

    def keep(self, request: Any) -> None:
        """Keep the spans of one export request."""
        found = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _otlp_value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(Span(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.kind,
                                      {kv.key: _otlp_value(kv.value) for kv in s.attributes}, resource,
                                      [e.name for e in s.events],
                                      tuple((k.trace_id.hex(), k.span_id.hex()) for k in s.links),
                                      s.start_time_unix_nano, s.end_time_unix_nano))
        with self.lock:
            self.spans += found

    def env(self, service: str, **extra: str) -> Dict[str, str]:
        """The environment that makes a server export its spans here, every 50 ms."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_SERVICE_NAME": service, "OTEL_BSP_SCHEDULE_DELAY": "50", **extra}

    def of(self, trace_id: str) -> List[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def server_span_of(self, trace_id: str) -> List[Span]:
        """The server spans of the trace: a call's last span to end (its stage spans end before it)."""
        return [s for s in self.of(trace_id) if s.kind == self.SERVER_KIND]

    def trace(self, trace_id: str, timeout: float = 30.0) -> List[Span]:
        """The spans of ``trace_id`` once its server span has come (its other spans end before it)."""
        return self.wait(lambda: self.server_span_of(trace_id) and self.of(trace_id), timeout)

    def wait(self, found: Callable[[], Any], timeout: float = 30.0) -> Any:
        """``found()``'s first truthy value, polled until ``timeout`` s (export runs every 50 ms)."""
        try:
            return eventually(found, timeout)
        except AssertionError:
            spans = [(s.name, s.trace_id) for s in self.spans]
            raise AssertionError(f"not exported within {timeout}s; spans: {spans}") from None


# --- a Redis server ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def redis_server(folder: Any) -> Iterator[str]:
    """A real redis-server on a free loopback port (appendonly, in ``folder``), answering by the time its URL is
    given; stopped by process group at the end. Missing redis-server fails the test: hack/test.sh installs it."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: the Redis job store's tests need a real one "
                    "(Debian's redis-server package; hack/test.sh installs it)")
    port, log_path = free_port(), os.path.join(str(folder), "redis.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "yes", "--dir", str(folder)], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            with redis.Redis.from_url(url, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        eventually(answers, timeout=20, message=lambda: f"redis-server did not start: {open(log_path).read()}")
        yield url
    finally:
        stop_process_group(server)


AZURITE_VERSION = "3.35.0"


def azurite_binary() -> str:
    """azurite-blob (the Azure Blob emulator) from the npm registry, installed once into the tests' cache folder
    (``$KSERVE_SDK_TEST_CACHE``, else ~/.cache/kserve-sdk-test); "" without Node.js and npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return ""
    cache = os.environ.get("KSERVE_SDK_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                       "kserve-sdk-test")
    prefix = os.path.join(cache, f"azurite-{AZURITE_VERSION}")
    binary = os.path.join(prefix, "node_modules", ".bin", "azurite-blob")
    if not os.path.exists(binary):
        os.makedirs(cache, exist_ok=True)
        partial = tempfile.mkdtemp(prefix=f".azurite-{AZURITE_VERSION}-", dir=cache)
        try:
            subprocess.run([npm, "install", "--prefix", partial, "--no-audit", "--no-fund", "--loglevel=error",
                            f"azurite@{AZURITE_VERSION}"], check=True, timeout=600, stdout=subprocess.DEVNULL)
            os.rename(partial, prefix)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return binary


def listens(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def started_together(servers: Dict[str, "Server"]) -> Iterator[Dict[str, "Server"]]:
    """Start every server of ``servers`` at once, wait until each is ready (see :func:`wait_ready_restarting`),
    and stop them all (their logs removed) when the block ends."""
    started: Dict[str, Server] = {}
    try:
        for name, server in servers.items():
            started[name] = server.start(wait_ready=False)
        for server in started.values():
            wait_ready_restarting(server)
        yield started
    finally:
        for server in started.values():
            server.stop()
            os.unlink(server.log_file.name)

def wait_ready_restarting(server: "Server", timeout: float = 120.0, restarts: int = 2) -> None:
    """Until ``server`` (started with ``wait_ready=False``) is ready; one that lost its free port to another
    process before it bound it is started again, at most ``restarts`` times."""
    left = [restarts]

    def ready() -> bool:
        if server.proc.poll() is not None:
            if left[0] and "in use" in server.log():
                left[0] -= 1
                server.start(wait_ready=False)
                return False
            raise AssertionError(f"{server.args} exited {server.proc.returncode}:\n{server.log()}")
        return answers_ok(server.url + "/v2/health/ready")

    eventually(ready, timeout, interval=0.1, message=lambda: f"{server.args} not ready:\n{server.log()}")


def swapped_iris_model() -> bytes:
    """The iris sample's model with setosa and virginica swapped: a server that loaded it answers 2 for setosa
    (the storage tests' proof that a server serves what it downloaded, not the sample's own file)."""
    import io

    import joblib

    from samples.custom_model.model import ARTEFACT
    model = joblib.load(os.path.join(ROOT, "samples", "custom_model", "model", ARTEFACT))
    model.classes_ = model.classes_[::-1].copy()
    buf = io.BytesIO()
    joblib.dump(model, buf, compress=3)
    return buf.getvalue()
