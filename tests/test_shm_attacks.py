"""A client that attacks the server through system shared memory (--allow_client_shm true): it shrinks, deletes or
replaces its own /dev/shm object after registering a region of it, plants symbolic links and FIFOs under keys,
sends keys that are paths or hold a NUL byte, and registers regions by the thousand. Each attack is answered
400 / INVALID_ARGUMENT naming the region or key and the problem; the worker lives on (same PID) and answers the
right result; its memory and open files stay as they were; no file outside /dev/shm is read or written."""
import http.client
import json
import os
import re
import threading
import time
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import post_json, request, run_python, side_by_side, triton_error
from kserve_sdk.triton import shared_memory
from kserve_sdk.triton.shared_memory import SharedMemoryRegistry

PREFIX = f"kserve-sdk-attack-{os.getpid()}"
SIZE = 16384  # four pages: a read past a shrunk object's end would touch whole pages beyond it
INPUT_AT = 8192  # the input's bytes sit in the third page of the region
DATA = np.arange(4, dtype=np.float32).reshape(1, 4) + 0.5
INFER = "/v2/models/echo/infer"
INVALID = "StatusCode.INVALID_ARGUMENT"


def _path(key: str) -> str:
    return os.path.join("/dev/shm", key.lstrip("/"))


@pytest.fixture
def objects():
    """``make(name, size)``: a fresh /dev/shm object of ``size`` zero bytes, its key returned; every object
    (and whatever took its key) is removed after the test."""
    made: List[str] = []

    def make(name: str, size: int = SIZE) -> str:
        key = f"/{PREFIX}-{name}"
        made.append(key)
        fd = os.open(_path(key), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        os.close(fd)
        return key

    yield make
    for key in made:
        if os.path.lexists(_path(key)):
            os.unlink(_path(key))


def _put(key: str, data: bytes, offset: int) -> None:
    fd = os.open(_path(key), os.O_RDWR)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def _get(key: str, size: int) -> bytes:
    with open(_path(key), "rb") as f:
        return f.read(size)


def _shrink(key: str) -> None:
    os.truncate(_path(key), 0)


def _delete(key: str) -> None:
    os.unlink(_path(key))


def _replace(key: str) -> None:
    os.unlink(_path(key))
    fd = os.open(_path(key), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, SIZE)
    os.close(fd)


def _shrunk(name: str, key: str) -> str:
    return (f"region '{name}' is smaller than its registered size now: shared memory object '{key}' holds 0 bytes, "
            f"and the region needs {SIZE} (offset 0 + byte_size {SIZE}); register the region again")


def _deleted(name: str, key: str) -> str:
    return (f"region '{name}' cannot be used: its shared memory object '{key}' no longer exists (it was deleted "
            "after the region was registered); register the region again")


def _replaced(name: str, key: str) -> str:
    return (f"region '{name}' cannot be used: its shared memory object '{key}' was replaced by another object after "
            "the region was registered; register the region again")


#: attack name -> (what the client does to its object, the answer's message for region name and key)
ATTACKS: Dict[str, Tuple[Callable[[str], None], Callable[[str, str], str]]] = {
    "shrunk": (_shrink, _shrunk), "deleted": (_delete, _deleted), "replaced": (_replace, _replaced)}


# --- the server, its workers and what they hold ----------------------------------------------------------------
def _workers(server) -> List[int]:
    """The PIDs that answer calls: the server itself, or its workers with --workers N."""
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = sorted(int(child) for child in f.read().split())
    return children or [pid]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _register(server, name: str, key: str, byte_size: int = SIZE, offset: int = 0) -> Tuple[int, str]:
    status, _, body = post_json(server.http_port, f"/v2/systemsharedmemory/region/{name}/register",
                                {"key": key, "offset": offset, "byte_size": byte_size})
    return status, body.get("error", "")


def _unregister_all(server) -> None:
    assert request(server.http_port, "POST", "/v2/systemsharedmemory/unregister", b"")[0] == 200


def _input_from(region: str, offset: int = INPUT_AT) -> dict:
    return {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
            "parameters": {"shared_memory_region": region, "shared_memory_byte_size": 16,
                           "shared_memory_offset": offset}}


def _inline_input() -> dict:
    return {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": DATA.ravel().tolist()}


def _output_to(region: str) -> dict:
    return {"name": "OUTPUT0", "parameters": {"shared_memory_region": region, "shared_memory_byte_size": 16,
                                              "shared_memory_offset": INPUT_AT}}


def _answers_right(server, objects) -> None:
    """A fresh region round trip and a plain call both answer the input back."""
    assert post_json(server.http_port, INFER, {"inputs": [_inline_input()]})[2]["outputs"][0]["data"] == \
        DATA.ravel().tolist()
    key_in, key_out = objects(f"check-in-{time.monotonic_ns()}"), objects(f"check-out-{time.monotonic_ns()}")
    _put(key_in, DATA.tobytes(), INPUT_AT)
    assert _register(server, "check-in", key_in) == (200, "")
    assert _register(server, "check-out", key_out) == (200, "")
    try:
        status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("check-in")],
                                                              "outputs": [_output_to("check-out")]})
        assert status == 200, body
        assert body["outputs"][0]["parameters"]["shared_memory_region"] == "check-out"
        assert _get(key_out, SIZE)[INPUT_AT:INPUT_AT + 16] == DATA.tobytes()
    finally:
        request(server.http_port, "POST", "/v2/systemsharedmemory/region/check-in/unregister", b"")
        request(server.http_port, "POST", "/v2/systemsharedmemory/region/check-out/unregister", b"")


