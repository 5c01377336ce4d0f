"""One model's ``model-settings.json``: MLServer's fields, and ours beside them.

MLServer's fields honoured: ``name`` (default: the folder's name), ``implementation``, ``parameters.uri``,
``parameters.version``, ``parameters.extra`` (handed to the model as ``model.settings_extra``),
``max_batch_size`` and ``max_batch_time`` (seconds). MLServer's fields read and ignored without error:
``platform``, ``versions``, ``inputs``, ``outputs``, ``parallel_workers``, ``warm_workers``,
``cache_enabled``, and in ``parameters``: ``format``, ``content_type``, ``environment_path``,
``environment_tarball``, ``inference_pool_gid``, ``autogenerate_inference_pool_gid``. Any other field is
ignored too, as MLServer ignores it, and named in ``ModelSettings.unknown`` so the server can say so (a
misspelt field of ours would otherwise change nothing, silently).

Ours: ``version_policy`` (Triton's JSON shape), ``scheduling`` (the fields of
:class:`kserve_sdk.SchedulingPolicy`), ``warmup`` (the model's warm-up requests), ``pinned`` (never
evicted) and ``max_batch_latency_ms`` (``max_batch_time`` in milliseconds).
"""
import dataclasses
import json
import os
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..scheduling.policy import SchedulingPolicy
from ..scheduling.warmup import Warmup, declared_warmups
from .errors import RepositoryError
from .versions import VersionPolicy, parse_policy

SETTINGS_FILE = "model-settings.json"

#: MLServer's fields that do not change how we serve a model: read, and ignored without error.
MLSERVER_IGNORED = ("platform", "versions", "inputs", "outputs", "parallel_workers", "warm_workers", "cache_enabled")
MLSERVER_IGNORED_PARAMETERS = ("format", "content_type", "environment_path", "environment_tarball",
                               "inference_pool_gid", "autogenerate_inference_pool_gid")
#: The fields read here, MLServer's and ours.
KNOWN = ("name", "implementation", "parameters", "max_batch_size", "max_batch_time", "max_batch_latency_ms",
         "version_policy", "scheduling", "warmup", "pinned")


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """What a ``model-settings.json`` says about one model (or one version of it).

    ``path`` is the file read (None for a model folder without one); ``folder`` the folder it describes.
    None in a field means the file does not set it: the model's own attribute (or the server's default)
    stays.
    """

    name: str
    folder: str
    path: Optional[str] = None
    implementation: Optional[str] = None
    uri: Optional[str] = None
    version: Optional[str] = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    max_batch_size: Optional[int] = None
    max_batch_latency_ms: Optional[float] = None
    version_policy: Optional[VersionPolicy] = None
    scheduling: Optional[SchedulingPolicy] = None
    warmup: Optional[Tuple[Any, ...]] = None
    pinned: bool = False
    unknown: Tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """The file (or, without one, the folder) an error about these settings names."""
        return self.path or self.folder


def default_settings(folder: str) -> ModelSettings:
    """The settings of a model folder without a ``model-settings.json``: named after the folder."""
    return ModelSettings(name=os.path.basename(os.path.normpath(folder)), folder=folder)


