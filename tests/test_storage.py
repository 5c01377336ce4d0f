"""Model storage (``STORAGE_URI``): local, PVC, HTTP, S3, GCS and Azure Blob, against real endpoints on loopback.

Fixtures start ``moto_server`` (S3), ``gcp-storage-emulator`` (GCS), Azurite (Azure Blob; installed with npm
into a cache directory when Node.js is present, a failure under CI=true when it is not) and a Tornado file
server for HTTP, each on a free 127.0.0.1 port, and stop them by PID. Every scheme must deliver a folder
of several files and a .tar.gz byte for byte (sha256); the iris sample started with STORAGE_URI=s3://...
must serve what it downloaded; every failure must stop start-up with exit code 1 and one log line.
"""
import asyncio
import collections
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import types
import urllib.request
import zipfile
from typing import Dict, List, Optional

import pytest
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from helpers import (
    ROOT,
    azurite_binary,
    eventually,
    free_port,
    listens,
    post_json,
    stop_process_group,
    swapped_iris_model,
)
from kserve_sdk.storage import Storage, StorageError, resolve_model_dir
from samples.custom_model.model import ARTEFACT

SAMPLE = "samples/custom_model/model.py"
IRIS_MODEL = os.path.join(ROOT, "samples", "custom_model", "model", ARTEFACT)
SETOSA = {"instances": [[5.1, 3.5, 1.4, 0.2]]}
# Azurite's documented development account (public, fixed in Azurite itself).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURE_URI = f"https://{AZURITE_ACCOUNT}.blob.core.windows.net/models"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Environment settings a test must not inherit from the machine it runs on.
STORAGE_ENV = ("STORAGE_URI", "AWS_ENDPOINT_URL", "S3_ENDPOINT", "S3_USE_HTTPS", "AWS_ACCESS_KEY_ID",
               "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "STORAGE_EMULATOR_HOST",
               "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCESS_KEY",
               "KSERVE_SDK_MODEL_CACHE", "KSERVE_SDK_PVC_ROOT", "STORAGE_ALLOW_PATTERNS", "STORAGE_IGNORE_PATTERNS",
               "STORAGE_CONFIG", "STORAGE_OVERRIDE_CONFIG", "STORAGE_URIS")


# --- test data -------------------------------------------------------------------------------------------
def sha_tree(root: str) -> Dict[str, str]:
    """sha256 of every file below ``root`` (links followed), by ``/``-separated relative path."""
    out = {}
    for dirpath, _, names in os.walk(root, followlinks=True):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = hashlib.sha256(f.read()).hexdigest()
    return out