class Watch:
    """The workers' PIDs and memory before an attack, to check after it that they live on unchanged."""

    def __init__(self, server, objects):
        self.server, self.objects = server, objects
        for _ in range(3):  # warm the allocator up with the calls the check makes
            _answers_right(server, objects)
        self.pids = _workers(server)
        self.rss = {pid: _rss_kib(pid) for pid in self.pids}

    def check(self) -> None:
        assert self.server.proc.poll() is None, self.server.log()[-3000:]
        assert _workers(self.server) == self.pids, self.server.log()[-3000:]
        _answers_right(self.server, self.objects)
        for pid in self.pids:
            assert _rss_kib(pid) <= self.rss[pid] * 1.1, (pid, self.rss[pid], _rss_kib(pid))


@pytest.fixture(scope="module", params=[1, 2], ids=["workers1", "workers2"])
def server(request, start_server):
    return start_server("tests/models/zoo.py", "--workers", str(request.param), "--allow_client_shm", "true",
                        env={"ZOO_MODELS": "echo"})


def _answered_by_every_worker(server, call: Callable[[], Tuple[int, str]], want: Tuple[int, str]) -> None:
    """Make ``call`` until every worker answered it (the access log names the worker); each answer is ``want``."""
    pids = _workers(server)
    marks = len(server.log())

    def every_worker(answers: List[Tuple[int, str]]) -> bool:
        log = server.log()[marks:]
        return all(re.search(rf'^\S+ \S+ {pid} .*"POST {INFER} HTTP/\S+" 400 ', log, re.M) for pid in pids)

    answers = side_by_side(call, every_worker, width=4, seconds=60)
    assert set(answers) == {want}
    assert every_worker(answers), server.log()[-3000:]


# --- a region that changes after registration: REST ------------------------------------------------------------
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_changed_input_region_is_refused_over_rest(server, objects, attack):
    watch = Watch(server, objects)
    change, message = ATTACKS[attack]
    key = objects(f"rest-in-{attack}")
    _put(key, DATA.tobytes(), INPUT_AT)
    assert _register(server, "in", key) == (200, "")
    try:
        change(key)

        def infer() -> Tuple[int, str]:
            status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("in")]})
            return status, body.get("error", "")

        _answered_by_every_worker(server, infer, (400, message("in", key)))
    finally:
        _unregister_all(server)
    watch.check()


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_changed_output_region_is_refused_over_rest(server, objects, attack):
    watch = Watch(server, objects)
    change, message = ATTACKS[attack]
    key = objects(f"rest-out-{attack}")
    assert _register(server, "out", key) == (200, "")
    try:
        change(key)

        def infer() -> Tuple[int, str]:
            status, _, body = post_json(server.http_port, INFER, {"inputs": [_inline_input()],
                                                                  "outputs": [_output_to("out")]})
            return status, body.get("error", "")

        _answered_by_every_worker(server, infer, (400, message("out", key)))
        if attack != "deleted":
            assert os.stat(_path(key)).st_size == (0 if attack == "shrunk" else SIZE)  # nothing was written
            assert _get(key, SIZE) == bytes(os.stat(_path(key)).st_size)
    finally:
        _unregister_all(server)
    watch.check()


