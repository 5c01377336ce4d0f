"""KServe 0.21's storage, read without kserve-storage: ``hf://`` against a loopback stand-in of the Hugging Face
Hub's file API, git URLs cloned from a loopback server speaking git's dumb HTTP protocol, several storage URIs for
one model (``STORAGE_URIS``), the variables KServe's storage reads (the S3 ones against moto_server, the Azure ones
against Azurite, the CA bundle ones against loopback HTTPS with a throwaway CA), and progress lines while a slow
download runs.

Every stand-in is a threaded HTTP(S) server on 127.0.0.1 written here; moto_server and Azurite are processes in
their own session, stopped by PID.
"""
import base64
import hashlib
import json
import logging
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import types
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import unquote, urlsplit

import pytest

from certs import ThrowawayCA
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
SETOSA = {"instances": [[5.1, 3.5, 1.4, 0.2]]}
GIT = shutil.which("git")
AZURITE_ACCOUNT = "devstoreaccount1"  # Azurite's documented development account and key (public)
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# What a test must not inherit from the machine it runs on.
STORAGE_ENV = ("STORAGE_URI", "STORAGE_URIS", "STORAGE_ALLOW_PATTERNS", "STORAGE_IGNORE_PATTERNS", "STORAGE_CONFIG",
               "STORAGE_OVERRIDE_CONFIG", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
               "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_CA_BUNDLE",
               "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "S3_ENDPOINT", "S3_USE_HTTPS", "S3_VERIFY_SSL",
               "S3_CONNECT_TIMEOUT", "S3_READ_TIMEOUT", "S3_MAX_ATTEMPTS", "S3_USER_VIRTUAL_BUCKET",
               "S3_USE_ACCELERATE", "S3_MAX_FILE_CONCURRENCY", "awsAnonymousCredential",
               "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCESS_KEY", "AZURE_MAX_FILE_CONCURRENCY",
               "AZURE_MAX_CHUNK_CONCURRENCY",
               "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CA_BUNDLE_CONFIGMAP_NAME",
               "CA_BUNDLE_VOLUME_MOUNT_POINT", "GIT_USERNAME", "GIT_PASSWORD", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
               "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "KSERVE_SDK_MODEL_CACHE",
               "KSERVE_SDK_STORAGE_PROGRESS_SECONDS", "KSERVE_SDK_STORAGE_CONCURRENCY")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in STORAGE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # nothing may be written there
    monkeypatch.setenv("KSERVE_SDK_STORAGE_RETRIES", "1")
    return monkeypatch


def tree(root: str, skip_git: bool = True) -> Dict[str, bytes]:
    """Every file below ``root`` (links followed) by ``/``-separated relative path, ``.git`` left out."""
    out = {}
    for folder, dirs, names in os.walk(root, followlinks=True):
        if skip_git and ".git" in dirs:
            dirs.remove(".git")
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = f.read()
    return out


# --- loopback servers --------------------------------------------------------------------------------------------
class Loopback:
    """A threaded HTTP server on 127.0.0.1 answering with ``handler``; HTTPS when given a CA to issue its
    certificate. ``requests`` records (method, path, Authorization header) of every request."""

    def __init__(self, handler: type, ca: Optional[ThrowawayCA] = None, folder: Optional[str] = None):
        self.requests: List[tuple] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.owner = self  # handlers reach the recorder and their settings through it
        self.scheme = "http"
        if ca is not None:
            cert, key = ca.issue(serial=int(time.time() * 1000) % 1_000_000 + 2)
            for name, data in (("server.pem", cert), ("server.key", key)):
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(data)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(os.path.join(folder, "server.pem"), os.path.join(folder, "server.key"))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.port = self.server.server_address[1]
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


class Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def record(self) -> None:
        self.server.owner.requests.append((self.command, self.path, self.headers.get("Authorization")))

    def answer(self, status: int, body: bytes, content_type: str = "application/octet-stream",
               headers: Optional[Dict[str, str]] = None, send_body: bool = True) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class Files(Quiet):
    """GET /<name> answers FILES[name] (or LATER[name], what a test adds)."""

    def do_GET(self) -> None:
        self.record()
        name = self.path.lstrip("/")
        data = FILES.get(name, LATER.get(name))
        self.answer(200, data) if data is not None else self.answer(404, b"not found", "text/plain")


rng = random.Random(36)
FILES = {"weights.bin": rng.randbytes(40_000), "notes.txt": b"a note beside the model\n"}
LATER: Dict[str, bytes] = {}


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> ThrowawayCA:
    return ThrowawayCA(str(tmp_path_factory.mktemp("ca")))


@pytest.fixture(scope="module")
def web():
    server = Loopback(Files)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def secure_web(ca, tmp_path_factory):
    server = Loopback(Files, ca, str(tmp_path_factory.mktemp("tls")))
    yield server
    server.stop()


# --- the Hugging Face Hub: a stand-in of its file API ---------------------------------------------------------------
HUB_REVISIONS = {  # org/tiny's files at its default branch and at tag "v1"
    "main": {"config.json": b'{"revision": "main"}', "model.safetensors": rng.randbytes(60_000),
             "tokenizer/vocab.txt": b"a\nb\nc\n"},
    "v1": {"config.json": b'{"revision": "v1"}', "pytorch_model.bin": rng.randbytes(20_000), "README.md": b"# v1\n"},
}
HUB_COMMITS = {name: hashlib.sha1(name.encode()).hexdigest() for name in HUB_REVISIONS}
HUB_TOKEN = "hf_test_token_36"


