"""Throwaway TLS material for tests: one CA, server certificates for 127.0.0.1 / localhost it signs, and client
certificates (mutual TLS)."""
import datetime
import ipaddress
import os
import socket
import ssl
from typing import Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _valid_for_a_day(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    day, minutes = datetime.timedelta(days=1), datetime.timedelta(minutes=5)
    return builder.not_valid_before(now - minutes).not_valid_after(now + day)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class ThrowawayCA:
    """A CA written to ``<directory>/ca.pem``; :meth:`issue` makes server certificates it signs."""

    def __init__(self, directory: str, name: str = "ca"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(f"kserve-sdk test CA {name}")
        self.cert = (_valid_for_a_day(x509.CertificateBuilder()).subject_name(subject)
                     .issuer_name(subject).public_key(self.key.public_key()).serial_number(1)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.path = os.path.join(directory, f"{name}.pem")
        with open(self.path, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, serial: int) -> Tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a server certificate for 127.0.0.1 and localhost numbered ``serial``."""
        key = ec.generate_private_key(ec.SECP256R1())
        san = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                           x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        cert = (_valid_for_a_day(x509.CertificateBuilder()).subject_name(_name("localhost"))
                .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(serial)
                .add_extension(san, critical=False)
                .sign(self.key, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def issue_client(self, directory: str, name: str) -> Tuple[str, str]:
        """(certificate path, key path) of a client certificate named ``name`` that this CA signs, written to
        ``<directory>/<name>.pem`` and ``<name>.key``."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (_valid_for_a_day(x509.CertificateBuilder()).subject_name(_name(name))
                .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        paths = os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}.key")
        for path, data in zip(paths, (cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)), strict=True):
            with open(path, "wb") as f:
                f.write(data)
        return paths


def write_in_place(path: str, data: bytes) -> None:
    """Rewrite ``path`` in place (same inode), as a process that truncates and writes the file does."""
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        f.truncate(0)
        f.write(data)


def peer_serial(port: int, ca_path: str, alpn: Tuple[str, ...] = ()) -> int:
    """The serial number of the certificate a new TLS connection to 127.0.0.1:``port`` is served."""
    context = ssl.create_default_context(cafile=ca_path)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return int(tls.getpeercert()["serialNumber"], 16)
