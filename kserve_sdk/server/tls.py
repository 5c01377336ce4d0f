"""HTTPS and gRPC TLS from one certificate/key pair that follows its files (``--ssl_certfile``/``--ssl_keyfile``),
and, with ``--ssl_ca_certs``, client certificates required and checked against those CAs (mutual TLS).

cert-manager and the kubelet rewrite a Secret's files while the server runs. Each worker polls the two
files' identity (inode, size, modification time) once a second on its event loop, which costs two
``stat`` calls; once they have changed and then stayed the same for a poll (a writer rewrites the
certificate and the key one after the other), it loads the new pair into a new ``SSLContext``. The listening context
hands every new TLS handshake the newest context (its SNI callback, called on every handshake), so new
connections get the new certificate while open ones keep the one they started with; gRPC's dynamic
credentials ask for the newest pair at every new connection. A pair that does not load (a key that does
not match, a file half written) is logged once and the pair in service kept; the next change is tried.

The CA file of ``--ssl_ca_certs`` is watched and loaded with the pair: a rotated CA reaches new connections
as a new certificate does (a client whose certificate the new CAs did not sign is refused from then on).
TLS session tickets are not issued then, so no connection resumes a session checked against the old CAs.
"""
import asyncio
import os
import ssl
from typing import Optional, Tuple

from ..logging import logger

POLL_SECONDS = 1.0

_Stamp = Tuple[Optional[Tuple[int, int, int]], ...]
#: (key PEM, certificate PEM, client CAs' PEM or None): what gRPC is given
_Pem = Tuple[bytes, bytes, Optional[bytes]]


class TLSError(Exception):
    """The certificate/key pair (or the client CAs) could not be loaded; the message says why on one line."""


def _identity(path: str) -> Optional[Tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class CertificatePair:
    """The served certificate and key, loaded now (``TLSError`` when they do not load) and reloaded by
    :meth:`watch` when the files change. With ``ca_certs`` (a PEM file of CAs), every client must present a
    certificate one of them signed; the file is reloaded with the pair.

    ``context`` is the ``ssl.SSLContext`` to listen with; :meth:`grpc_credentials` is the same pair for gRPC.
    """

    def __init__(self, certfile: str, keyfile: str, ca_certs: Optional[str] = None):
        self.certfile, self.keyfile, self.ca_certs = certfile, keyfile, ca_certs
        self._stamp, self._current, self._pem = self._load()
        self._failed: Optional[_Stamp] = None  # the files' identity when they last failed to load
        self._settling: Optional[_Stamp] = None  # a new identity seen at the last poll, not loaded yet
        self._pem_given_to_grpc: Optional[_Pem] = None
        self.context = self._current
        self.context.sni_callback = self._newest_context
        logger.info("TLS: serving %s, reloaded when it or %s changes", certfile, keyfile)
        if ca_certs:
            logger.info("TLS: clients must present a certificate signed by a CA of %s (reloaded when it changes)",
                        ca_certs)

    def _files_stamp(self) -> _Stamp:
        return _identity(self.certfile), _identity(self.keyfile), _identity(self.ca_certs) if self.ca_certs else None

    def _load(self) -> Tuple[_Stamp, ssl.SSLContext, _Pem]:
        """(files' identity, a context serving the pair, (key PEM, certificate PEM, CAs' PEM)), all from the
        same file contents: files that change while being read are not loaded."""
        before = self._files_stamp()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
            key, cert = _read(self.keyfile), _read(self.certfile)
        except (OSError, ssl.SSLError) as e:
            raise TLSError(f"cannot load --ssl_certfile {self.certfile} with --ssl_keyfile {self.keyfile}: "
                           f"{' '.join(str(e).split())}") from None
        cas = self._require_client_certificates(context) if self.ca_certs else None
        if self._files_stamp() != before:
            raise TLSError(f"{self.certfile}, {self.keyfile} or {self.ca_certs} changed while being read")
        return before, context, (key, cert, cas)

    def _require_client_certificates(self, context: ssl.SSLContext) -> bytes:
        """Make ``context`` require a client certificate signed by a CA of ``ca_certs``; the CAs' PEM."""
        ca_certs = str(self.ca_certs)
        try:
            cas = _read(ca_certs)
            context.load_verify_locations(cadata=cas.decode("ascii"))
        except (OSError, ssl.SSLError, UnicodeDecodeError, ValueError) as e:
            raise TLSError(f"cannot load --ssl_ca_certs {ca_certs}: {' '.join(str(e).split()) or type(e).__name__}"
                           ) from None
        context.verify_mode = ssl.CERT_REQUIRED
        context.num_tickets = 0  # TLS 1.3: no ticket, no resumption past a rotated CA
        context.options |= ssl.OP_NO_TICKET
        return cas

    def _newest_context(self, connection, server_name, listening_context) -> None:
        if connection.context is not self._current:
            connection.context = self._current

    def reload_if_changed(self) -> bool:
        """Load the pair again if its files changed since the last attempt and have not changed since the
        previous call; whether a new pair is served."""
        stamp = self._files_stamp()
        if stamp == self._stamp or stamp == self._failed:
            return False
        if stamp != self._settling:  # still being written, perhaps: look again at the next poll
            self._settling = stamp
            return False
        try:
            self._stamp, self._current, self._pem = self._load()
        except TLSError as e:
            self._failed = stamp
            logger.error("TLS: %s; still serving the previous certificate", e)
            return False
        self._failed = None
        logger.info("TLS: serving the new certificate of %s to new connections%s", self.certfile,
                    f", checking client certificates against {self.ca_certs}" if self.ca_certs else "")
        return True

    async def watch(self, interval: float = POLL_SECONDS) -> None:
        """Poll the files every ``interval`` seconds and reload them when they change (runs until cancelled)."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.reload_if_changed()
            except Exception:  # the watcher must outlive any surprise; the pair in service stays
                logger.exception("TLS: checking %s failed", self.certfile)

    def grpc_credentials(self):
        """gRPC server credentials that serve the newest pair to each new connection."""
        import grpc

        return grpc.dynamic_ssl_server_credentials(self._grpc_configuration(), self._grpc_fetch,
                                                   require_client_authentication=bool(self.ca_certs))

    def _grpc_configuration(self):
        import grpc

        self._pem_given_to_grpc = pem = self._pem
        return grpc.ssl_server_certificate_configuration([pem[:2]], root_certificates=pem[2])

    def _grpc_fetch(self):
        # grpc calls this before every new connection's handshake, from its own thread: answer None
        # (keep the current pair) unless the watcher has loaded a new one.
        if self._pem is self._pem_given_to_grpc:
            return None
        return self._grpc_configuration()
