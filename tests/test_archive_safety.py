"""Model archives that attack the machine they are unpacked on, given to a real server as ``STORAGE_URI`` (a local
file, or over HTTP on loopback): each stops the start-up with exit status 1 and one line naming the archive, the
member and why, and nothing outside the model directory is written or changed. A full disk (or file size limit)
while downloading or unpacking is said as such, naming where, not as a corrupt archive.

The fine points of each refusal are tests/fast/test_archive_safety.py's; here the server, its downloads and its
one start-up line are real.
"""
import functools
import hashlib
import http.server
import io
import os
import resource
import shutil
import subprocess
import sys
import threading
import zipfile
from typing import Dict, List, NamedTuple, Optional

import pytest

from helpers import ROOT, cve_2025_4517_entries, eventually, file_tree, free_port, stop_process_group, tar_archive

#: Any server script does: STORAGE_URI is resolved when kserve_sdk.model_server is imported, before a model is built.
SCRIPT = "tests/models/supervised.py"
LINKS = "links are not allowed in model archives"
OUTSIDE_FILE = f"/tmp/kserve-sdk-test-absolute-{os.getpid()}.txt"


class Case(NamedTuple):
    archive: str  # its file name
    data: bytes  # its bytes, or b"" for the CVE-2025-4517 shape, built for where it is unpacked
    over_http: bool
    fragments: List[str]  # what the start-up line says
    env: Dict[str, str] = {}