# --- the same over gRPC, with tritonclient -----------------------------------------------------------------------
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_changed_region_is_refused_over_grpc(server, objects, attack):
    watch = Watch(server, objects)
    change, message = ATTACKS[attack]
    key_in, key_out = objects(f"grpc-in-{attack}"), objects(f"grpc-out-{attack}")
    _put(key_in, DATA.tobytes(), INPUT_AT)
    client = tgrpc.InferenceServerClient(server.grpc_url)
    client.register_system_shared_memory("in", key_in, SIZE)
    client.register_system_shared_memory("out", key_out, SIZE)
    try:
        change(key_in)
        change(key_out)
        from_region = tgrpc.InferInput("INPUT0", [1, 4], "FP32")
        from_region.set_shared_memory("in", 16, offset=INPUT_AT)
        assert triton_error(client.infer, "echo", [from_region]) == (INVALID, message("in", key_in))
        inline = tgrpc.InferInput("INPUT0", [1, 4], "FP32")
        inline.set_data_from_numpy(DATA)
        to_region = tgrpc.InferRequestedOutput("OUTPUT0")
        to_region.set_shared_memory("out", 16, offset=INPUT_AT)
        assert triton_error(client.infer, "echo", [inline], outputs=[to_region]) == (INVALID, message("out", key_out))
    finally:
        client.unregister_system_shared_memory()
        client.close()
    watch.check()


def test_a_region_that_shrinks_and_grows_while_it_is_used_never_crashes(server, objects):
    watch = Watch(server, objects)
    key = objects("flapping")
    assert _register(server, "in", key) == (200, "")
    stop = threading.Event()

    def flap() -> None:  # the client shrinks its object and grows it back, over and over
        fd, deadline = os.open(_path(key), os.O_RDWR), time.monotonic() + 120
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, SIZE)
                os.pwrite(fd, DATA.tobytes(), INPUT_AT)
        finally:
            os.close(fd)

    flapper = threading.Thread(target=flap)
    flapper.start()
    try:
        answers = set()
        for _ in range(300):
            status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("in")]})
            answers.add((status, str(body["outputs"][0]["data"]) if status == 200 else body["error"]))
    finally:
        stop.set()
        flapper.join(30)
        _unregister_all(server)
    cut_short = (f"region 'in' is smaller than its registered size now: shared memory object '{key}' ended at byte "
                 f"{INPUT_AT} while it was read, and the region needs {SIZE} (offset 0 + byte_size {SIZE}); register "
                 "the region again")
    assert answers <= {(200, str(DATA.ravel().tolist())), (200, str([0.0] * 4)), (400, _shrunk("in", key)),
                       (400, cut_short)}
    assert any(status == 400 for status, _ in answers)  # the calls met the object shrunk
    watch.check()


def test_a_read_cut_short_counts_the_bytes_up_to_the_first_short_part(objects):
    key = objects("short", 16 << 20)
    target = np.ones(16 << 20, np.uint8)
    fd = os.open(_path(key), os.O_RDWR)
    try:
        os.ftruncate(fd, 6 << 20)  # after the object was checked, before it is read
        assert shared_memory._read_into(fd, target.data, 0) == 6 << 20
        assert shared_memory._read_into(fd, target.data, 7 << 20) == 0
    finally:
        os.close(fd)
    assert not target[:6 << 20].any()  # what was there was read


# --- keys: one name under /dev/shm, opened as shm_open would ------------------------------------------------------
def _key_message(key: str, problem: str) -> str:
    return (f"shared memory key {key!r} must name one object in /dev/shm, like '/my_region' (as shm_open takes it): "
            f"{problem}")


