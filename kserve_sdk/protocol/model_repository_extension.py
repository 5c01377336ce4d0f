"""The v2 model repository extension: KServe's ``ModelRepositoryExtension`` class, and what the parameters of a
repository load request ask for (Triton's ``config`` override).

The server answers the v2 repository routes through its data plane (which also spreads a load or unload
to every worker); the class is for code written against KServe's import path
``kserve.protocol.model_repository_extension``, with KServe's method names and answers.
:func:`config_override` reads a load's parameters for the data plane: the fields of Triton's model
configuration this server can apply to a model it serves, each checked, everything else refused by name.
"""
import dataclasses
import inspect
import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from ..errors import InvalidInput, ModelNotFound, ModelNotReady

if TYPE_CHECKING:  # only named here: this package is the wire vocabulary, below the model layer
    from ..model_repository import ModelRepository


class ModelRepositoryExtension:
    """The v2 model repository extension over ``model_registry``, in this process."""

    def __init__(self, model_registry: "ModelRepository"):
        self._model_registry = model_registry

    async def index(self, filter_ready: Optional[bool] = False) -> List[Dict[str, str]]:
        """Every registered model as ``{"name", "state": "Ready" | "NotReady", "reason": ""}``; with
        ``filter_ready`` only the ready ones."""
        entries = []
        for name in list(self._model_registry.get_models()):
            ready = await self._model_registry.is_model_ready(name)
            if ready or not filter_ready:
                entries.append({"name": name, "state": "Ready" if ready else "NotReady", "reason": ""})
        return entries

    async def load(self, model_name: str) -> None:
        """Load the named model through the repository's ``load`` (sync or async). Raises ModelNotReady
        when loading fails or the model is not ready afterwards."""
        try:
            loaded = self._model_registry.load(model_name)
            if inspect.isawaitable(loaded):
                await loaded
        except Exception as e:
            raise ModelNotReady(model_name, f"Error type: {type(e).__name__} error msg: {e}") from e
        if not await self._model_registry.is_model_ready(model_name):
            raise ModelNotReady(model_name)

    async def unload(self, model_name: str) -> None:
        """Stop and remove the named model. Raises ModelNotFound when there is none."""
        try:
            self._model_registry.unload(model_name)
        except KeyError:
            raise ModelNotFound(model_name) from None


#: The load parameter holding a model configuration override, as a JSON string (Triton's).
CONFIG = "config"
#: The prefix of the load parameters that carry the files of a model directory (Triton's).
FILE_PREFIX = "file:"

INT32_MAX = 2 ** 31 - 1
UINT32_MAX = 2 ** 32 - 1
UINT64_MAX = 2 ** 64 - 1

#: What each level of the configuration may hold: the fields applied, and those that describe the model
#: (its name must be the model's own; platform, backend and the tensors are what the model's code says).
_TOP = ("name", "platform", "backend", "input", "output", "max_batch_size", "dynamic_batching", "instance_group")
_BATCHING = ("max_queue_delay_microseconds", "priority_levels", "default_priority_level", "default_queue_policy")
_QUEUE_POLICY = ("timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size")
_GROUP = ("name", "kind", "count")
#: Instance kinds a group may name: this server runs a model's calls on the CPU, never on a GPU of its own.
_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_MODEL")
_TIMEOUT_ACTIONS = ("REJECT", "DELAY")  # Triton's enum order: 0 is REJECT, 1 is DELAY


@dataclasses.dataclass(frozen=True)
class ConfigOverride:
    """What a repository load's ``config`` parameter changes in the model; None (or a field left out of
    ``scheduling``, which holds :class:`~kserve_sdk.scheduling.SchedulingPolicy` fields) leaves it as it is."""

    name: Optional[str] = None
    max_batch_size: Optional[int] = None
    max_queue_delay_microseconds: Optional[int] = None
    scheduling: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def config_override(parameters: Optional[Mapping[str, Any]]) -> Optional[ConfigOverride]:
    """The model configuration override a repository load's ``parameters`` carry (None: none).

    Refused with InvalidInput naming the problem: ``file:`` parameters (the files of a model directory), a
    ``config`` that is not a JSON object in a string, a field this server cannot apply or a value out of its
    range. Other parameters are ignored."""
    if not parameters:
        return None
    files = sorted(key for key in parameters if str(key).startswith(FILE_PREFIX))
    if files:
        raise InvalidInput(f"file: overrides are not supported: this server builds its models from code, not from a "
                           f"model directory, so it cannot load {', '.join(map(repr, files))}; send the 'config' "
                           "parameter alone to change a model's configuration")
    text = parameters.get(CONFIG)
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidInput("the load parameter 'config' must be a string holding the model configuration as JSON, "
                           f"got {type(text).__name__}")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"invalid config override: it is not JSON ({e})") from None
    return _read_config(_object(doc, "the configuration"))