def _zip_with_link(name: str, target: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("ok.txt", b"fine")
        info = zipfile.ZipInfo(name)
        info.create_system, info.external_attr = 3, (0o120777 << 16)
        zf.writestr(info, target)
    return out.getvalue()


def _zip_of_many(count: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for i in range(count):
            zf.writestr(f"f{i}.txt", b"x")
    return out.getvalue()


CASES = {
    "cve-2025-4517-file": Case("evil.tar", b"", False, ["unsafe archive evil.tar: link 'a' -> 'ddd", LINKS]),
    "cve-2025-4517-http": Case("evil.tar", b"", True, ["unsafe archive evil.tar: link 'a' -> 'ddd", LINKS]),
    "hard-link-outside": Case("model.tar.gz", tar_archive([("ok.txt", "file", b"ok"), ("h", "hardlink", "../flag")],
                                                          "w:gz"), True,
                              ["unsafe archive model.tar.gz: hard link 'h' -> '../flag' points outside the model "
                               f"directory; {LINKS}"]),
    "zip-link": Case("model.zip", _zip_with_link("up", "../flag"), False,
                     [f"unsafe archive model.zip: link 'up' -> '../flag' points outside the model directory; {LINKS}"]),
    "absolute": Case("model.tar", tar_archive([(OUTSIDE_FILE, "file", b"x")]), True,
                     [f"unsafe archive model.tar: member '{OUTSIDE_FILE}' has an absolute path"]),
    "dotdot": Case("model.tgz", tar_archive([("ok.txt", "file", b"ok"), ("../../escaped.txt", "file", b"x")], "w:gz"),
                   False, ["unsafe archive model.tgz: member '../../escaped.txt' points outside the model directory"]),
    "device": Case("model.tar", tar_archive([("dev/zero", "chr", None)]), False,
                   ["unsafe archive model.tar: member 'dev/zero' is a character device; model archives hold files "
                    "and directories only"]),
    "ratio": Case("bomb.tar.gz", tar_archive([("zeros.bin", "file", bytes(40 << 20))], "w:gz"), True,
                  ["times its size (KSERVE_SDK_MAX_ARCHIVE_RATIO), as a decompression bomb does; refused at member "
                   "'zeros.bin'", "archive bomb.tar.gz ("]),
    "bytes": Case("big.tar.gz", tar_archive([("a.bin", "file", os.urandom(600_000)),
                                             ("b.bin", "file", os.urandom(600_000))], "w:gz"), False,
                  ["archive big.tar.gz unpacks to more than 1000000 bytes (KSERVE_SDK_MAX_ARCHIVE_BYTES); refused at "
                   "member 'b.bin'"], {"KSERVE_SDK_MAX_ARCHIVE_BYTES": "1000000"}),
    "members": Case("many.zip", _zip_of_many(150), True,
                    ["archive many.zip has 150 members, more than 100 (KSERVE_SDK_MAX_ARCHIVE_MEMBERS)"],
                    {"KSERVE_SDK_MAX_ARCHIVE_MEMBERS": "100"}),
    "bad-limit": Case("model.tar", tar_archive([("ok.txt", "file", b"ok")]), False,
                      ["KSERVE_SDK_MAX_ARCHIVE_RATIO='lots': expected a number, 0 or more (0: no limit)"],
                      {"KSERVE_SDK_MAX_ARCHIVE_RATIO": "lots"}),
}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A loopback HTTP server of a folder's files: yields (folder, base URL)."""
    folder = tmp_path_factory.mktemp("served")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _uri_and_destination(case: Case, name: str, folder, web) -> str:
    """Put the case's archive where the server reads it from; returns its STORAGE_URI."""
    if case.over_http:
        served, url = web
        (served / name).mkdir()
        path, uri = served / name / case.archive, f"{url}/{name}/{case.archive}"
    else:
        (folder / "src").mkdir()
        path = folder / "src" / case.archive
        uri = f"file://{path}"
    data = case.data
    if not data:  # the links' lengths depend on where the server unpacks: the cache's partial folder
        target = f"{case.archive}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
        data = tar_archive(cve_2025_4517_entries(str(folder / "cache" / f".{target}.partial-1234567-abcdefgh")))
    path.write_bytes(data)
    return uri


@pytest.fixture(scope="module")
def refusals(start_server, tmp_path_factory, web):
    """Every case's server, started at once: case -> (exit status, or None if it served; log; tree before; tree
    after)."""
    started = {}
    for name, case in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "cache").mkdir()
        (folder / "flag").write_bytes(b"original")  # beside the cache folder: what CVE-2025-4517's escape reaches
        (folder / "cache" / "flag").write_bytes(b"original")
        uri = _uri_and_destination(case, name, folder, web)
        before = file_tree(str(folder))
        server = start_server(SCRIPT, grpc=False, wait=False, env={
            "STORAGE_URI": uri, "KSERVE_SDK_MODEL_CACHE": str(folder / "cache"), **case.env})
        started[name] = (server, folder, before)
    # each stops at start-up, or serves (its archive got through): no need to wait longer for those that serve
    eventually(lambda: all(server.proc.poll() is not None or "Serving HTTP" in server.log()
                           for server, _, _ in started.values()), 90)
    outcomes = {}
    for name, (server, folder, before) in started.items():
        server.stop()
        code = server.proc.returncode if "Serving HTTP" not in server.log() else None
        outcomes[name] = (code, server.log(), before, file_tree(str(folder)))
    return outcomes


@pytest.mark.parametrize("name", list(CASES))
def test_an_unsafe_archive_stops_the_start_up_with_one_line_and_writes_nothing_outside(name, refusals):
    code, log, before, after = refusals[name]
    assert code == 1, log
    lines = [line for line in log.splitlines() if "Model storage:" in line]
    assert len(lines) == 1 and "Traceback" not in log, log
    for fragment in CASES[name].fragments:
        assert fragment in lines[0], lines[0]
    assert after == before  # nothing new, nothing changed: not the flags, not a partial folder in the cache
    assert not os.path.exists(OUTSIDE_FILE)


# --- a full disk ----------------------------------------------------------------------------------------------
def _run_server(argv: List[str], env: Dict[str, str], log_path: str, preexec=None) -> int:
    """Run a server that is expected to stop at start-up; its exit status (output in ``log_path``)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", **env},
                                preexec_fn=preexec)
        try:
            return proc.wait(timeout=90)
        finally:
            stop_process_group(proc)


def _server_argv() -> List[str]:
    return [sys.executable, os.path.join(ROOT, SCRIPT), "--http_port", str(free_port()), "--enable_grpc", "false"]


def _storage_line(log_path: str) -> str:
    with open(log_path, errors="replace") as f:
        log = f.read()
    lines = [line for line in log.splitlines() if "Model storage:" in line]
    assert len(lines) == 1 and "Traceback" not in log, log
    return lines[0]


def _small_filesystem_works(folder: str) -> Optional[str]:
    """None when a tiny tmpfs can be mounted in a user and mount namespace of our own (``unshare -r -m``); else
    why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(["unshare", "-r", "-m", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0"', folder],
                           capture_output=True, text=True, timeout=30)
    return None if probe.returncode == 0 else f"unshare -r -m cannot mount a tmpfs here: {probe.stderr.strip()}"


@pytest.mark.parametrize("what", ["unpacking", "downloading"])
def test_a_full_disk_is_said_as_such(what, tmp_path, web):
    """The cache is a 1 MiB tmpfs (in a mount namespace of the server's own); the model is 3 MiB: an archive
    unpacked from a local file, or a file downloaded over HTTP."""
    cache = tmp_path / "cache"
    cache.mkdir()
    why_not = _small_filesystem_works(str(cache))
    if why_not:
        pytest.skip(why_not + " (tests/fast/test_archive_safety.py checks how a full disk is told)")
    served, url = web
    if what == "unpacking":
        source = tmp_path / "weights.tar.gz"
        source.write_bytes(tar_archive([("w.bin", "file", os.urandom(3 << 20))], "w:gz"))
        uri = f"file://{source}"
    else:
        (served / "full").mkdir()
        (served / "full" / "weights.bin").write_bytes(os.urandom(3 << 20))
        uri = f"{url}/full/weights.bin"
    mount = ["unshare", "-r", "-m", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"', str(cache)]
    log = str(tmp_path / "server.log")
    code = _run_server(mount + _server_argv(), {"STORAGE_URI": uri, "KSERVE_SDK_MODEL_CACHE": str(cache)}, log)
    line = _storage_line(log)
    assert code == 1, line
    if what == "unpacking":
        assert f"no space left on device while unpacking weights.tar.gz (member 'w.bin') into {cache}/.weights" in line
    else:
        target = f"weights.bin-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
        assert f"no space left on device while downloading into {cache}/{target} (" in line, line
    assert "corrupt" not in line and " bytes free there)" in line
    assert os.listdir(cache) == []  # (the tmpfs went with the server's namespace; nothing was left beneath it)


def test_a_file_size_limit_while_unpacking_is_said_as_such(tmp_path):
    """Works anywhere: the server's file size limit (RLIMIT_FSIZE) is 1 MiB and the archive holds 3 MiB."""
    cache = tmp_path / "cache"
    source = tmp_path / "weights.tar.gz"
    source.write_bytes(tar_archive([("w.bin", "file", os.urandom(3 << 20))], "w:gz"))
    log = str(tmp_path / "server.log")

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    code = _run_server(_server_argv(), {"STORAGE_URI": f"file://{source}", "KSERVE_SDK_MODEL_CACHE": str(cache)},
                       log, limit_file_size)
    line = _storage_line(log)
    assert code == 1, line
    assert "file too large (a file size limit: ulimit -f) while unpacking weights.tar.gz (member 'w.bin') into " \
           f"{cache}/.weights.tar.gz-" in line, line
    assert "corrupt" not in line
    assert os.listdir(cache) == []