def read_settings(path: str) -> ModelSettings:
    """Read one ``model-settings.json``. A malformed file (not JSON, a field of the wrong type, an unknown
    ``version_policy`` shape, ...) raises RepositoryError naming the file and the problem in one line."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise RepositoryError(path, f"cannot be read: {e}") from None
    except json.JSONDecodeError as e:
        raise RepositoryError(path, f"is not valid JSON: {e}") from None
    if not isinstance(document, dict):
        raise RepositoryError(path, f"must hold a JSON object, not {type(document).__name__}")
    try:
        return _parse(path, document)
    except ValueError as e:
        raise RepositoryError(path, str(e)) from None


def _parse(path: str, document: Dict[str, Any]) -> ModelSettings:
    folder = os.path.dirname(os.path.abspath(path))
    parameters = _object(document, "parameters")
    name = _text(document, "name") or os.path.basename(folder)
    batch_time, batch_latency = _number(document, "max_batch_time"), _number(document, "max_batch_latency_ms")
    if batch_time is not None and batch_latency is not None:
        raise ValueError("give max_batch_time (seconds, MLServer's) or max_batch_latency_ms, not both")
    policy = document.get("version_policy")
    return ModelSettings(
        name=name, folder=folder, path=path,
        implementation=_text(document, "implementation"),
        uri=_text(parameters, "parameters.uri", "uri"),
        version=_version(parameters),
        extra=dict(_object(parameters, "parameters.extra", "extra")),
        max_batch_size=_count(document, "max_batch_size"),
        max_batch_latency_ms=batch_latency if batch_time is None else batch_time * 1000,
        version_policy=None if policy is None else parse_policy(policy),
        scheduling=_scheduling(document.get("scheduling")),
        warmup=_warmup(name, folder, document.get("warmup")),
        pinned=_flag(document, "pinned"),
        unknown=_unknown(document, parameters),
    )


def _object(document: Mapping[str, Any], field: str, key: Optional[str] = None) -> Mapping[str, Any]:
    value = document.get(key or field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be an object, got {_shown(value)}")
    return value


def _text(document: Mapping[str, Any], field: str, key: Optional[str] = None) -> Optional[str]:
    value = document.get(key or field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, got {_shown(value)}")
    return value


def _version(parameters: Mapping[str, Any]) -> Optional[str]:
    """``parameters.version``: any string (MLServer's ``"v0.1.0"``); a whole number is read as its digits."""
    value = parameters.get("version")
    if type(value) is int and value >= 0:
        return str(value)
    version = _text(parameters, "parameters.version", "version")
    if version is not None and ("/" in version or version.strip() != version):
        raise ValueError(f"parameters.version must not hold '/' or surrounding spaces, got {version!r}")
    return version


def _count(document: Mapping[str, Any], field: str) -> Optional[int]:
    value = document.get(field)
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"{field} must be a non-negative integer, got {_shown(value)}")
    return value


def _number(document: Mapping[str, Any], field: str) -> Optional[float]:
    value = document.get(field)
    if value is None:
        return None
    if type(value) not in (int, float) or value < 0:
        raise ValueError(f"{field} must be a non-negative number, got {_shown(value)}")
    return float(value)


def _flag(document: Mapping[str, Any], field: str) -> bool:
    value = document.get(field, False)
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false, got {_shown(value)}")
    return value


def _scheduling(value: Any) -> Optional[SchedulingPolicy]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"scheduling must be an object of SchedulingPolicy's fields, got {_shown(value)}")
    return SchedulingPolicy.from_mapping(value, "scheduling")


def _warmup(name: str, folder: str, value: Any) -> Optional[Tuple[Any, ...]]:
    """``warmup``: a list of request bodies (v1 or v2 JSON) and generated requests (a ``Warmup``'s fields:
    ``{"name", "inputs": {name: {"datatype", "dims", ...}}, "batch_size", "count"}``; an ``input_data_file``
    is read from the model's folder when relative). Checked now, as the model would check it."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"warmup must be a list of request bodies and generated requests, got {_shown(value)}")
    entries = tuple(_warmup_entry(folder, entry) for entry in value)
    declared_warmups(types.SimpleNamespace(warmup=list(entries)), name)
    return entries


def _warmup_entry(folder: str, entry: Any) -> Any:
    if not (isinstance(entry, dict) and isinstance(entry.get("inputs"), dict)):
        return entry  # a request body (a v2 body's inputs are a list), checked as the model checks it
    inputs = {}
    for input_name, spec in entry["inputs"].items():
        if isinstance(spec, dict) and isinstance(spec.get("input_data_file"), str):
            spec = {**spec, "input_data_file": os.path.join(folder, spec["input_data_file"])}
        inputs[input_name] = spec
    return Warmup(**{**entry, "inputs": inputs})


def _unknown(document: Mapping[str, Any], parameters: Mapping[str, Any]) -> Tuple[str, ...]:
    """The fields present that are neither ours nor MLServer's."""
    unknown: List[str] = [field for field in document if field not in KNOWN and field not in MLSERVER_IGNORED]
    unknown += [f"parameters.{field}" for field in parameters
                if field not in ("uri", "version", "extra", *MLSERVER_IGNORED_PARAMETERS)]
    return tuple(unknown)


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
