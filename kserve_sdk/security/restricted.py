"""Restricted API groups, Triton's way: ``--http_restricted_api`` and ``--grpc_restricted_protocol``.

Each value is ``GROUPS:KEY=VALUE``: the comma-separated groups open only to requests whose header (REST) or
metadata (gRPC) ``KEY`` is ``VALUE``. A group appears in one restriction at most per flag. The groups are
Triton's (``health``, ``metadata``, ``inference``, ``shared-memory``, ``model-config``, ``model-repository``,
``statistics``, ``trace``, ``logging``) and ours (``jobs``, ``metrics``, ``docs``).

Every REST route belongs to one group, found from its handler's labels (``protocol``, ``endpoint``) or its
own ``restricted_group``; every method of the v2 gRPC service too. A gRPC call may carry the key as it is or
with Triton's ``triton-grpc-protocol-`` prefix.
"""
import hmac
import re
from typing import Callable, Dict, FrozenSet, Iterable, NamedTuple, Optional, Sequence, Tuple

#: Triton's groups, then ours.
GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config", "model-repository", "statistics",
          "trace", "logging", "jobs", "metrics", "docs")

#: (protocol, endpoint) labels of a REST handler -> its group. The OpenAI and time-series routes, v1 predict and
#: explain and the SSE streams are inference; model readiness is health, as Triton has it.
REST_GROUPS: Dict[Tuple[str, str], str] = {
    ("rest_v1", "live"): "health", ("rest_v2", "live"): "health", ("rest_v2", "ready"): "health",
    ("rest_v1", "model_ready"): "health", ("rest_v2", "model_ready"): "health",
    ("rest_v2", "server_metadata"): "metadata", ("rest_v2", "model_metadata"): "metadata",
    ("rest_v1", "models"): "metadata", ("rest_v2", "models"): "metadata",
    ("rest_v1", "predict"): "inference", ("rest_v1", "explain"): "inference", ("rest_v2", "infer"): "inference",
    ("rest_v2", "infer_stream"): "inference", ("rest_v2", "generate"): "inference",
    ("rest_v2", "generate_stream"): "inference",
    ("rest_v1", "forecast"): "inference", ("rest_v1", "timeseries_models"): "inference",
    ("openai", "completions"): "inference", ("openai", "chat_completions"): "inference",
    ("openai", "embeddings"): "inference", ("openai", "rerank"): "inference", ("openai", "models"): "inference",
    ("openai", "other"): "inference",
    ("rest_v2", "model_config"): "model-config",
    ("rest_v2", "repository_index"): "model-repository", ("rest_v2", "repository"): "model-repository",
    ("rest_v2", "model_statistics"): "statistics",
    ("rest_v2", "trace_setting"): "trace",
    ("rest_v2", "logging"): "logging",
    ("rest_v2", "shm_status"): "shared-memory", ("rest_v2", "shm_register"): "shared-memory",
    ("rest_v2", "shm_unregister"): "shared-memory", ("rest_v2", "cuda_shm_status"): "shared-memory",
    ("rest_v2", "cuda_shm_register"): "shared-memory", ("rest_v2", "cuda_shm_unregister"): "shared-memory",
    ("rest_v2", "job_submit"): "jobs", ("rest_v1", "job_submit"): "jobs", ("rest_v2", "jobs"): "jobs",
    ("rest_v2", "job"): "jobs", ("rest_v2", "job_result"): "jobs", ("rest_v2", "job_retry"): "jobs",
    ("rest_v2", "metrics"): "metrics",
    ("rest_v2", "openapi"): "docs", ("rest_v2", "docs"): "docs",
}

#: Methods of the v2 ``GRPCInferenceService`` -> their group.
GRPC_GROUPS: Dict[str, str] = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "ModelStatistics": "statistics",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}

#: The prefix Triton's gRPC clients put before a restricted key.
GRPC_PREFIX = "triton-grpc-protocol-"

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")