class Hub(Quiet):
    """What huggingface_hub's snapshot_download asks: the revision's model info
    (``/api/models/<repo>[/revision/<rev>]``, with the files' sizes when asked ``blobs=true``), its file tree
    (``/api/models/<repo>/tree/<rev>``), then HEAD and GET of each file (``/<repo>/resolve/<commit>/<path>``) with
    the headers it reads (X-Repo-Commit, ETag, Content-Length). ``org/private`` holds the same files and answers
    only ``Authorization: Bearer HUB_TOKEN``."""

    def do_HEAD(self) -> None:
        self.serve(send_body=False)

    def do_GET(self) -> None:
        self.serve(send_body=True)

    def revision(self, text: str) -> Optional[str]:
        text = unquote(text)
        return next((name for name, commit in HUB_COMMITS.items() if text in (name, commit)), None)

    def json(self, status: int, doc, error_code: str = "") -> None:
        self.answer(status, json.dumps(doc).encode(), "application/json", {"X-Error-Code": error_code} if error_code
                    else None, self.command != "HEAD")

    def serve(self, send_body: bool) -> None:
        self.record()
        parts = urlsplit(self.path).path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) == 4:  # the model's info at its default branch
            parts += ["revision", "main"]
        api = parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree")
        resolve = len(parts) >= 5 and parts[2] == "resolve"
        if not (api or resolve):
            return self.json(404, {"error": "not found"})
        repo = "/".join(parts[2:4] if api else parts[0:2])
        if repo not in ("org/tiny", "org/private"):
            return self.json(404, {"error": "Repository not found"}, "RepoNotFound")
        if repo == "org/private" and self.headers.get("Authorization") != f"Bearer {HUB_TOKEN}":
            return self.json(401, {"error": "Invalid credentials"}, "RepoNotFound")
        name = self.revision(parts[5] if api else parts[3])
        if name is None:
            return self.json(404, {"error": "Invalid rev id"}, "RevisionNotFound")
        files = HUB_REVISIONS[name]
        if api and parts[4] == "revision":
            sized = "blobs=true" in self.path.lower()  # files_metadata=True asks for the sizes
            return self.json(200, {"id": repo, "sha": HUB_COMMITS[name], "private": repo == "org/private",
                                   "siblings": [{"rfilename": path, **({"size": len(data)} if sized else {})}
                                                for path, data in files.items()]})
        if api:
            return self.json(200, [{"type": "file", "path": path, "size": len(data),
                                    "oid": hashlib.sha1(data).hexdigest()} for path, data in files.items()])
        data = files.get(unquote("/".join(parts[4:])))
        if data is None:
            return self.json(404, {"error": "Entry not found"}, "EntryNotFound")
        self.answer(200, data, headers={"X-Repo-Commit": HUB_COMMITS[name],
                                        "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, send_body=send_body)


@pytest.fixture(scope="module")
def hub():
    server = Loopback(Hub)
    yield server
    server.stop()


def test_hf_downloads_the_default_branch_or_the_revision_asked(hub, clean_env, tmp_path):
    clean_env.setenv("HF_ENDPOINT", hub.url)
    out = Storage.download("hf://org/tiny", str(tmp_path / "main"))
    assert tree(out) == HUB_REVISIONS["main"]  # the files themselves: no .cache bookkeeping, no links
    assert not os.path.islink(os.path.join(out, "config.json")) and not (tmp_path / "hf-home").exists()
    asked = len(hub.requests)
    out = Storage.download("hf://org/tiny:v1", str(tmp_path / "v1"))
    assert tree(out) == HUB_REVISIONS["v1"]
    paths = [path for _, path, _ in hub.requests[asked:]]
    assert "/api/models/org/tiny/revision/v1" in paths
    assert all(f"/resolve/{HUB_COMMITS['v1']}/" in path for path in paths if "/resolve/" in path)
    assert sorted(os.listdir(tmp_path)) == ["main", "v1"]  # no partial directory left


def test_hf_allow_and_ignore_patterns_from_arguments_and_environment(hub, clean_env, tmp_path):
    clean_env.setenv("HF_ENDPOINT", hub.url)
    out = Storage.download("hf://org/tiny", str(tmp_path / "a"), allow_patterns=["*.json", "tokenizer/*"],
                           ignore_patterns="tokenizer/*")
    assert tree(out) == {"config.json": HUB_REVISIONS["main"]["config.json"]}
    clean_env.setenv("STORAGE_ALLOW_PATTERNS", '["*.safetensors", "*.txt"]')  # KServe's JSON form
    clean_env.setenv("STORAGE_IGNORE_PATTERNS", "tokenizer/*, *.md")  # and its comma-separated one
    assert set(tree(Storage.download("hf://org/tiny", str(tmp_path / "b")))) == {"model.safetensors"}
    asked = len(hub.requests)
    with pytest.raises(StorageError, match=r"cannot download hf://org/tiny:v1: no files in org/tiny at revision "
                                           r"'v1' matching the allow/ignore patterns"):
        Storage.download("hf://org/tiny:v1", str(tmp_path / "c"))
    assert not any("/resolve/" in path for _, path, _ in hub.requests[asked:])  # no file fetched to be dropped
    assert not (tmp_path / "c").exists()


def test_hf_token_is_sent_and_a_private_model_needs_it(hub, clean_env, tmp_path):
    clean_env.setenv("HF_ENDPOINT", hub.url + "/")
    with pytest.raises(StorageError) as refused:
        Storage.download("hf://org/private", str(tmp_path / "m"))
    assert str(refused.value) == (f"cannot download hf://org/private: org/private not found on {hub.url}, or not "
                                  "readable (private models need HF_TOKEN; HTTP 401)")
    clean_env.setenv("HF_TOKEN", HUB_TOKEN)
    asked = len(hub.requests)
    assert tree(Storage.download("hf://org/private", str(tmp_path / "m"))) == HUB_REVISIONS["main"]
    sent = [auth for _, path, auth in hub.requests[asked:] if "org/private" in path]
    assert len(sent) >= 4 and set(sent) == {f"Bearer {HUB_TOKEN}"}
    clean_env.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(StorageError, match=r"not readable \(HF_TOKEN was refused; HTTP 401\)") as wrong:
        Storage.download("hf://org/private", str(tmp_path / "other"))
    assert "hf_wrong" not in str(wrong.value)


@pytest.mark.parametrize("uri,message", [
    ("hf://org/tiny:nope", "revision 'nope' not found in org/tiny on {hub}"),
    ("hf://org/absent", "org/absent not found on {hub}, or not readable (private models need HF_TOKEN; HTTP 404)"),
])
def test_hf_unknown_revision_or_repository_is_said(uri, message, hub, clean_env, tmp_path):
    clean_env.setenv("HF_ENDPOINT", hub.url)
    with pytest.raises(StorageError) as e:
        Storage.download(uri, str(tmp_path / "m"))
    assert str(e.value) == f"cannot download {uri}: " + message.format(hub=hub.url)
    assert os.listdir(tmp_path) == []  # no model directory, no partial one, nothing in HF_HOME


def test_hf_over_https_trusts_the_ca_bundle_variables(ca, clean_env, tmp_path):
    secure = Loopback(Hub, ca, str(tmp_path))
    try:
        clean_env.setenv("HF_ENDPOINT", secure.url)
        with pytest.raises(StorageError, match=r"cannot reach https://127\.0\.0\.1:\d+ for org/tiny: .*CERTIFICATE"):
            Storage.download("hf://org/tiny", str(tmp_path / "untrusted"))
        clean_env.setenv("REQUESTS_CA_BUNDLE", ca.path)  # huggingface_hub 1.x+ reads only SSL_CERT_FILE itself
        assert tree(Storage.download("hf://org/tiny", str(tmp_path / "m"))) == HUB_REVISIONS["main"]
        assert "SSL_CERT_FILE" not in os.environ  # set for the download only
    finally:
        secure.stop()


def test_hf_without_huggingface_hub_names_the_extra(clean_env, tmp_path):
    blocker = tmp_path / "blocker" / "huggingface_hub"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    code = ("import sys\nfrom kserve_sdk.storage import Storage, StorageError\ntry:\n"
            "    Storage.download('hf://org/tiny', sys.argv[1])\nexcept StorageError as e:\n    print(e)\n")
    path = f"{blocker.parent}{os.pathsep}{ROOT}"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": path})
    assert done.stdout.strip() == ("cannot download hf://org/tiny: hf URIs need the huggingface_hub package, which "
                                   "is not installed (blocked for this test); run: pip install kserve-sdk[hf]"), \
        done.stderr
    assert not (tmp_path / "m").exists()


# --- git: a bare repository served over git's dumb HTTP protocol ------------------------------------------------------
REPO_FILES = {"config.json": b'{"from": "git"}', "weights/model.bin": rng.randbytes(30_000), "README.md": b"# repo\n"}
GIT_USER, GIT_SECRET = "alice", "s3cret-pw-36"


def run_git(*args: str, cwd: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": cwd, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run([GIT, *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


class GitFiles(SimpleHTTPRequestHandler):
    """The served folder as static files (git's dumb protocol needs nothing else); paths below /private/ ask for
    Basic authentication as alice."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.owner.requests.append((self.command, self.path, self.headers.get("Authorization")))
        wanted = "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_SECRET}".encode()).decode()
        if self.path.startswith("/private/") and self.headers.get("Authorization") != wanted:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture(scope="module")
def git_root(tmp_path_factory) -> str:
    """A folder holding models/tiny.git and private/tiny.git, bare repositories of REPO_FILES ready for dumb HTTP."""
    if GIT is None:
        pytest.fail("the git command is needed (hack/test.sh installs it)") if IN_CI else pytest.skip("no git")
    work = str(tmp_path_factory.mktemp("git-source"))
    for name, data in REPO_FILES.items():
        os.makedirs(os.path.dirname(os.path.join(work, name)) or work, exist_ok=True)
        with open(os.path.join(work, name), "wb") as f:
            f.write(data)
    run_git("init", "-q", "-b", "main", cwd=work)
    run_git("add", ".", cwd=work)
    run_git("commit", "-q", "-m", "the model", cwd=work)
    served = str(tmp_path_factory.mktemp("git-served"))
    for bare in ("models/tiny.git", "private/tiny.git"):
        run_git("clone", "-q", "--bare", work, os.path.join(served, bare), cwd=served)
        run_git("update-server-info", cwd=os.path.join(served, bare))
    return served


@pytest.fixture(scope="module")
def git_web(git_root):
    server = Loopback(partial(GitFiles, directory=git_root))
    yield server
    server.stop()


@pytest.fixture
def git_argv(tmp_path, clean_env) -> str:
    """A ``git`` first on PATH that writes its arguments to a file, then runs the real one: what anyone listing
    processes would see."""
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "git-argv.log"
    (folder / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{GIT}" "$@"\n')
    (folder / "git").chmod(0o755)
    clean_env.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return str(log)


def test_git_url_is_cloned_from_a_dumb_http_server(git_web, git_argv, clean_env, tmp_path):
    out = Storage.download(f"{git_web.url}/models/tiny.git", str(tmp_path / "m"))
    assert tree(out) == REPO_FILES and os.path.isdir(os.path.join(out, ".git"))  # KServe keeps .git too
    with open(git_argv) as f:
        clones = [line for line in f.read().splitlines() if " clone " in line]
    # one commit deep first; git's dumb protocol refuses that, so the whole history
    assert len(clones) == 2 and "--depth 1" in clones[0] and "--depth" not in clones[1], clones
    assert sorted(os.listdir(tmp_path)) == ["bin", "git-argv.log", "m"]


def test_git_patterns_keep_the_files_asked(git_web, clean_env, tmp_path):
    clean_env.setenv("STORAGE_ALLOW_PATTERNS", "*.json,weights/*")
    clean_env.setenv("STORAGE_IGNORE_PATTERNS", '["*.bin"]')
    out = Storage.download(f"{git_web.url}/models/tiny.git/", str(tmp_path / "m"))
    assert tree(out) == {"config.json": REPO_FILES["config.json"]}
    assert sorted(os.listdir(out)) == [".git", "config.json"]  # the emptied folder is gone


def test_git_credentials_go_by_a_helper_never_the_command_line(git_web, git_argv, clean_env, tmp_path):
    private = f"{git_web.url}/private/tiny.git"
    basic = "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_SECRET}".encode()).decode()
    clean_env.setenv("GIT_USERNAME", GIT_USER)
    clean_env.setenv("GIT_PASSWORD", GIT_SECRET)
    asked = len(git_web.requests)
    assert tree(Storage.download(private, str(tmp_path / "env"))) == REPO_FILES
    assert basic in {auth for _, _, auth in git_web.requests[asked:]}
    # KServe's other spelling: the user name in the URL, the password from GIT_PASSWORD
    clean_env.delenv("GIT_USERNAME")
    at = private.replace("://", f"://{GIT_USER}@")
    assert tree(Storage.download(at, str(tmp_path / "url-user"))) == REPO_FILES
    # a password in the URL is used when GIT_PASSWORD is not set, and shown nowhere
    clean_env.delenv("GIT_PASSWORD")
    assert tree(Storage.download(private.replace("://", f"://{GIT_USER}:{GIT_SECRET}@"),
                                 str(tmp_path / "url-password"))) == REPO_FILES
    with open(git_argv) as f:
        argv = f.read()
    assert argv.count(" clone ") >= 3 and GIT_SECRET not in argv
    assert not any(GIT_SECRET in path for _, path, _ in git_web.requests)


@pytest.mark.parametrize("user,password,message", [
    (None, None, "git clone failed: fatal: could not read Username for '{base}': terminal prompts disabled"),
    (GIT_USER, "wrong-" + GIT_SECRET, "git clone failed: fatal: Authentication failed for '{base}/private/tiny.git/'"),
])
def test_git_refused_credentials_are_said_without_the_password(user, password, message, git_web, clean_env, tmp_path):
    if user:
        clean_env.setenv("GIT_USERNAME", user)
        clean_env.setenv("GIT_PASSWORD", password)
    uri = f"{git_web.url}/private/tiny.git"
    with pytest.raises(StorageError) as e:
        Storage.download(uri, str(tmp_path / "m"))
    assert str(e.value) == f"cannot download {uri}: " + message.format(base=git_web.url)
    assert GIT_SECRET not in str(e.value) and not (tmp_path / "m").exists()


def test_git_over_https_trusts_the_ca_bundle_variables(git_root, ca, clean_env, tmp_path):
    secure = Loopback(partial(GitFiles, directory=git_root), ca, str(tmp_path))
    try:
        uri = f"{secure.url}/models/tiny.git"
        with pytest.raises(StorageError, match=rf"git clone failed: fatal: unable to access '{re.escape(uri)}/': "):
            Storage.download(uri, str(tmp_path / "untrusted"))
        for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
            clean_env.setenv(name, ca.path)
            assert tree(Storage.download(uri, str(tmp_path / name))) == REPO_FILES, name
            clean_env.delenv(name)
    finally:
        secure.stop()


# --- the CA bundle variables, over plain HTTPS ------------------------------------------------------------------------
def test_https_download_trusts_each_ca_bundle_variable(secure_web, ca, clean_env, tmp_path):
    uri = f"{secure_web.url}/weights.bin"
    with pytest.raises(StorageError) as untrusted:
        Storage.download(uri, str(tmp_path / "untrusted"))
    assert str(untrusted.value) == (
        f"cannot download {uri}: cannot verify the TLS certificate of 127.0.0.1:{secure_web.port}: unable to get local "
        "issuer certificate (a private CA: REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE or SSL_CERT_FILE names its bundle)")
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        clean_env.setenv(name, ca.path)
        assert tree(Storage.download(uri, str(tmp_path / name))) == {"weights.bin": FILES["weights.bin"]}, name
        clean_env.delenv(name)
    # requests' order: REQUESTS_CA_BUNDLE first, so a wrong one there is not rescued by the others
    clean_env.setenv("REQUESTS_CA_BUNDLE", certifi_or_system_bundle())
    clean_env.setenv("SSL_CERT_FILE", ca.path)
    with pytest.raises(StorageError, match="cannot verify the TLS certificate"):
        Storage.download(uri, str(tmp_path / "wrong-first"))


def certifi_or_system_bundle() -> str:
    paths = ssl.get_default_verify_paths()
    if paths.openssl_cafile and os.path.isfile(paths.openssl_cafile):
        return paths.openssl_cafile
    import certifi
    return certifi.where()


def test_kserve_cluster_ca_bundle_is_added_to_the_default_trust(secure_web, ca, clean_env, tmp_path, caplog):
    mount = tmp_path / "custom-certs"
    mount.mkdir()
    shutil.copy(ca.path, mount / "cabundle.crt")
    clean_env.setenv("CA_BUNDLE_CONFIGMAP_NAME", "odh-trusted-ca-bundle")
    clean_env.setenv("CA_BUNDLE_VOLUME_MOUNT_POINT", str(mount))
    uri = f"{secure_web.url}/notes.txt"
    assert tree(Storage.download(uri, str(tmp_path / "m"))) == {"notes.txt": FILES["notes.txt"]}
    from kserve_sdk.storage import settings
    combined = settings.ca_bundle()
    with open(combined, "rb") as f, open(ca.path, "rb") as mine:
        held = f.read()
        assert mine.read().strip() in held and held.count(b"BEGIN CERTIFICATE") > 10  # the system's CAs kept
    # a bundle named but not mounted: a warning, and the default trust store
    clean_env.setenv("CA_BUNDLE_VOLUME_MOUNT_POINT", str(tmp_path / "not-mounted"))
    with caplog.at_level(logging.WARNING, logger="kserve"):
        with pytest.raises(StorageError, match="cannot verify the TLS certificate"):
            Storage.download(uri, str(tmp_path / "n"))
    assert f"CA_BUNDLE_CONFIGMAP_NAME is set but {tmp_path / 'not-mounted' / 'cabundle.crt'} does not exist; " \
           "using the default trust store" in caplog.text


# --- several URIs for one model (STORAGE_URIS), Storage.download_files, progress lines --------------------------------
class Trickle(Quiet):
    """GET /slow sends SLOW_BYTES over about 4 s with its Content-Length; /slow-unsized half of it over about 2 s
    without one (the end of the connection ends the body)."""

    def do_GET(self) -> None:
        self.record()
        sized = self.path == "/slow"
        if not sized:
            self.protocol_version = "HTTP/1.0"
        chunks = 80 if sized else 40
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if sized:
            self.send_header("Content-Length", str(chunks * 1000))
        self.end_headers()
        for _ in range(chunks):
            self.wfile.write(b"s" * 1000)
            self.wfile.flush()
            time.sleep(0.05)
        self.close_connection = True


SLOW_BYTES = 80_000


@pytest.fixture(scope="module")
def trickle():
    server = Loopback(Trickle)
    yield server
    server.stop()


def test_a_slow_download_says_how_far_it_is_a_quick_one_says_nothing(trickle, web, clean_env, tmp_path, caplog):
    clean_env.setenv("KSERVE_SDK_STORAGE_PROGRESS_SECONDS", "1")
    with caplog.at_level(logging.INFO, logger="kserve"):
        Storage.download(f"{trickle.url}/slow", str(tmp_path / "sized"))
        Storage.download(f"{trickle.url}/slow-unsized", str(tmp_path / "unsized"))
        Storage.download(f"{web.url}/notes.txt", str(tmp_path / "quick"))
    lines = [record.getMessage() for record in caplog.records if "downloading" in record.getMessage()]
    sized = [line for line in lines if "/slow:" in line]
    unsized = [line for line in lines if "/slow-unsized:" in line]
    assert len(sized) >= 2 and len(unsized) >= 1 and len(lines) == len(sized) + len(unsized), lines
    pattern = rf"Model storage: downloading {re.escape(trickle.url)}/slow: ([\d.]+) KiB of 78\.1 KiB \((\d+)%\), " \
              r"[\d.]+ (B|KiB)/s"
    done = [re.fullmatch(pattern, line) for line in sized]
    assert all(done), sized
    assert [float(m.group(1)) for m in done] == sorted(float(m.group(1)) for m in done)  # it only grows
    assert all(re.fullmatch(rf"Model storage: downloading {re.escape(trickle.url)}/slow-unsized: [\d.]+ KiB so far, "
                            r"[\d.]+ (B|KiB)/s", line) for line in unsized), unsized
    assert tree(str(tmp_path / "sized")) == {"slow": b"s" * SLOW_BYTES}


def test_several_storage_uris_make_one_model_directory(hub, git_web, web, clean_env, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    (local / "extra.txt").write_bytes(b"from a local folder")
    clean_env.setenv("HF_ENDPOINT", hub.url)
    clean_env.setenv("STORAGE_URIS", json.dumps([
        {"uri": "hf://org/tiny", "mountPath": "/mnt/models"},
        f"{web.url}/notes.txt",  # a plain URI: /mnt/models, the folder the first one fills too
        {"uri": f"{git_web.url}/models/tiny.git", "mountPath": "/mnt/models/adapter"},
        {"uri": f"file://{local}", "mountPath": "/mnt/models/adapter/local/"},
    ]))
    expected = {**HUB_REVISIONS["main"], "notes.txt": FILES["notes.txt"],
                "adapter/local/extra.txt": b"from a local folder",
                **{f"adapter/{name}": data for name, data in REPO_FILES.items()}}
    out = resolve_model_dir(str(tmp_path / "model"))
    assert out == str(tmp_path / "model") and tree(out) == expected
    assert os.path.isdir(os.path.join(out, "adapter", ".git"))
    clean_env.setenv("KSERVE_SDK_MODEL_CACHE", str(tmp_path / "cache"))
    cached = resolve_model_dir(None)  # without --model_dir: the model cache, named after the common parent
    assert os.path.dirname(cached) == str(tmp_path / "cache") and os.path.basename(cached).startswith("models-")
    assert tree(cached) == expected and os.listdir(tmp_path / "cache") == [os.path.basename(cached)]


def test_a_failing_uri_of_several_leaves_the_model_directory_as_it_was(web, clean_env, tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_bytes(b"previous model")
    clean_env.setenv("STORAGE_URIS", json.dumps([f"{web.url}/notes.txt",
                                                 {"uri": f"{web.url}/absent.bin", "mountPath": "/mnt/models/x"}]))
    with pytest.raises(StorageError) as e:
        resolve_model_dir(str(target))
    assert str(e.value) == f"cannot download {web.url}/absent.bin: HTTP 404 Not Found"
    assert os.listdir(tmp_path) == ["model"] and os.listdir(target) == ["old.txt"]


def test_download_files_takes_kserve_arguments_and_merges_shared_folders(web, clean_env, tmp_path):
    local = tmp_path / "local"
    (local / "sub").mkdir(parents=True)
    (local / "sub" / "a.txt").write_bytes(b"a")
    shared = str(tmp_path / "out")
    got = Storage.download_files(source_uris=[f"{web.url}/weights.bin", f"{web.url}/notes.txt", str(local)],
                                 out_dirs=[shared, shared, os.path.join(shared, "more")], allow_patterns=None,
                                 ignore_patterns=["*.md"])
    assert got == [shared, shared, os.path.join(shared, "more")]
    assert tree(shared) == {**FILES, "more/sub/a.txt": b"a"}
    assert sorted(os.listdir(tmp_path)) == ["local", "out"]  # no folder left from the merges
    with pytest.raises(ValueError, match="download_files: 2 URIs but 1 output directories"):
        Storage.download_files([str(local), str(local)], [shared])


def test_server_starts_on_several_uris_and_logs_the_slow_one(start_server, web, trickle, git_web, tmp_path):
    LATER[f"iris/{ARTEFACT}"] = swapped_iris_model()
    cache = tmp_path / "cache"
    server = start_server(SAMPLE, "--model_name", "iris", env={
        "STORAGE_URIS": json.dumps([
            {"uri": f"{web.url}/iris/{ARTEFACT}", "mountPath": "/mnt/models"},
            {"uri": f"{trickle.url}/slow", "mountPath": "/mnt/models/slow"},
            {"uri": f"{git_web.url}/models/tiny.git", "mountPath": "/mnt/models/extra"}]),
        "KSERVE_SDK_MODEL_CACHE": str(cache), "KSERVE_SDK_STORAGE_PROGRESS_SECONDS": "0.5"})
    assert post_json(server.http_port, "/v1/models/iris:predict", SETOSA)[2] == {"predictions": [2]}, server.log()
    log = server.log()
    assert re.search(rf"Model storage: downloading {re.escape(trickle.url)}/slow: [\d.]+ KiB of 78\.1 KiB", log), log
    (model_dir,) = cache.iterdir()
    assert f"Model storage: downloaded {web.url}/iris/{ARTEFACT}, {trickle.url}/slow, {git_web.url}/models/tiny.git " \
           f"to {model_dir} (" in log
    assert set(tree(str(model_dir))) == {ARTEFACT, "slow/slow", *(f"extra/{name}" for name in REPO_FILES)}
    server.stop()


# --- S3: moto_server, a TLS front for it, and stand-ins that fail -----------------------------------------------------
S3_OBJECTS = {"m/config.json": b'{"from": "s3"}', "m/weights.bin": rng.randbytes(20_000), "m/sub/extra.md": b"# x\n"}


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    """moto_server with bucket "models" holding S3_OBJECTS; after set-up IAM decides: "admin" may do anything,
    "nobody" nothing."""
    import boto3
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        eventually(lambda: proc.poll() is not None or listens(port), 60, message=lambda: log.read_text())
        assert proc.poll() is None, log.read_text()
        endpoint = f"http://127.0.0.1:{port}"
        common = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
                  "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **common)
        keys = {}
        for user in ("admin", "nobody"):
            iam.create_user(UserName=user)
            made = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (made["AccessKeyId"], made["SecretAccessKey"])
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        s3 = boto3.client("s3", **common)
        s3.create_bucket(Bucket="models")
        for key, data in S3_OBJECTS.items():
            s3.put_object(Bucket="models", Key=key, Body=data)
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
                                                      headers={"Content-Type": "text/plain"}), timeout=10).close()
        yield types.SimpleNamespace(endpoint=endpoint, port=port, keys=keys)
    finally:
        stop_process_group(proc)


def s3_config(moto, user: str = "admin", **extra) -> str:
    """A KServe STORAGE_CONFIG entry of type s3 for moto, as user ``user``."""
    key, secret = moto.keys[user]
    return json.dumps({"type": "s3", "endpoint_url": moto.endpoint, "region": "us-east-1", "bucket": "models",
                       "access_key_id": key, "secret_access_key": secret, **extra})


S3_TREE = {name[2:]: data for name, data in S3_OBJECTS.items()}


def test_storage_config_and_its_override_supply_the_s3_settings(moto, clean_env, tmp_path):
    clean_env.setenv("STORAGE_CONFIG", s3_config(moto))
    assert tree(Storage.download("s3://models/m", str(tmp_path / "a"))) == S3_TREE
    assert "AWS_ACCESS_KEY_ID" not in os.environ  # read, not written into the environment
    # the entry wins over the environment, as KServe writes it over the environment
    clean_env.setenv("AWS_ACCESS_KEY_ID", moto.keys["nobody"][0])
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", moto.keys["nobody"][1])
    clean_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert tree(Storage.download("s3://models/m", str(tmp_path / "b"))) == S3_TREE
    clean_env.setenv("STORAGE_CONFIG", s3_config(moto, "nobody"))
    with pytest.raises(StorageError, match=r"^cannot download s3://models/m: AccessDenied"):
        Storage.download("s3://models/m", str(tmp_path / "c"))
    admin_key, admin_secret = moto.keys["admin"]
    clean_env.setenv("STORAGE_OVERRIDE_CONFIG", json.dumps({"access_key_id": admin_key,
                                                            "secret_access_key": admin_secret}))
    assert tree(Storage.download("s3://models/m", str(tmp_path / "c"))) == S3_TREE


def test_storage_patterns_from_the_environment_select_s3_objects(moto, clean_env, tmp_path):
    clean_env.setenv("STORAGE_CONFIG", s3_config(moto))
    clean_env.setenv("STORAGE_ALLOW_PATTERNS", '["*.json", "sub/*"]')
    clean_env.setenv("STORAGE_IGNORE_PATTERNS", "*.md")
    assert tree(Storage.download("s3://models/m", str(tmp_path / "a"))) == {"config.json": S3_TREE["config.json"]}
    # patterns given by the caller win over the environment's
    assert set(tree(Storage.download("s3://models/m", str(tmp_path / "b"), allow_patterns=["*.md"],
                                     ignore_patterns=[]))) == {"sub/extra.md"}


class TLSFront:
    """TLS on 127.0.0.1, with a certificate of the throwaway CA, in front of a plain TCP port."""

    def __init__(self, backend_port: int, ca: ThrowawayCA, folder: str):
        cert, key = ca.issue(serial=77)
        for name, data in (("front.pem", cert), ("front.key", key)):
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(os.path.join(folder, "front.pem"), os.path.join(folder, "front.key"))
        self.backend_port = backend_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(raw,), daemon=True).start()

    def _relay(self, raw: socket.socket) -> None:
        import select
        raw.settimeout(10)
        try:
            tls = self.context.wrap_socket(raw, server_side=True)
        except OSError:  # the client refused the certificate
            raw.close()
            return
        backend = socket.create_connection(("127.0.0.1", self.backend_port), timeout=10)
        pairs = {tls: backend, backend: tls}
        try:
            while True:
                ready = [tls] if tls.pending() else select.select(list(pairs), [], [], 30)[0]
                if not ready:
                    return
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    pairs[source].sendall(data)
        except OSError:
            return
        finally:
            tls.close()
            backend.close()

    def stop(self) -> None:
        self.listener.close()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # S3_VERIFY_SSL=0 is asked
def test_s3_tls_settings_each_take_effect(moto, ca, clean_env, tmp_path):
    front = TLSFront(moto.port, ca, str(tmp_path))
    try:
        base = {"AWS_ENDPOINT_URL": f"https://127.0.0.1:{front.port}", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": moto.keys["admin"][0], "AWS_SECRET_ACCESS_KEY": moto.keys["admin"][1],
                "S3_MAX_ATTEMPTS": "0"}
        for name, value in base.items():
            clean_env.setenv(name, value)
        with pytest.raises(StorageError, match="CERTIFICATE_VERIFY_FAILED"):
            Storage.download("s3://models/m", str(tmp_path / "untrusted"))
        mount = tmp_path / "mount"
        mount.mkdir()
        shutil.copy(ca.path, mount / "cabundle.crt")
        trusting = {"AWS_CA_BUNDLE": {"AWS_CA_BUNDLE": ca.path}, "S3_VERIFY_SSL": {"S3_VERIFY_SSL": "0"},
                    "REQUESTS_CA_BUNDLE": {"REQUESTS_CA_BUNDLE": ca.path},
                    "cluster bundle": {"CA_BUNDLE_CONFIGMAP_NAME": "bundle",
                                       "CA_BUNDLE_VOLUME_MOUNT_POINT": str(mount)},
                    "STORAGE_CONFIG ca_bundle": {"STORAGE_CONFIG": json.dumps({"type": "s3", "ca_bundle": ca.path})},
                    "STORAGE_CONFIG verify_ssl": {"STORAGE_CONFIG": json.dumps({"type": "s3", "verify_ssl": "0"})}}
        for case, env in trusting.items():
            for name, value in env.items():
                clean_env.setenv(name, value)
            assert tree(Storage.download("s3://models/m", str(tmp_path / case))) == S3_TREE, case
            for name in env:
                clean_env.delenv(name)
        clean_env.setenv("CA_BUNDLE_CONFIGMAP_NAME", "bundle")  # KServe's S3 reading insists on the file
        clean_env.setenv("CA_BUNDLE_VOLUME_MOUNT_POINT", str(tmp_path / "absent"))
        with pytest.raises(StorageError, match=rf"the CA bundle {re.escape(str(tmp_path / 'absent'))}/cabundle\.crt "
                                               r"does not exist \(AWS_CA_BUNDLE or CA_BUNDLE_VOLUME_MOUNT_POINT\)"):
            Storage.download("s3://models/m", str(tmp_path / "absent-bundle"))
    finally:
        front.stop()


class Unavailable(Quiet):
    """Answers every request 503 (and counts them)."""

    def do_GET(self) -> None:
        self.record()
        self.answer(503, b"", "application/xml")


class Silent(Quiet):
    """Accepts and never answers (for up to 20 s)."""

    def do_GET(self) -> None:
        self.record()
        self.server.owner.released.wait(20)


# S3_MAX_ATTEMPTS goes to botocore as KServe passes it, ``retries={"max_attempts": N}``: N retries after the first
# request; boto3's own AWS_MAX_ATTEMPTS counts the first one.
@pytest.mark.parametrize("env,requests", [({}, 4), ({"S3_MAX_ATTEMPTS": "1"}, 2), ({"AWS_MAX_ATTEMPTS": "1"}, 1),
                                          ({"S3_MAX_ATTEMPTS": "2", "AWS_MAX_ATTEMPTS": "1"}, 3)])
def test_s3_max_attempts(env, requests, clean_env, tmp_path):
    server = Loopback(Unavailable)
    try:
        for name, value in {"AWS_ENDPOINT_URL": server.url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                            "AWS_DEFAULT_REGION": "us-east-1", **env}.items():
            clean_env.setenv(name, value)
        with pytest.raises(StorageError, match=r"^cannot download s3://models/m: 503"):
            Storage.download("s3://models/m", str(tmp_path / "m"))
        assert len(server.requests) == requests
    finally:
        server.stop()


def test_s3_read_timeout(clean_env, tmp_path):
    server = Loopback(Silent)
    server.released = threading.Event()
    try:
        for name, value in {"AWS_ENDPOINT_URL": server.url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                            "AWS_DEFAULT_REGION": "us-east-1", "S3_READ_TIMEOUT": "1", "S3_MAX_ATTEMPTS": "0"}.items():
            clean_env.setenv(name, value)
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"ReadTimeoutError: Read timeout on endpoint URL"):
            Storage.download("s3://models/m", str(tmp_path / "m"))
        assert time.monotonic() - started < 10  # the default would wait 60 s
    finally:
        server.released.set()
        server.stop()


# --- Azure Blob: Azurite ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    binary = azurite_binary()
    if not binary:
        message = "Azurite needs Node.js and npm (apt-get install nodejs npm)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    port = free_port()
    folder = tmp_path_factory.mktemp("azurite")
    with open(folder / "azurite.log", "wb") as out:
        proc = subprocess.Popen([binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                                 "--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"],
                                cwd=str(folder), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        eventually(lambda: proc.poll() is not None or listens(port), 60)
        assert proc.poll() is None, (folder / "azurite.log").read_text()
        from azure.storage.blob import BlobServiceClient
        connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                      f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")
        container = BlobServiceClient.from_connection_string(connection).create_container("models")
        for key, data in S3_OBJECTS.items():
            container.upload_blob(key, data)
        yield connection
    finally:
        stop_process_group(proc)


def test_azure_tunables_with_azurite(azurite, clean_env, tmp_path):
    clean_env.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)
    clean_env.setenv("AZURE_MAX_FILE_CONCURRENCY", "1")
    clean_env.setenv("AZURE_MAX_CHUNK_CONCURRENCY", "2")
    clean_env.setenv("STORAGE_IGNORE_PATTERNS", "sub/*")
    out = Storage.download(f"https://{AZURITE_ACCOUNT}.blob.core.windows.net/models/m", str(tmp_path / "m"))
    assert tree(out) == {name: data for name, data in S3_TREE.items() if not name.startswith("sub/")}