def tar_bytes(members: Dict[str, bytes], mode: str = "w:gz", links: Optional[Dict[str, str]] = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1700000000
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def zip_bytes(members: Dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


rng = random.Random(8)
TREE = {
    "config.json": json.dumps({"model": "test", "layers": [4, 8, 3]}).encode(),
    "weights.bin": rng.randbytes(300_000),
    "empty.txt": b"",
    "sub/vocab.txt": "\n".join(f"token{i}" for i in range(2000)).encode(),
    "sub/deep/table.npy": rng.randbytes(70_000),
}
TREE_SHA = {name: hashlib.sha256(data).hexdigest() for name, data in TREE.items()}
with open(IRIS_MODEL, "rb") as _f:
    IRIS = _f.read()
OBJECTS = {  # what each object store holds, by key
    **{f"dir/{name}": data for name, data in TREE.items()},
    "archive/model.tar.gz": tar_bytes(TREE),
    f"iris/{ARTEFACT}": IRIS,
    f"iris-swapped/{ARTEFACT}": swapped_iris_model(),
    "bad/corrupt.tar.gz": b"\x1f\x8b\x08\x00" + rng.randbytes(4000),
    "evil/model.tar.gz": tar_bytes({"ok.txt": b"fine", "../../escaped.txt": b"pwned"}),
    "evil-link/model.tar": tar_bytes({"ok.txt": b"fine"}, mode="w", links={"up": "../../../etc"}),
    "evil-zip/model.zip": zip_bytes({"ok.txt": b"fine", "../escaped.txt": b"pwned"}),
    "zip/model.zip": zip_bytes(TREE),
}


# --- processes ---------------------------------------------------------------------------------------------
class Proc:
    """A helper server process in its own session, stopped by PID."""

    def __init__(self, name: str, argv: List[str], env: Optional[dict] = None, cwd: Optional[str] = None):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"kserve-sdk-{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def wait_port(self, port: int, timeout: float = 60.0) -> None:
        try:
            eventually(lambda: self.proc.poll() is not None or listens(port), timeout)
        except AssertionError:
            pass
        if self.proc.poll() is None and listens(port):
            return
        self.stop()
        with open(self.log.name, errors="replace") as f:
            raise RuntimeError(f"{self.name} did not listen on {port}:\n{f.read()[-3000:]}")

    def stop(self) -> None:
        stop_process_group(self.proc, timeout=10)
        os.unlink(self.log.name)


def stop_together(*servers) -> None:
    """SIGTERM every server at once (each drains in parallel), then wait for all."""
    for server in servers:
        if server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGTERM)
    for server in servers:
        server.stop()


def _post(url: str, body: bytes, content_type: str = "text/plain") -> bytes:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


# --- the emulators, started together ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def emulators(tmp_path_factory):
    """moto_server, gcp-storage-emulator and Azurite (when Node.js is there), started at once on free ports;
    the s3/gcs/azure fixtures wait for theirs and fill it."""
    ports = {name: free_port() for name in ("moto", "gcs", "azurite")}
    procs = {
        "moto": Proc("moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(ports["moto"])]),
        "gcs": Proc("gcs", [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                            "--port", str(ports["gcs"]), "--in-memory", "--quiet"]),
    }
    try:
        binary = azurite_binary()
        if binary:
            procs["azurite"] = Proc("azurite", [
                binary, "--blobHost", "127.0.0.1", "--blobPort", str(ports["azurite"]), "--inMemoryPersistence",
                "--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"],
                cwd=str(tmp_path_factory.mktemp("azurite")))
        yield types.SimpleNamespace(procs=procs, ports=ports)
    finally:
        for proc in procs.values():
            proc.stop()


# --- S3: moto_server ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3(emulators):
    """A moto S3 + IAM server: bucket "models" holding OBJECTS; after set-up every request must be signed by
    a known IAM user: "admin" may do anything, "nobody" nothing (AccessDenied)."""
    import boto3
    port = emulators.ports["moto"]
    emulators.procs["moto"].wait_port(port)
    endpoint = f"http://127.0.0.1:{port}"
    common = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **common)
    keys = {}
    for user in ("admin", "nobody"):
        iam.create_user(UserName=user)
        keys[user] = iam.create_access_key(UserName=user)["AccessKey"]
    iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    client = boto3.client("s3", aws_access_key_id="setup", aws_secret_access_key="setup", **common)
    client.create_bucket(Bucket="models")
    for key, data in OBJECTS.items():
        client.put_object(Bucket="models", Key=key, Body=data)
    _post(endpoint + "/moto-api/reset-auth", b"0")  # from now on IAM decides

    def env(user: str = "admin") -> Dict[str, str]:
        return {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": keys[user]["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": keys[user]["SecretAccessKey"]}
    return types.SimpleNamespace(endpoint=endpoint, port=port, env=env)


# --- GCS: gcp-storage-emulator -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gcs(emulators):
    from google.cloud import storage
    port = emulators.ports["gcs"]
    emulators.procs["gcs"].wait_port(port)
    host = f"http://127.0.0.1:{port}"
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = host
    try:
        bucket = storage.Client(project="test").create_bucket("models")
        for key, data in OBJECTS.items():
            bucket.blob(key).upload_from_string(data)
    finally:
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved
    return types.SimpleNamespace(env={"STORAGE_EMULATOR_HOST": host}, port=port)


# --- Azure Blob: Azurite ------------------------------------------------------------------------------------
def azure_connection_string(port: int, key: str = AZURITE_KEY) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")


@pytest.fixture(scope="module")
def azure(emulators):
    if "azurite" not in emulators.procs:
        message = "Azurite needs Node.js and npm (apt-get install nodejs npm)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    from azure.storage.blob import BlobServiceClient
    port = emulators.ports["azurite"]
    emulators.procs["azurite"].wait_port(port)
    container = BlobServiceClient.from_connection_string(azure_connection_string(port)).create_container("models")
    for key, data in OBJECTS.items():
        container.upload_blob(key, data)
    return types.SimpleNamespace(port=port, env={"AZURE_STORAGE_CONNECTION_STRING": azure_connection_string(port)})


# --- HTTP: a Tornado file server on a thread -----------------------------------------------------------------
class FileServer:
    """GET /f/<key> serves OBJECTS; /cd/<key> adds a Content-Disposition name; /private/<key> needs
    ``Authorization: Bearer t``; /flaky/<key> answers 503 twice first; /short declares more bytes than
    it sends; /slow trickles for seconds. ``hits`` counts GETs by path."""

    def __init__(self):
        self.hits: collections.Counter = collections.Counter()
        files, hits = OBJECTS, self.hits

        class Files(RequestHandler):
            def get(self, kind: str, key: str):
                hits[self.request.path] += 1
                if kind == "flaky" and hits[self.request.path] <= 2:
                    return self.send_error(503)
                if kind == "private" and self.request.headers.get("Authorization") != "Bearer t":
                    return self.send_error(403)
                if key not in files:
                    return self.send_error(404)
                if kind == "cd":
                    self.set_header("Content-Disposition", 'attachment; filename="model.tar.gz"')
                self.set_header("Content-Type", "application/octet-stream")
                self.write(files[key])

        class Short(RequestHandler):
            async def get(self):
                hits[self.request.path] += 1
                self.set_header("Content-Length", "100000")
                self.write(b"x" * 1000)
                await self.flush()
                self.request.connection.stream.close()

        class Slow(RequestHandler):
            async def get(self):
                hits[self.request.path] += 1
                self.set_header("Content-Length", str(1000 * 300))
                for _ in range(300):
                    self.write(b"y" * 1000)
                    await self.flush()
                    await asyncio.sleep(0.05)

        self.loop = asyncio.new_event_loop()
        sockets = bind_sockets(0, "127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

        async def start():
            self.server = HTTPServer(Application([(r"/(f|cd|private|flaky)/(.*)", Files),
                                                  (r"/short", Short), (r"/slow", Slow)]))
            self.server.add_sockets(sockets)

        self.loop.run_until_complete(start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def web():
    server = FileServer()
    yield server
    server.stop()


@pytest.fixture
def clean_env(monkeypatch):
    for name in STORAGE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KSERVE_SDK_STORAGE_RETRIES", "3")
    return monkeypatch


def _set(monkeypatch, env: Dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# --- every scheme delivers the exact bytes ------------------------------------------------------------------
@pytest.mark.parametrize("what", ["dir", "archive/model.tar.gz"])
@pytest.mark.parametrize("scheme", ["s3", "gs", "azure"])
def test_object_store_download_is_byte_exact(scheme, what, request, clean_env, tmp_path):
    store = request.getfixturevalue({"s3": "s3", "gs": "gcs", "azure": "azure"}[scheme])
    _set(clean_env, store.env() if scheme == "s3" else store.env)
    uri = f"{AZURE_URI}/{what}" if scheme == "azure" else f"{scheme}://models/{what}"
    out = Storage.download(uri, str(tmp_path / "model"))
    assert out == str(tmp_path / "model")
    assert sha_tree(out) == TREE_SHA
    assert os.listdir(tmp_path) == ["model"]  # no partial directory, archive removed after extraction


@pytest.mark.parametrize("scheme", ["s3", "gs", "azure"])
def test_object_store_single_file_patterns_and_temp_dir(scheme, request, clean_env):
    store = request.getfixturevalue({"s3": "s3", "gs": "gcs", "azure": "azure"}[scheme])
    _set(clean_env, store.env() if scheme == "s3" else store.env)
    base = AZURE_URI if scheme == "azure" else f"{scheme}://models"
    single = Storage.download(f"{base}/iris/{ARTEFACT}")  # no out_dir: a new temporary directory
    try:
        assert sha_tree(single) == {ARTEFACT: hashlib.sha256(IRIS).hexdigest()}
    finally:
        shutil.rmtree(single)
    some = Storage.download(f"{base}/dir/", allow_patterns=["*.json", "sub/*"], ignore_patterns="*.npy")
    try:
        assert sha_tree(some) == {k: v for k, v in TREE_SHA.items() if k in ("config.json", "sub/vocab.txt")}
    finally:
        shutil.rmtree(some)


@pytest.mark.parametrize("path,expected", [
    ("f/archive/model.tar.gz", TREE_SHA),
    ("cd/archive/model.tar.gz?download=1", TREE_SHA),  # the name comes from Content-Disposition
    ("f/zip/model.zip", TREE_SHA),
    ("f/dir/weights.bin", {"weights.bin": TREE_SHA["weights.bin"]}),
])
def test_http_download_is_byte_exact(path, expected, web, clean_env, tmp_path):
    out = Storage.download(f"{web.url}/{path}", str(tmp_path / "model"))
    assert sha_tree(out) == expected
    assert os.listdir(tmp_path) == ["model"]


def test_http_headers_from_env_and_bounded_retries(web, clean_env, tmp_path):
    with pytest.raises(StorageError, match="HTTP 403"):
        Storage.download(f"{web.url}/private/iris/{ARTEFACT}", str(tmp_path / "a"))
    clean_env.setenv("127.0.0.1-headers", json.dumps({"Authorization": "Bearer t"}))
    assert sha_tree(Storage.download(f"{web.url}/private/iris/{ARTEFACT}", str(tmp_path / "a"))) == \
        {ARTEFACT: hashlib.sha256(IRIS).hexdigest()}
    # 503, 503, then the file: three attempts are enough, two are not
    assert sha_tree(Storage.download(f"{web.url}/flaky/iris/{ARTEFACT}", str(tmp_path / "b")))
    assert web.hits[f"/flaky/iris/{ARTEFACT}"] == 3
    clean_env.setenv("KSERVE_SDK_STORAGE_RETRIES", "2")
    with pytest.raises(StorageError, match=r"HTTP 503 .*after 2 attempts"):
        Storage.download(f"{web.url}/flaky/dir/config.json", str(tmp_path / "c"))
    assert web.hits["/flaky/dir/config.json"] == 2 and not (tmp_path / "c").exists()


def test_local_file_and_pvc_are_used_in_place_or_linked(clean_env, tmp_path):
    src = tmp_path / "src"
    for name, data in TREE.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    assert Storage.download(str(src)) == str(src)
    assert Storage.download(f"file://{src}") == str(src)
    clean_env.setenv("KSERVE_SDK_PVC_ROOT", str(tmp_path))
    assert Storage.download("pvc://claim/src") == str(src)
    linked = Storage.download(f"file://{src}", str(tmp_path / "linked"), ignore_patterns="sub/deep/*")
    assert sha_tree(linked) == {k: v for k, v in TREE_SHA.items() if not k.startswith("sub/deep/")}
    assert os.path.islink(os.path.join(linked, "weights.bin"))
    clean_env.setenv("STORAGE_URI", "pvc://claim/src")
    assert resolve_model_dir("/ignored") == str(src)  # STORAGE_URI overrides --model_dir; nothing copied


@pytest.mark.parametrize("name,data", [("model.tar.gz", OBJECTS["archive/model.tar.gz"]),
                                       ("model.zip", OBJECTS["zip/model.zip"])])
def test_local_archive_is_extracted_and_left_untouched(name, data, clean_env, tmp_path):
    source = tmp_path / "src" / name
    source.parent.mkdir()
    source.write_bytes(data)
    for spelling in (str(source), f"file://{source}"):
        out = tmp_path / ("out-" + spelling.split(":")[0])
        assert Storage.download(spelling, str(out)) == str(out)
        assert sha_tree(str(out)) == TREE_SHA and not os.path.islink(out / "weights.bin")
    assert sha_tree(Storage.download(str(source))) == TREE_SHA  # no out_dir: a new temporary directory
    # STORAGE_URI: extracted into --model_dir, else into the cache (replaced in place by the next start)
    clean_env.setenv("STORAGE_URI", f"file://{source}")
    clean_env.setenv("KSERVE_SDK_MODEL_CACHE", str(tmp_path / "cache"))
    cached = resolve_model_dir(None)
    assert os.path.dirname(cached) == str(tmp_path / "cache") and sha_tree(cached) == TREE_SHA
    assert resolve_model_dir(None) == cached and sorted(os.listdir(tmp_path / "cache")) == [os.path.basename(cached)]
    assert resolve_model_dir(str(tmp_path / "flag")) == str(tmp_path / "flag")
    assert sha_tree(str(tmp_path / "flag")) == TREE_SHA
    assert os.listdir(tmp_path / "src") == [name] and source.read_bytes() == data  # the source as it was


def test_corrupt_local_archive_fails_and_is_kept(clean_env, tmp_path):
    source = tmp_path / "corrupt.tar.gz"
    source.write_bytes(OBJECTS["bad/corrupt.tar.gz"])
    with pytest.raises(StorageError, match="corrupt archive corrupt.tar.gz") as e:
        Storage.download(f"file://{source}", str(tmp_path / "out"))
    assert str(source) in str(e.value)
    assert not (tmp_path / "out").exists() and source.read_bytes() == OBJECTS["bad/corrupt.tar.gz"]


def test_iris_sample_serves_a_local_archive(start_server, tmp_path):
    archive = tmp_path / "iris.tar.gz"
    archive.write_bytes(tar_bytes({ARTEFACT: OBJECTS[f"iris-swapped/{ARTEFACT}"]}))
    server = start_server(SAMPLE, "--model_name", "iris", env={
        "STORAGE_URI": f"file://{archive}", "KSERVE_SDK_MODEL_CACHE": str(tmp_path / "cache")})
    # the swapped model answers 2 for setosa: the sample loaded what the archive held
    assert post_json(server.http_port, "/v1/models/iris:predict", SETOSA)[2] == {"predictions": [2]}
    server.stop()


def test_server_model_dir_for_remote_uris(web, clean_env, tmp_path):
    uri = f"{web.url}/f/iris/{ARTEFACT}"
    clean_env.setenv("STORAGE_URI", uri)
    clean_env.setenv("KSERVE_SDK_MODEL_CACHE", str(tmp_path / "cache"))
    cached = resolve_model_dir(None)
    assert os.path.dirname(cached) == str(tmp_path / "cache") and os.listdir(cached) == [ARTEFACT]
    assert resolve_model_dir(None) == cached  # the next start replaces the copy in place
    assert resolve_model_dir(str(tmp_path / "flag")) == str(tmp_path / "flag")
    # in a KServe pod the storage initializer has filled the /mnt/models mount: no second download
    mount = tmp_path / "mnt"
    mount.mkdir()
    (mount / ARTEFACT).write_bytes(b"from the initializer")
    before = web.hits[f"/f/iris/{ARTEFACT}"]
    clean_env.setattr(os.path, "ismount", lambda path: path == str(mount))
    assert resolve_model_dir(str(mount)) == str(mount)
    assert web.hits[f"/f/iris/{ARTEFACT}"] == before


def test_other_schemes_go_to_kserve_storage_when_installed(clean_env, tmp_path):
    with pytest.raises(StorageError, match=r"unsupported scheme 'hdfs://'; supported: a local path, file://, "
                                           r"pvc://, http://, https://, s3://, gs://"):
        Storage.download("hdfs://namenode/models/m", str(tmp_path / "m"))
    calls = []
    fake = types.ModuleType("kserve_storage")
    fake.Storage = type("Storage", (), {"download": staticmethod(lambda uri, out_dir=None: calls.append(
        (uri, out_dir)) or out_dir)})
    clean_env.setitem(sys.modules, "kserve_storage", fake)
    assert Storage.download("hdfs://namenode/models/m", str(tmp_path / "m")) == str(tmp_path / "m")
    assert calls == [("hdfs://namenode/models/m", str(tmp_path / "m"))]


# --- atomicity -----------------------------------------------------------------------------------------------
def test_failed_download_leaves_nothing_and_keeps_the_previous_model(s3, web, clean_env, tmp_path):
    _set(clean_env, s3.env())
    target = tmp_path / "model"
    with pytest.raises(StorageError, match="received 1000 bytes, Content-Length says 100000"):
        Storage.download(f"{web.url}/short", str(target))
    assert os.listdir(tmp_path) == []  # no model directory, no partial one
    with pytest.raises(StorageError, match="corrupt archive"):
        Storage.download("s3://models/bad/corrupt.tar.gz", str(target))
    assert os.listdir(tmp_path) == []
    target.mkdir()
    (target / "old.txt").write_bytes(b"previous model")
    with pytest.raises(StorageError, match="NoSuchBucket"):
        Storage.download("s3://no-such-bucket/x", str(target))
    assert os.listdir(tmp_path) == ["model"] and os.listdir(target) == ["old.txt"]
    # a partial directory left by a process that died is removed by the next download
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".model.partial-{int(dead.stdout)}-abc"
    (stale / "sub").mkdir(parents=True)
    assert Storage.download("s3://models/dir", str(target)) == str(target)
    assert sha_tree(str(target)) == TREE_SHA  # replaced whole: old.txt is gone
    assert os.listdir(tmp_path) == ["model"]


def test_sigterm_during_download_leaves_no_directory(start_server, web, tmp_path):
    cache = tmp_path / "cache"
    server = start_server(SAMPLE, env={"STORAGE_URI": f"{web.url}/slow", "KSERVE_SDK_MODEL_CACHE": str(cache)},
                          wait=False)

    def downloading() -> bool:
        if server.proc.poll() is not None:
            pytest.fail(f"the server exited:\n{server.log()}")
        return cache.exists() and any(p.name.startswith(".slow") for p in cache.iterdir())

    eventually(downloading, timeout=20, message=server.log)
    time.sleep(0.3)
    server.stop()
    assert server.proc.returncode != 0
    assert list(cache.iterdir()) == []


# --- the server: STORAGE_URI at start-up ---------------------------------------------------------------------
def test_iris_sample_serves_the_model_it_downloaded_from_s3(start_server, s3, tmp_path):
    creds = {k: v for k, v in s3.env().items() if k != "AWS_ENDPOINT_URL"}
    # the model with classes 0 and 2 swapped answers 2 for setosa: the sample serves what was downloaded
    swapped = start_server(SAMPLE, "--model_name", "iris", wait=False, env={
        **creds, "AWS_ENDPOINT_URL": s3.endpoint, "STORAGE_URI": "s3://models/iris-swapped/",
        "KSERVE_SDK_MODEL_CACHE": str(tmp_path / "cache")})
    # the real model, KServe's spelling of the endpoint (host:port, S3_USE_HTTPS=0), into --model_dir
    server = start_server(SAMPLE, "--model_name", "iris", "--model_dir", str(tmp_path / "explicit"), wait=False,
                          env={**creds, "S3_ENDPOINT": f"127.0.0.1:{s3.port}", "S3_USE_HTTPS": "0",
                               "STORAGE_URI": "s3://models/iris"})
    for started in (swapped, server):
        assert started._wait_live(), started.log()
    assert post_json(swapped.http_port, "/v1/models/iris:predict", SETOSA)[2] == {"predictions": [2]}
    assert "Model storage: downloaded s3://models/iris-swapped/" in swapped.log()
    (downloaded,) = (tmp_path / "cache").iterdir()
    assert sha_tree(str(downloaded)) == {ARTEFACT: hashlib.sha256(OBJECTS[f"iris-swapped/{ARTEFACT}"]).hexdigest()}
    assert post_json(server.http_port, "/v1/models/iris:predict", SETOSA)[2] == {"predictions": [0]}
    assert sha_tree(str(tmp_path / "explicit")) == {ARTEFACT: hashlib.sha256(IRIS).hexdigest()}
    stop_together(swapped, server)


def test_workers_share_one_download_made_before_the_fork(start_server, web, tmp_path):
    path = f"/f/iris-swapped/{ARTEFACT}"
    before = web.hits[path]
    server = start_server(SAMPLE, "--model_name", "iris", "--workers", "2",
                          env={"STORAGE_URI": web.url + path, "KSERVE_SDK_MODEL_CACHE": str(tmp_path)})
    for _ in range(6):
        assert post_json(server.http_port, "/v1/models/iris:predict", SETOSA)[2] == {"predictions": [2]}, server.log()
    assert web.hits[path] - before == 1
    stop_together(server)


# Starting 21 failing servers as fresh interpreters costs ~1 CPU-second each in imports; instead one
# launcher imports the third-party libraries once and forks a child per case, which runs the sample
# script as ``python model.py`` would (kserve_sdk itself is imported fresh in each child, so its start-up,
# STORAGE_URI download included, runs for real). Cases that need a clean interpreter (an SDK hidden from
# imports) run as real subprocesses.
LAUNCHER = r"""
import json, os, runpy, sys, traceback
for name in ("numpy", "joblib", "tornado.web", "tornado.httpserver", "grpc", "aiohttp",
             "orjson", "yaml", "cloudevents.http", "prometheus_client", "tritonclient.grpc", "boto3",
             "google.cloud.storage", "azure.storage.blob"):
    try:
        __import__(name)
    except ImportError:
        pass
children = {}
for line in sys.stdin:
    case = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        fd = os.open(case["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.clear()
        os.environ.update(case["env"])
        sys.argv = [case["script"], *case["args"]]
        sys.path[0] = os.path.dirname(case["script"])
        code = 0
        try:
            runpy.run_path(case["script"], run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children[pid] = case["name"]
while children:
    pid, status = os.wait()
    print(json.dumps({"name": children.pop(pid), "code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Launched:
    """One failure case's start-up: its exit code and log."""

    def __init__(self, log: str):
        self.log_path, self.code = log, None

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()


def _expect_failure(code: Optional[int], log: str, fragments: List[str], cache: str) -> None:
    assert code == 1, log
    lines = [line for line in log.splitlines() if "Model storage:" in line]
    assert len(lines) == 1, log
    for fragment in fragments:
        assert fragment in lines[0], log
    assert "Traceback" not in log, log
    assert not os.path.exists(cache) or os.listdir(cache) == [], os.listdir(cache)


FAILURES = {
    # name: (scheme fixture, STORAGE_URI, extra env, fragments of the one log line)
    "s3-missing-bucket": ("s3", "s3://no-such-bucket/m", {}, ["s3://no-such-bucket/m", "NoSuchBucket"]),
    "s3-missing-object": ("s3", "s3://models/nothing-here", {},
                          ["s3://models/nothing-here", "no objects found in bucket 'models' under 'nothing-here'"]),
    "s3-access-denied": ("s3", "s3://models/iris", {"user": "nobody"}, ["s3://models/iris", "AccessDenied"]),
    "s3-unreachable": ("s3", "s3://models/iris", {"AWS_ENDPOINT_URL": "http://127.0.0.1:{closed}",
                                                  "AWS_MAX_ATTEMPTS": "1"},
                       ["s3://models/iris", "Could not connect to the endpoint URL"]),
    "s3-corrupt-archive": ("s3", "s3://models/bad/corrupt.tar.gz", {},
                           ["s3://models/bad/corrupt.tar.gz", "corrupt archive corrupt.tar.gz"]),
    "s3-traversal-tar": ("s3", "s3://models/evil/model.tar.gz", {},
                         ["unsafe archive model.tar.gz", "'../../escaped.txt' points outside the model directory"]),
    "gs-missing-bucket": ("gcs", "gs://no-such-bucket/m", {}, ["gs://no-such-bucket/m", "bucket 'no-such-bucket' "
                                                                                      "not found"]),
    "gs-missing-object": ("gcs", "gs://models/nothing-here", {},
                          ["gs://models/nothing-here", "no objects found in bucket 'models'"]),
    "gs-unreachable": ("gcs", "gs://models/iris", {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:{closed}",
                                                   "KSERVE_SDK_STORAGE_RETRY_SECONDS": "1"},
                       ["gs://models/iris", "cannot reach http://127.0.0.1:"]),
    "gs-traversal-link": ("gcs", "gs://models/evil-link/model.tar", {},
                          ["unsafe archive model.tar", "link 'up' -> '../../../etc' points outside"]),
    "azure-missing-container": ("azure", "https://devstoreaccount1.blob.core.windows.net/nocontainer/m", {},
                                ["blob.core.windows.net/nocontainer/m", "ContainerNotFound"]),
    "azure-missing-blob": ("azure", f"{AZURE_URI}/nothing-here", {},
                           ["no blobs found in container 'models' under 'nothing-here'"]),
    "azure-access-denied": ("azure", f"{AZURE_URI}/iris", {"key": "A" * 86 + "=="},
                            [f"{AZURE_URI}/iris", "AuthorizationFailure"]),
    "azure-unreachable": ("azure", f"{AZURE_URI}/iris", {"port": "{closed}", "KSERVE_SDK_STORAGE_RETRIES": "1"},
                          [f"{AZURE_URI}/iris", "cannot reach the blob endpoint"]),
    "http-404": ("web", "{web}/f/nothing-here.bin", {}, ["/f/nothing-here.bin", "HTTP 404 Not Found"]),
    "http-unreachable": ("web", "http://127.0.0.1:{closed}/model.bin", {},
                         ["http://127.0.0.1:", "cannot reach 127.0.0.1:", "Connection refused", "after 3 attempts"]),
    "http-truncated": ("web", "{web}/short", {"KSERVE_SDK_STORAGE_RETRIES": "2"},
                       ["/short", "received 1000 bytes, Content-Length says 100000 (after 2 attempts)"]),
    "http-traversal-zip": ("web", "{web}/f/evil-zip/model.zip", {},
                           ["unsafe archive model.zip", "'../escaped.txt' points outside"]),
    "http-credentials-redacted": ("web", "http://reader:hunter2@127.0.0.1:{webport}/f/none.bin?sig=s3cr3t&v=1", {},
                                  ["http://reader:***@127.0.0.1:", "sig=***&v=1", "HTTP 404"]),
    "missing-extra": ("s3", "s3://models/iris", {"block": "boto3"},
                      ["s3://models/iris", "boto3", "pip install kserve-sdk[s3]"]),
    "unsupported-scheme": (None, "hdfs://namenode/m", {},
                           ["hdfs://namenode/m", "unsupported scheme 'hdfs://'", "s3://, gs://"]),
}


@pytest.fixture(scope="module")
def failed_starts(request, start_server, tmp_path_factory):
    """Every failure case started at once; each must exit 1 on its own. Yields name -> (outcome, cache)."""
    closed = free_port()
    cases, real = {}, {}
    for name, (fixture, uri, extra, _) in FAILURES.items():
        extra = dict(extra)
        store = request.getfixturevalue(fixture) if fixture else None
        env = {}
        if fixture == "s3":
            env = store.env(extra.pop("user", "admin"))
        elif fixture == "gcs":
            env = dict(store.env)
        elif fixture == "azure":
            port = closed if extra.pop("port", None) == "{closed}" else store.port
            env = {"AZURE_STORAGE_CONNECTION_STRING": azure_connection_string(port, extra.pop("key", AZURITE_KEY))}
        elif fixture == "web":
            uri = uri.replace("{web}", store.url).replace("{webport}", str(store.port))
        block = extra.pop("block", None)
        env.update({k: v.replace("{closed}", str(closed)) for k, v in extra.items()})
        cache = str(tmp_path_factory.mktemp(f"cache-{name}"))
        env.update({"STORAGE_URI": uri.replace("{closed}", str(closed)), "KSERVE_SDK_MODEL_CACHE": cache})
        if block:  # a real interpreter in which the SDK cannot be imported
            blocker = tmp_path_factory.mktemp("blocker")
            (blocker / block).mkdir()
            (blocker / block / "__init__.py").write_text(f"raise ImportError('blocked: {block}')\n")
            env["PYTHONPATH"] = f"{blocker}{os.pathsep}{ROOT}"
            real[name] = (start_server(SAMPLE, "--model_name", "iris", env=env, wait=False), cache)
        else:
            cases[name] = (env, cache)
    logs = tmp_path_factory.mktemp("failure-logs")
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": ROOT})
    outcomes = {}
    try:
        for name, (env, _cache) in cases.items():
            base = {k: v for k, v in os.environ.items() if k not in STORAGE_ENV}
            outcomes[name] = Launched(str(logs / f"{name}.log"))
            launcher.stdin.write(json.dumps({
                "name": name, "log": outcomes[name].log_path, "script": os.path.join(ROOT, SAMPLE),
                "args": ["--model_name", "iris", "--http_port", str(free_port()), "--grpc_port", str(free_port())],
                "env": {**base, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", **env}}) + "\n")
        launcher.stdin.close()
        timer = threading.Timer(60, lambda: os.killpg(launcher.pid, signal.SIGKILL))
        timer.start()
        for line in launcher.stdout:
            result = json.loads(line)
            outcomes[result["name"]].code = result["code"]
        timer.cancel()
        launcher.wait(timeout=10)
        for name, (server, _cache) in real.items():
            server.wait_exit(timeout=45)
            outcome = Launched(server.log_file.name)
            outcome.code = server.proc.returncode
            outcomes[name] = outcome
        yield {name: (outcomes[name], cases.get(name, real.get(name))[1]) for name in FAILURES}
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


@pytest.mark.parametrize("name", list(FAILURES))
def test_storage_failure_stops_start_up_with_one_line(name, failed_starts):
    outcome, cache = failed_starts[name]
    log = outcome.log()
    _expect_failure(outcome.code, log, FAILURES[name][3], cache)
    if name == "http-credentials-redacted":
        assert "hunter2" not in log and "s3cr3t" not in log