BAD_KEYS = {
    "/a\0b": "it holds a NUL byte",
    "../../etc/passwd": "it holds a '/' other than a leading one",
    "/dir/object": "it holds a '/' other than a leading one",
    "//object": "it holds a '/' other than a leading one",
    "/..": "'..' is a directory",
    "": "it names no object",
    "/": "it names no object",
}


@pytest.mark.parametrize("key", BAD_KEYS, ids=["nul", "path", "subdirectory", "two-slashes", "dotdot", "empty",
                                               "slash"])
def test_a_key_that_is_not_one_name_is_refused(server, key):
    assert _register(server, "r", key, 16) == (400, _key_message(key, BAD_KEYS[key]))
    client = tgrpc.InferenceServerClient(server.grpc_url)
    try:
        assert triton_error(client.register_system_shared_memory, "r", key, 16) == (
            INVALID, _key_message(key, BAD_KEYS[key]))
    finally:
        client.close()
    assert request(server.http_port, "GET", "/v2/systemsharedmemory/status")[2] == b"[]"


def test_a_key_that_is_not_a_string_is_refused(server):
    for key in (7, None, ["/a"]):
        assert _register(server, "r", key, 16) == (400, _key_message(key, "it is not a string"))


def test_a_key_with_or_without_its_leading_slash_names_the_object(server, objects):
    key = objects("plain")
    _put(key, DATA.tobytes(), INPUT_AT)
    assert _register(server, "bare", key.lstrip("/")) == (200, "")
    try:
        status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("bare")]})
        assert (status, body["outputs"][0]["data"]) == (200, DATA.ravel().tolist())
    finally:
        _unregister_all(server)


@pytest.fixture
def outside(tmp_path):
    """A file outside /dev/shm with known content, its content and mtime checked unchanged after the test."""
    target = tmp_path / "secret.bin"
    target.write_bytes(b"S" * SIZE)
    before = os.stat(target).st_mtime_ns
    yield str(target)
    assert target.read_bytes() == b"S" * SIZE
    assert os.stat(target).st_mtime_ns == before


def test_a_symlink_under_a_key_is_refused(server, outside):
    key = f"/{PREFIX}-link"
    os.symlink(outside, _path(key))
    try:
        message = (f"shared memory object '{key}' is a symbolic link; a key must name the object itself "
                   "(links are not followed)")
        assert _register(server, "r", key) == (400, message)
        client = tgrpc.InferenceServerClient(server.grpc_url)
        try:
            assert triton_error(client.register_system_shared_memory, "r", key, SIZE) == (INVALID, message)
        finally:
            client.close()
    finally:
        os.unlink(_path(key))


def test_a_region_whose_object_becomes_a_symlink_is_refused(server, objects, outside):
    watch = Watch(server, objects)
    key = objects("becomes-link")
    assert _register(server, "in", key) == (200, "")
    try:
        os.unlink(_path(key))
        os.symlink(outside, _path(key))
        message = (f"region 'in' cannot be used: shared memory object '{key}' is a symbolic link; a key must name "
                   "the object itself (links are not followed)")
        status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("in")]})
        assert (status, body["error"]) == (400, message)  # its content was not read
        status, _, body = post_json(server.http_port, INFER, {"inputs": [_inline_input()],
                                                              "outputs": [_output_to("in")]})
        assert (status, body["error"]) == (400, message)  # nor written
    finally:
        _unregister_all(server)
    watch.check()


def test_a_fifo_or_a_directory_under_a_key_is_refused(server):
    fifo, directory = f"/{PREFIX}-fifo", f"/{PREFIX}-dir"
    os.mkfifo(_path(fifo), 0o600)
    os.mkdir(_path(directory))
    try:
        assert _register(server, "r", fifo) == (400, f"shared memory object '{fifo}' is not a regular file")
        assert _register(server, "r", directory) == (
            400, f"cannot open shared memory object '{directory}': Is a directory")
    finally:
        os.unlink(_path(fifo))
        os.rmdir(_path(directory))
    assert request(server.http_port, "GET", "/v2/systemsharedmemory/status")[2] == b"[]"