def _read_config(doc: Dict[str, Any]) -> ConfigOverride:
    _only(doc, _TOP, "")
    name = doc.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidInput(f"invalid config override: name must be a string, got {name!r}")
    for tensors in ("input", "output"):
        if not isinstance(doc.get(tensors, []), list):
            raise InvalidInput(f"invalid config override: {tensors} must be a list")
    scheduling: Dict[str, Any] = {}
    delay = None
    batching = doc.get("dynamic_batching")
    if batching is not None:
        batching = _object(batching, "dynamic_batching")
        _only(batching, _BATCHING, "dynamic_batching.")
        delay = _integer(batching, "max_queue_delay_microseconds", UINT64_MAX, "dynamic_batching.")
        for field in ("priority_levels", "default_priority_level"):
            _put(scheduling, field, _integer(batching, field, UINT64_MAX, "dynamic_batching."))
        if batching.get("default_queue_policy") is not None:
            scheduling.update(_queue_policy(_object(batching["default_queue_policy"],
                                                    "dynamic_batching.default_queue_policy")))
    _put(scheduling, "instance_count", _instance_count(doc.get("instance_group")))
    return ConfigOverride(name, _integer(doc, "max_batch_size", INT32_MAX, ""), delay, scheduling)


def _queue_policy(policy: Dict[str, Any]) -> Dict[str, Any]:
    where = "dynamic_batching.default_queue_policy."
    _only(policy, _QUEUE_POLICY, where)
    fields: Dict[str, Any] = {}
    _put(fields, "default_timeout_microseconds", _integer(policy, "default_timeout_microseconds", UINT64_MAX, where))
    _put(fields, "max_queue_size", _integer(policy, "max_queue_size", UINT32_MAX, where))
    action = policy.get("timeout_action")
    if action is not None:
        if isinstance(action, str) and action.upper() in _TIMEOUT_ACTIONS:
            fields["timeout_action"] = action.upper()
        elif type(action) is int and 0 <= action < len(_TIMEOUT_ACTIONS):
            fields["timeout_action"] = _TIMEOUT_ACTIONS[action]
        else:
            raise InvalidInput(f"invalid config override: {where}timeout_action must be REJECT or DELAY, "
                               f"got {action!r}")
    allow = policy.get("allow_timeout_override")
    if allow is not None:
        if not isinstance(allow, bool):
            raise InvalidInput(f"invalid config override: {where}allow_timeout_override must be true or false, "
                               f"got {allow!r}")
        fields["allow_timeout_override"] = allow
    return fields


def _instance_count(groups: Any) -> Optional[int]:
    """The ``count`` of the one instance group a configuration may name (Triton's default: 1); None for no
    group."""
    if groups is None or groups == []:
        return None
    if not isinstance(groups, list):
        raise InvalidInput("invalid config override: instance_group must be a list")
    if len(groups) > 1:
        raise InvalidInput(f"invalid config override: instance_group names {len(groups)} groups; this server runs "
                           "one group of instances per model")
    group = _object(groups[0], "instance_group[0]")
    _only(group, _GROUP, "instance_group[0].")
    kind = group.get("kind")
    if kind is not None and (not isinstance(kind, str) or kind.upper() not in _KINDS):
        raise InvalidInput(f"invalid config override: instance_group[0].kind {kind!r} cannot be honoured; this "
                           f"server takes {', '.join(_KINDS)} (it runs no GPU instances)")
    count = _integer(group, "count", INT32_MAX, "instance_group[0].")
    if count == 0:
        raise InvalidInput("invalid config override: instance_group[0].count must be 1 or more, got 0")
    return 1 if count is None else count


def _only(doc: Dict[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(set(doc) - set(known))
    if unknown:
        raise InvalidInput(f"invalid config override: {', '.join(where + key for key in unknown)} cannot be applied "
                           f"by this server; {where.rstrip('.') or 'the configuration'} takes {', '.join(known)}")


def _object(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"invalid config override: {what} must be a JSON object, got {_json_type(value)}")
    return value


def _integer(doc: Dict[str, Any], key: str, most: int, where: str) -> Optional[int]:
    """``doc[key]`` as an integer from 0 to ``most`` (None when absent); as proto3's JSON mapping, a number or a
    string of digits (how 64-bit fields are written)."""
    value = doc.get(key)
    if value is None:
        return None
    number = None
    if type(value) is int:
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is None or not 0 <= number <= most:
        raise InvalidInput(f"invalid config override: {where}{key} must be an integer from 0 to {most}, "
                           f"got {value!r}")
    return number


def _put(fields: Dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        fields[key] = value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
