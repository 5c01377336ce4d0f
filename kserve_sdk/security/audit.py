"""The audit log: one line per call that changes the server's state, on the ``kserve.audit`` logger.

Audited: repository load and unload, a change of the log settings or of the trace settings, and shared-memory
registration and unregistration (system and CUDA), over REST and gRPC, whatever their outcome (a 403 of a
restricted group included). A line reads::

    audit request_id="..." peer=127.0.0.1 route="POST /v2/repository/models/m/load" outcome=200

The logger gets its own level (INFO) when the server starts, unless a log config (``--log_config_file``) gave it
one: a client turning the server's logs off through ``/v2/logging`` (or ``KSERVE_LOGLEVEL``) does not silence it.
"""
import json
import logging
from typing import Any

AUDIT_LOGGER_NAME = "kserve.audit"
audit_logger = logging.getLogger(AUDIT_LOGGER_NAME)

#: REST endpoints (a handler's ``endpoint`` label) whose POST changes the server's state.
REST_ENDPOINTS = frozenset({"repository", "logging", "trace_setting", "shm_register", "shm_unregister",
                            "cuda_shm_register", "cuda_shm_unregister"})
#: gRPC methods that always change the server's state, besides shared memory's.
GRPC_METHODS = frozenset({"RepositoryModelLoad", "RepositoryModelUnload"})
#: gRPC methods that read the settings when they carry none, and change them otherwise.
GRPC_SETTINGS_METHODS = frozenset({"LogSettings", "TraceSetting"})


def _registers_memory(method: str) -> bool:
    """A shared-memory (system or CUDA) register or unregister method."""
    return "SharedMemory" in method and method.endswith(("Register", "Unregister"))


def is_audited_rest(endpoint: str, method: str) -> bool:
    """Whether a REST request to a handler labelled ``endpoint``, with ``method``, is a management call."""
    return endpoint in REST_ENDPOINTS and method == "POST"


def is_audited_grpc(method: str) -> bool:
    """Whether calls of the gRPC ``method`` may change the server's state (see :func:`changes_settings`)."""
    return method in GRPC_METHODS or method in GRPC_SETTINGS_METHODS or _registers_memory(method)


def changes_settings(method: str, request: Any) -> bool:
    """Whether a call of an audited gRPC ``method`` with ``request`` is a change (a settings method reads
    when its request carries no setting)."""
    return method not in GRPC_SETTINGS_METHODS or bool(getattr(request, "settings", None))


def keep_on() -> None:
    """Give the audit logger the level INFO unless it has a level of its own. (Called once logging is configured:
    a configuration resets the level of every logger below ``kserve``.)"""
    if audit_logger.level == logging.NOTSET:
        audit_logger.setLevel(logging.INFO)


def _text(value: str, limit: int = 300) -> str:
    """``value`` quoted and escaped for one log line (a client's text cannot break the line)."""
    return json.dumps(value[:limit])


def audit(request_id: str, peer: str, route: str, outcome: str) -> None:
    """Write one audit line."""
    audit_logger.info("audit request_id=%s peer=%s route=%s outcome=%s", _text(request_id), peer or "-",
                      _text(route), outcome)
