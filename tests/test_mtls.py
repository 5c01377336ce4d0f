"""Mutual TLS (--ssl_ca_certs): HTTPS and gRPC (--grpc_ssl) refuse a client without a certificate or with one
the CAs did not sign, serve one they signed, and follow a rotated CA file in every worker (the old clients
refused, the new ones served, within a bounded wait)."""
import http.client
import os
import re
import ssl
from typing import Optional, Tuple

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from certs import ThrowawayCA, write_in_place
from helpers import ROOT, Server, eventually, triton_input

ZOO = os.path.join(ROOT, "tests", "models", "zoo.py")
Client = Optional[Tuple[str, str]]  # (certificate path, key path)
RELOADED = "checking client certificates against"


def https_status(port: int, server_ca: str, client: Client = None, path: str = "/v2/health/live") -> int:
    """The status of a GET over a new HTTPS connection, presenting ``client``'s certificate."""
    context = ssl.create_default_context(cafile=server_ca)
    if client is not None:
        context.load_cert_chain(*client)
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def https_refused(port: int, server_ca: str, client: Client = None) -> bool:
    """Whether a new HTTPS connection presenting ``client``'s certificate is refused (the handshake fails or the
    connection is closed before any answer)."""
    try:
        https_status(port, server_ca, client)
    except (OSError, http.client.HTTPException):
        return True
    return False


def grpc_live(url: str, server_ca: str, client: Client = None) -> bool:
    """Whether a new gRPC channel presenting ``client``'s certificate is served (False: refused, within 5 s)."""
    key, cert = (client[1], client[0]) if client is not None else (None, None)
    channel = grpcclient.InferenceServerClient(url, ssl=True, root_certificates=server_ca, private_key=key,
                                               certificate_chain=cert)
    try:
        return channel.is_server_live(client_timeout=5)
    except InferenceServerException:
        return False
    finally:
        channel.close()


class MutualTLSServer(Server):
    """A server whose HTTPS port asks for a client certificate: probed with ``client``'s."""

    def __init__(self, server_ca: str, client: Tuple[str, str], args, workers: str = "1"):
        super().__init__(ZOO, [*args, "--workers", workers], env={"ZOO_MODELS": "echo"})
        self.server_ca, self.client = server_ca, client

    def _live(self) -> bool:
        try:
            return https_status(self.http_port, self.server_ca, self.client) == 200
        except (OSError, http.client.HTTPException):
            return False

    def pids_logging(self, text: str) -> set:
        return {m.group(1) for m in re.finditer(r"^\S+ \S+ (\d+) kserve \w+ .*" + re.escape(text), self.log(), re.M)}


@pytest.fixture
def pki(tmp_path):
    """The server's CA and pair, a client CA file trusting CA "a", and clients: alice (signed by a), mallory
    (signed by a CA the server never trusts) and bob (signed by b, trusted once the file is rotated)."""
    server_ca, a, b, stranger = (ThrowawayCA(str(tmp_path), name) for name in ("server-ca", "a", "b", "stranger"))
    cert, key = server_ca.issue(3001)
    paths = {"cert": str(tmp_path / "server.pem"), "key": str(tmp_path / "server.key"),
             "clients": str(tmp_path / "clients.pem")}
    write_in_place(paths["cert"], cert)
    write_in_place(paths["key"], key)
    with open(a.path, "rb") as f:
        write_in_place(paths["clients"], f.read())
    clients = {"alice": a.issue_client(str(tmp_path), "alice"), "bob": b.issue_client(str(tmp_path), "bob"),
               "mallory": stranger.issue_client(str(tmp_path), "mallory")}
    return server_ca, paths, clients, b


def _flags(paths):
    return ["--ssl_certfile", paths["cert"], "--ssl_keyfile", paths["key"], "--ssl_ca_certs", paths["clients"],
            "--grpc_ssl", "true"]


def test_only_clients_with_a_certificate_the_cas_signed_are_served(pki):
    server_ca, paths, clients, _ = pki
    server = MutualTLSServer(server_ca.path, clients["alice"], _flags(paths))
    try:
        server.start()
        assert https_refused(server.http_port, server_ca.path)
        assert https_refused(server.http_port, server_ca.path, clients["mallory"])
        assert https_status(server.http_port, server_ca.path, clients["alice"]) == 200
        assert not grpc_live(server.grpc_url, server_ca.path)
        assert not grpc_live(server.grpc_url, server_ca.path, clients["mallory"])
        assert grpc_live(server.grpc_url, server_ca.path, clients["alice"])
        cert, key = clients["alice"]
        client = grpcclient.InferenceServerClient(server.grpc_url, ssl=True, root_certificates=server_ca.path,
                                                  private_key=key, certificate_chain=cert)
        tensor = triton_input(grpcclient, "INPUT0", np.arange(4, dtype=np.float32).reshape(1, 4))
        assert client.infer("echo", [tensor]).as_numpy("OUTPUT0").tolist() == [[0, 1, 2, 3]]
        client.close()
        assert "Traceback" not in server.log()
    finally:
        server.stop()
        os.unlink(server.log_file.name)


def test_a_rotated_ca_file_reaches_new_connections_in_every_worker(pki):
    server_ca, paths, clients, b = pki
    server = MutualTLSServer(server_ca.path, clients["alice"], _flags(paths), workers="2")
    try:
        server.start()
        assert https_status(server.http_port, server_ca.path, clients["alice"]) == 200
        assert https_refused(server.http_port, server_ca.path, clients["bob"])
        assert grpc_live(server.grpc_url, server_ca.path, clients["alice"])
        with open(b.path, "rb") as f:
            write_in_place(paths["clients"], f.read())
        eventually(lambda: len(server.pids_logging(RELOADED)) == 2, timeout=15, interval=0.2, message=server.log)
        for _ in range(6):  # new connections, whichever worker takes them
            assert https_refused(server.http_port, server_ca.path, clients["alice"])
            assert https_status(server.http_port, server_ca.path, clients["bob"]) == 200
        assert not grpc_live(server.grpc_url, server_ca.path, clients["alice"])
        assert grpc_live(server.grpc_url, server_ca.path, clients["bob"])
    finally:
        server.stop()
        os.unlink(server.log_file.name)


@pytest.mark.parametrize("case", ["no pair", "missing file", "not a CA file"])
def test_ca_start_up_failures_are_one_line(pki, case, start_server):
    _, paths, _, _ = pki
    with open(paths["clients"] + ".junk", "w") as f:
        f.write("not a certificate\n")
    args, line = {
        "no pair": (["--ssl_ca_certs", paths["clients"]],
                    "--ssl_ca_certs (client certificates) needs --ssl_certfile and --ssl_keyfile"),
        "missing file": (["--ssl_certfile", paths["cert"], "--ssl_keyfile", paths["key"],
                          "--ssl_ca_certs", paths["clients"] + ".gone"],
                         f"cannot load --ssl_ca_certs {paths['clients']}.gone: "),
        "not a CA file": (["--ssl_certfile", paths["cert"], "--ssl_keyfile", paths["key"],
                           "--ssl_ca_certs", paths["clients"] + ".junk"],
                          f"cannot load --ssl_ca_certs {paths['clients']}.junk: "),
    }[case]
    server = start_server("tests/models/zoo.py", *args, env={"ZOO_MODELS": "echo"}, wait=False)
    assert server.wait_exit() == 1
    log = server.log()
    assert log.count(line) == 1 and "Traceback" not in log, log
