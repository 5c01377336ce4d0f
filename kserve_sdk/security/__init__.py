"""Who may call what, and who did: the restricted API groups (``--http_restricted_api``,
``--grpc_restricted_protocol``, Triton's way) and the audit log of management calls (docs/security.md).

``ModelServer`` parses the flags at start-up (:class:`Security`; a bad value stops the server with one line)
and plugs the result into the HTTP application and the gRPC server it builds. Client certificates (mutual
TLS) live with the server's certificate pair, in ``server/tls.py``.
"""
from typing import Any, Callable, Optional, Sequence

from ..logging import logger
from .audit import keep_on
from .grpc_guard import MethodHandlers, method_wrapper
from .http_guard import protect_app
from .restricted import GROUPS, Restriction, parse

__all__ = ["GROUPS", "Restriction", "Security"]


class Security:
    """The server's restricted groups, REST (``http``) and gRPC (``grpc``), each by group name.

    ``ValueError`` (naming the flag and the value, its secret hidden) when a value is malformed or names an
    unknown group, or a group is restricted twice.
    """

    def __init__(self, http: Optional[Sequence[str]] = None, grpc: Optional[Sequence[str]] = None):
        keep_on()  # the server has configured its logging by now
        self.http = parse("--http_restricted_api", http)
        self.grpc = parse("--grpc_restricted_protocol", grpc)
        for protocol, by_group in (("REST", self.http), ("gRPC", self.grpc)):
            for restriction in sorted(set(by_group.values()), key=lambda r: sorted(r.groups)):
                logger.info("%s API groups %s are restricted to requests with header '%s'", protocol,
                            ", ".join(sorted(restriction.groups)), restriction.key)

    @classmethod
    def from_flags(cls, flags: Any) -> "Security":
        """From the server's parsed flags."""
        return cls(flags.http_restricted_api, flags.grpc_restricted_protocol)

    def protect_app(self, app: Any) -> None:
        """Check the REST restrictions on the requests of ``app`` (an application of ``handlers/http.py``)."""
        protect_app(app, self.http)

    def grpc_methods(self, dataplane: Any) -> Callable[[MethodHandlers], MethodHandlers]:
        """What wraps the gRPC service's method table: the gRPC restrictions and the audit log."""
        return method_wrapper(dataplane, self.grpc)
