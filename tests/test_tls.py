"""HTTPS and gRPC TLS with --ssl_certfile/--ssl_keyfile: certificates rewritten in place reach new connections
within 10 s in every worker while open connections carry on; a broken pair keeps the old one."""
import http.client
import json
import os
import re
import ssl
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from certs import ThrowawayCA, peer_serial, write_in_place
from helpers import ROOT, Server, eventually

ZOO = os.path.join(ROOT, "tests", "models", "zoo.py")
RELOADED = "TLS: serving the new certificate"
KEPT = "still serving the previous certificate"


class TLSServer(Server):
    """A Server whose REST port speaks HTTPS, trusted through ``ca_path``."""

    def __init__(self, ca_path: str, args, env=None, grpc: bool = True):
        super().__init__(ZOO, args, env={"ZOO_MODELS": "echo", **(env or {})}, grpc=grpc)
        self.ca_path = ca_path

    def https(self, method: str = "GET", path: str = "/v2/health/live") -> http.client.HTTPSConnection:
        """A new connection that has sent one request and read its answer (kept open)."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.http_port, timeout=10,
                                           context=ssl.create_default_context(cafile=self.ca_path))
        conn.request(method, path)
        assert conn.getresponse().read() is not None
        return conn

    def _live(self) -> bool:
        context = ssl.create_default_context(cafile=self.ca_path)
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.http_port}/v2/health/live", timeout=1,
                                        context=context) as r:
                return r.status == 200
        except OSError:
            return False

    def pids_logging(self, text: str) -> set:
        """The worker processes whose log lines contain ``text``."""
        return {m.group(1) for m in re.finditer(r"^\S+ \S+ (\d+) kserve \w+ .*" + re.escape(text), self.log(), re.M)}


@pytest.fixture
def pair(tmp_path):
    """A CA and the first server pair (serial 1001) written to server.pem / server.key."""
    ca = ThrowawayCA(str(tmp_path))
    cert, key = ca.issue(1001)
    paths = str(tmp_path / "server.pem"), str(tmp_path / "server.key")
    write_in_place(paths[0], cert)
    write_in_place(paths[1], key)
    return ca, paths


def _infer_echo(client) -> np.ndarray:
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    return client.infer("echo", [x]).as_numpy("OUTPUT0")


def test_rotated_pair_reaches_new_https_and_grpc_connections_in_every_worker(pair):
    ca, (cert_path, key_path) = pair
    server = TLSServer(ca.path, ["--ssl_certfile", cert_path, "--ssl_keyfile", key_path, "--grpc_ssl", "true",
                                 "--workers", "2"])
    try:
        server.start()
        assert peer_serial(server.http_port, ca.path) == 1001
        kept = server.https()
        kept_socket = kept.sock
        assert int(kept_socket.getpeercert()["serialNumber"], 16) == 1001
        grpc_kept = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=ca.path)
        assert grpc_kept.is_server_live()
        assert _infer_echo(grpc_kept).tolist() == [[0, 1, 2, 3]]
        assert peer_serial(server.grpc_port, ca.path, alpn=("h2",)) == 1001

        cert, key = ca.issue(1002)
        write_in_place(cert_path, cert)
        time.sleep(0.5)  # the key follows the certificate a moment later: that is no broken pair
        write_in_place(key_path, key)
        eventually(lambda: len(server.pids_logging(RELOADED)) == 2, interval=0.2, message=server.log)
        assert KEPT not in server.log(), server.log()
        assert all(peer_serial(server.http_port, ca.path) == 1002 for _ in range(6))
        assert all(peer_serial(server.grpc_port, ca.path, alpn=("h2",)) == 1002 for _ in range(6))

        kept.request("POST", "/v2/models/echo/infer", body=json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}))
        answer = kept.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["outputs"][0]["data"] == [1, 2, 3, 4]
        assert kept.sock is kept_socket and int(kept_socket.getpeercert()["serialNumber"], 16) == 1001
        assert _infer_echo(grpc_kept).tolist() == [[0, 1, 2, 3]]  # the old channel's connection carries on
        fresh = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=ca.path)
        assert _infer_echo(fresh).tolist() == [[0, 1, 2, 3]]
        fresh.close()
        grpc_kept.close()
        kept.close()
    finally:
        server.stop()
        os.unlink(server.log_file.name)


def test_broken_pair_is_logged_once_and_the_old_one_kept_until_the_next_change(pair):
    ca, (cert_path, key_path) = pair
    server = TLSServer(ca.path, ["--ssl_certfile", cert_path, "--ssl_keyfile", key_path], grpc=False)
    try:
        server.start()
        cert, key = ca.issue(1003)
        write_in_place(cert_path, cert)  # its key is still the old one: they do not match
        eventually(lambda: KEPT in server.log(), interval=0.2, message=server.log)
        assert "KEY_VALUES_MISMATCH" in server.log() or "key values mismatch" in server.log()
        assert peer_serial(server.http_port, ca.path) == 1001
        time.sleep(3)  # three more polls of unchanged files: nothing more is logged
        assert server.log().count(KEPT) == 1

        write_in_place(key_path, key[:len(key) // 2])  # a key half written
        eventually(lambda: server.log().count(KEPT) == 2, interval=0.2, message=server.log)
        assert peer_serial(server.http_port, ca.path) == 1001
        write_in_place(key_path, key)
        eventually(lambda: peer_serial(server.http_port, ca.path) == 1003, interval=0.2, message=server.log)
        assert RELOADED in server.log() and "Traceback" not in server.log()
    finally:
        server.stop()
        os.unlink(server.log_file.name)


def test_kubelet_style_symlink_swap_is_followed(tmp_path):
    """A mounted Secret: tls.crt -> ..data/tls.crt, and ..data -> a dated folder swapped by one rename."""
    ca = ThrowawayCA(str(tmp_path))

    def publish(serial: int, name: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        cert, key = ca.issue(serial)
        (folder / "tls.crt").write_bytes(cert)
        (folder / "tls.key").write_bytes(key)
        os.symlink(name, tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    publish(2001, "..2026_first")
    for name in ("tls.crt", "tls.key"):
        os.symlink(os.path.join("..data", name), tmp_path / name)
    server = TLSServer(ca.path, ["--ssl_certfile", str(tmp_path / "tls.crt"), "--ssl_keyfile",
                                 str(tmp_path / "tls.key")], grpc=False)
    try:
        server.start()
        assert peer_serial(server.http_port, ca.path) == 2001
        publish(2002, "..2026_second")
        eventually(lambda: peer_serial(server.http_port, ca.path) == 2002, interval=0.2, message=server.log)
        assert KEPT not in server.log()
    finally:
        server.stop()
        os.unlink(server.log_file.name)


@pytest.mark.parametrize("case", ["mismatched", "missing key", "grpc_ssl alone", "cert alone"])
def test_tls_start_up_failures_are_one_line(pair, case, start_server):
    ca, (cert_path, key_path) = pair
    other_cert, _ = ca.issue(1004)
    write_in_place(cert_path + ".other", other_cert)
    args, line = {
        "mismatched": (["--ssl_certfile", cert_path + ".other", "--ssl_keyfile", key_path],
                       f"cannot load --ssl_certfile {cert_path}.other with --ssl_keyfile {key_path}: "),
        "missing key": (["--ssl_certfile", cert_path, "--ssl_keyfile", key_path + ".gone"],
                        f"cannot load --ssl_certfile {cert_path} with --ssl_keyfile {key_path}.gone: "),
        "grpc_ssl alone": (["--grpc_ssl", "true"], "--grpc_ssl needs --ssl_certfile and --ssl_keyfile"),
        "cert alone": (["--ssl_certfile", cert_path], "go together: HTTPS needs both"),
    }[case]
    server = start_server("tests/models/zoo.py", *args, env={"ZOO_MODELS": "echo"}, wait=False)
    assert server.wait_exit() == 1
    log = server.log()
    assert log.count(line) == 1 and "Traceback" not in log, log
    assert len([row for row in log.splitlines() if " ERROR " in row]) == 1, log