# --- how many regions, and what they hold -------------------------------------------------------------------------
def test_regions_are_capped_per_worker(start_server, objects):
    server = start_server("tests/models/zoo.py", "--allow_client_shm", "true", "--max_shm_regions", "2",
                          env={"ZOO_MODELS": "echo"})
    key = objects("capped")
    _put(key, DATA.tobytes(), INPUT_AT)
    assert _register(server, "a", key) == (200, "")
    assert _register(server, "b", key) == (200, "")
    message = ("system shared memory region 'c' is not registered: 2 regions are, the most this server keeps "
               "(--max_shm_regions 2); unregister some first")
    assert _register(server, "c", key) == (400, message)
    client = tgrpc.InferenceServerClient(server.grpc_url)
    try:
        assert triton_error(client.register_system_shared_memory, "c", key, SIZE) == (INVALID, message)
    finally:
        client.close()
    assert request(server.http_port, "POST", "/v2/systemsharedmemory/region/a/unregister", b"")[0] == 200
    assert _register(server, "c", key) == (200, "")
    status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("c")]})
    assert (status, body["outputs"][0]["data"]) == (200, DATA.ravel().tolist())


def test_25000_registrations_hold_no_open_file_and_inference_goes_on(start_server, objects):
    server = start_server("tests/models/zoo.py", "--allow_client_shm", "true", env={"ZOO_MODELS": "echo"})
    watch = Watch(server, objects)
    files = _open_files(server.proc.pid)
    key = objects("many")
    answers: Dict[int, int] = {}
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        for i in range(25_000):
            body = json.dumps({"key": key, "byte_size": SIZE}).encode()
            conn.request("POST", f"/v2/systemsharedmemory/region/r{i}/register", body,
                         {"Content-Type": "application/json"})
            answer = conn.getresponse()
            last = answer.read()
            answers[answer.status] = answers.get(answer.status, 0) + 1
    finally:
        conn.close()
    assert answers == {200: 1024, 400: 25_000 - 1024}
    assert json.loads(last)["error"] == ("system shared memory region 'r24999' is not registered: 1024 regions are, "
                                         "the most this server keeps (--max_shm_regions 1024); unregister some first")
    assert _open_files(server.proc.pid) <= files + 2  # a connection or two, not a file per region
    _put(key, DATA.tobytes(), INPUT_AT)
    status, _, body = post_json(server.http_port, INFER, {"inputs": [_input_from("r1023")]})
    assert (status, body["outputs"][0]["data"]) == (200, DATA.ravel().tolist())
    _unregister_all(server)
    watch.check()


def test_a_registry_without_a_cap_keeps_no_file_open(objects):
    key = objects("uncapped")
    registry = SharedMemoryRegistry(allowed=True, max_regions=0)
    files = len(os.listdir("/proc/self/fd"))
    for i in range(5000):
        registry.register(f"r{i}", key, 0, SIZE)
    assert len(registry.status()) == 5000
    assert len(os.listdir("/proc/self/fd")) == files
    registry.unregister()


def test_an_input_is_a_copy_the_client_cannot_change_under_the_model(objects):
    key = objects("copy")
    _put(key, DATA.tobytes(), INPUT_AT)
    # in a process of its own: were the input a view of the object, reading it after the shrink would kill
    # that process with SIGBUS, not this one
    done = run_python("""
        import os, sys
        import numpy as np
        from kserve_sdk.protocol.infer_type import InferInput, InferRequest
        from kserve_sdk.triton.shared_memory import SharedMemoryRegistry

        key, at = sys.argv[1], int(sys.argv[2])
        registry = SharedMemoryRegistry(allowed=True)
        registry.register("r", key, 0, 16384)
        params = {"shared_memory_region": "r", "shared_memory_byte_size": 16, "shared_memory_offset": at}
        tensor = InferInput("INPUT0", [1, 4], "FP32", parameters=params)
        registry.read_inputs(InferRequest("echo", [tensor]))
        path = "/dev/shm" + key
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes(16))
        os.truncate(path, 0)
        array = tensor.as_numpy()
        print(array.ravel().tolist(), array.flags.writeable)
    """, key, str(INPUT_AT))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{DATA.ravel().tolist()} False\n", "")