def rest_group(protocol: str, endpoint: str, declared: Optional[str] = None) -> Optional[str]:
    """The group of a REST handler labelled ``protocol``/``endpoint`` (None: it belongs to none). A handler's
    own ``restricted_group`` (``declared``) comes first; any other shared-memory endpoint is shared-memory."""
    if declared:
        return declared
    group = REST_GROUPS.get((protocol, endpoint))
    if group is None and protocol == "rest_v2" and ("shm_" in endpoint or endpoint.startswith("cuda")):
        return "shared-memory"
    return group


def grpc_group(method: str) -> Optional[str]:
    """The group of a method of the v2 gRPC service (system and CUDA shared memory: shared-memory)."""
    return GRPC_GROUPS.get(method) or ("shared-memory" if "SharedMemory" in method else None)


class Restriction(NamedTuple):
    """Some groups, open only to requests carrying header (or metadata) ``key`` with ``value``."""

    groups: FrozenSet[str]
    key: str  # lowercase
    value: str

    def allows(self, get: Callable[[str], Optional[str]]) -> bool:
        """Whether the request whose header ``get(name)`` returns passes (compared in constant time)."""
        given = get(self.key)
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self.value.encode())

    def allows_grpc(self, metadata: Dict[str, str]) -> bool:
        """Whether a gRPC call with ``metadata`` passes: the key as it is, or with Triton's prefix."""
        return self.allows(metadata.get) or self.allows(lambda key: metadata.get(GRPC_PREFIX + key))

    def http_message(self) -> str:
        return f"This API is restricted, expecting header '{self.key}'"

    def grpc_message(self) -> str:
        return f"This protocol is restricted, expecting header '{self.key}' (or '{GRPC_PREFIX}{self.key}')"


def _shown(value: str) -> str:
    """A flag's value as an error message shows it: what follows the first ``=`` (the secret) hidden."""
    head, equals, secret = value.partition("=")
    return repr(head + equals + ("<hidden>" if secret else ""))


def parse_one(flag: str, value: str) -> Restriction:
    """One ``GROUPS:KEY=VALUE``; ValueError naming the flag and the value (its secret hidden) if it is not."""
    groups_text, colon, pair = value.partition(":")
    key, equals, secret = pair.partition("=")
    key = key.strip().lower()
    groups = [group.strip() for group in groups_text.split(",")]
    if not (colon and equals and key and secret and all(groups)):
        raise ValueError(f"{flag} {_shown(value)}: expected GROUPS:KEY=VALUE, for example "
                         "model-repository,logging:admin-key=<secret>")
    unknown = [group for group in groups if group not in GROUPS]
    if unknown:
        raise ValueError(f"{flag} {_shown(value)}: unknown group {unknown[0]!r}; the groups are {', '.join(GROUPS)}")
    if not _HEADER_NAME.fullmatch(key):
        raise ValueError(f"{flag} {_shown(value)}: {key!r} is not a header name")
    if secret != secret.strip() or not secret.isprintable():
        raise ValueError(f"{flag} {_shown(value)}: the value must be printable, without spaces around it")
    return Restriction(frozenset(groups), key, secret)


def parse(flag: str, values: Optional[Sequence[str]]) -> Dict[str, Restriction]:
    """The restrictions of one flag's values, by group; ValueError for a malformed value or a group named by
    two of them."""
    by_group: Dict[str, Restriction] = {}
    for value in values or ():
        restriction = parse_one(flag, value)
        for group in sorted(restriction.groups):
            if group in by_group:
                raise ValueError(f"{flag}: group {group!r} is in more than one restriction; a group may be "
                                 "restricted once")
            by_group[group] = restriction
    return by_group


def covering(by_group: Dict[str, Restriction], groups: Iterable[Optional[str]]) -> Tuple[Restriction, ...]:
    """The distinct restrictions of ``groups`` (in ``by_group``)."""
    found = {by_group[group] for group in groups if group in by_group}
    return tuple(sorted(found, key=lambda r: sorted(r.groups)))
