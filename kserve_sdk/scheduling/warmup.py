"""Model warm-up that gates readiness (Triton's ``model_warmup``).

A model lists warm-up requests in ``model.warmup``: request bodies as a client sends them (a v1 or v2 JSON
dict) and :class:`Warmup` items that generate their inputs as Triton's ``ModelWarmup`` does (zeros, random
values or a file's bytes, of a datatype and shape, repeated ``count`` times). They run through the data
plane (preprocess, predict, postprocess, adaptive batching, the model's queue) after ``load()``; the model
answers not ready until every one has passed. See docs/warmup.md.
"""
import asyncio
import copy
import dataclasses
import os
from math import prod
from time import perf_counter
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np

from ..errors import InvalidInput, ModelError
from ..logging import logger
from ..protocol.binary import deserialize_bytes_tensor
from ..protocol.dtypes import DATATYPES, np_dtype_of
from ..protocol.infer_type import InferInput, InferRequest

if TYPE_CHECKING:
    from ..dataplane import DataPlane

#: How a generated input is filled: Triton's ``zero_data`` and ``random_data`` (``input_data_file`` is a field).
DATA_KINDS = ("zero", "random")

#: Triton's config names of the datatypes whose v2 name differs (the others are ``TYPE_`` + the v2 name).
_TRITON_NAMES = {"TYPE_STRING": "BYTES"}


def _unknown(what: str, unknown: Mapping[str, Any], known: Sequence[str]) -> ValueError:
    return ValueError(f"{what}: unknown field(s) {', '.join(map(repr, sorted(unknown)))}; known: {', '.join(known)}")


def _positive_int(what: str, field: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{what}: {field} must be an integer of at least 1, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True, init=False)
class WarmupInput:
    """One generated input of a :class:`Warmup` (Triton's ``ModelWarmup.Input``).

    - ``datatype``: a v2 datatype (``"FP32"``, ``"INT64"``, ``"BYTES"`` ...; Triton's ``"TYPE_FP32"`` works too).
    - ``dims``: the shape of one sample, without the batch dimension.
    - ``data``: ``"zero"`` (the default) or ``"random"``; random BYTES are zeros (empty), as in Triton.
    - ``input_data_file``: instead of ``data``, a file holding one sample's raw bytes in row-major order
      (BYTES: each element a 4-byte little-endian length, then its bytes); relative paths are read from the
      server's working directory. (``data`` then reads ``"file"``.)
    """

    datatype: str
    dims: Tuple[int, ...]
    data: str
    input_data_file: Optional[str]

    def __init__(self, datatype: str, dims: Sequence[int], data: Optional[str] = None,
                 input_data_file: Optional[str] = None, **unknown: Any):
        self._set("WarmupInput", {"datatype": datatype, "dims": dims, "data": data,
                                  "input_data_file": input_data_file, **unknown})

    @classmethod
    def of(cls, spec: Any, what: str) -> "WarmupInput":
        """An input from what ``Warmup(inputs=...)`` maps a name to: a WarmupInput, a tuple
        ``(datatype, dims[, data])`` or a dict of WarmupInput's fields; errors start with ``what``."""
        if isinstance(spec, WarmupInput):
            return spec
        if isinstance(spec, tuple) and len(spec) in (2, 3):
            fields = dict(zip(("datatype", "dims", "data"), spec, strict=False))
        elif isinstance(spec, Mapping):
            fields = dict(spec)
        else:
            raise ValueError(f"{what}: expected a WarmupInput, a (datatype, dims[, data]) tuple or a dict of "
                             f"WarmupInput's fields, got {type(spec).__name__}")
        made = cls.__new__(cls)
        made._set(what, fields)
        return made

    def _set(self, what: str, fields: Dict[str, Any]) -> None:
        known = ("datatype", "dims", "data", "input_data_file")
        unknown = {name: value for name, value in fields.items() if name not in known}
        if unknown:
            raise _unknown(what, unknown, known)
        for name in ("datatype", "dims"):
            if name not in fields:
                raise ValueError(f"{what}: {name} is missing")
        data, input_data_file = fields.get("data"), fields.get("input_data_file")
        if input_data_file is not None and data is not None:
            raise ValueError(f"{what}: give data or input_data_file, not both")
        if data is not None and data not in DATA_KINDS:
            raise ValueError(f"{what}: data must be one of {', '.join(DATA_KINDS)}, got {data!r}")
        set_field = object.__setattr__  # a frozen dataclass sets its fields once, here
        set_field(self, "datatype", _datatype(what, fields["datatype"]))
        set_field(self, "dims", _dims(what, fields["dims"]))
        set_field(self, "data", "file" if input_data_file is not None else data or "zero")
        set_field(self, "input_data_file", input_data_file)
        if input_data_file is not None:
            self._check_file(what, input_data_file)

    def _check_file(self, what: str, path: Any) -> None:
        if not isinstance(path, str) or not os.path.isfile(path):
            raise ValueError(f"{what}: input_data_file {path!r} is not a file")
        itemsize = (np_dtype_of(self.datatype) or np.dtype(np.object_)).itemsize
        if self.datatype != "BYTES" and os.path.getsize(path) != prod(self.dims) * itemsize:
            raise ValueError(f"{what}: input_data_file {path!r} holds {os.path.getsize(path)} bytes; dims "
                             f"{list(self.dims)} of {self.datatype} need {prod(self.dims) * itemsize}")

    def array(self, name: str, batch_size: int) -> np.ndarray:
        """The input's content: ``batch_size`` samples of ``dims``."""
        shape = (batch_size, *self.dims)
        dtype = np_dtype_of(self.datatype)
        if self.data == "file":
            return np.broadcast_to(self._sample_from_file(name), shape).copy()
        if self.datatype == "BYTES":  # random BYTES are zeros, as in Triton
            return np.full(shape, b"", dtype=np.object_)
        if self.data == "zero":
            return np.zeros(shape, dtype=dtype)
        return _random(self.datatype, shape)

    def _sample_from_file(self, name: str) -> np.ndarray:
        with open(self.input_data_file, "rb") as f:  # type: ignore[arg-type]  # set when data is "file"
            raw = f.read()
        if self.datatype == "BYTES":
            return deserialize_bytes_tensor(raw, prod(self.dims), name).reshape(self.dims)
        return np.frombuffer(raw, dtype=np_dtype_of(self.datatype)).reshape(self.dims)


def _datatype(what: str, datatype: Any) -> str:
    name = datatype.upper() if isinstance(datatype, str) else datatype
    if isinstance(name, str) and name.startswith("TYPE_"):
        name = _TRITON_NAMES.get(name, name[len("TYPE_"):])
    if name not in DATATYPES:
        raise ValueError(f"{what}: unknown datatype {datatype!r}; one of {', '.join(sorted(DATATYPES))}")
    return name


def _dims(what: str, dims: Any) -> Tuple[int, ...]:
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence) \
            or any(type(d) is not int or d < 0 for d in dims):
        raise ValueError(f"{what}: dims must be a list of non-negative integers (the shape of one sample, "
                         f"without the batch dimension), got {dims!r}")
    return tuple(dims)


def _random(datatype: str, shape: Tuple[int, ...]) -> np.ndarray:
    """Random values of a datatype: floats in [0, 1), integers in [0, 100), booleans; BF16 as its bit patterns."""
    rng = np.random.default_rng()
    if datatype == "BOOL":
        return rng.random(shape) < 0.5
    if datatype == "BF16":  # the upper half of FP32 values in [0, 1)
        return (rng.random(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    dtype = np_dtype_of(datatype)
    if datatype.startswith("FP"):
        return rng.random(shape).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


@dataclasses.dataclass(frozen=True, init=False)
class Warmup:
    """A warm-up request with generated inputs (Triton's ``ModelWarmup``), for ``model.warmup``:

    ``Warmup(name="zeros", inputs={"x": ("FP32", [4])}, batch_size=8, count=2)``

    - ``name``: what the logs call it.
    - ``inputs``: input name -> :class:`WarmupInput` (or ``(datatype, dims[, "zero" | "random"])``, or a
      dict of WarmupInput's fields). Each input's shape is ``[batch_size, *dims]``.
    - ``batch_size``: the first dimension of every input (at least 1).
    - ``count``: how many times the request is sent (at least 1).

    A wrong field is a ValueError naming it, raised here, when the model is built.
    """

    name: str
    inputs: Mapping[str, WarmupInput]
    batch_size: int
    count: int

    def __init__(self, name: str = "", inputs: Optional[Mapping[str, Any]] = None, batch_size: int = 1,
                 count: int = 1, **unknown: Any):
        what = f"Warmup {name!r}" if name else "Warmup"
        if unknown:
            raise _unknown(what, unknown, ("name", "inputs", "batch_size", "count"))
        if not isinstance(name, str):
            raise ValueError(f"Warmup: name must be a string, got {name!r}")
        if not isinstance(inputs, Mapping) or not inputs:
            raise ValueError(f"{what}: inputs must map each input's name to its datatype and dims, got {inputs!r}")
        for input_name in inputs:
            if not isinstance(input_name, str) or not input_name:
                raise ValueError(f"{what}: inputs: an input name must be a non-empty string, got {input_name!r}")
        set_field = object.__setattr__  # a frozen dataclass sets its fields once, here
        set_field(self, "name", name)
        set_field(self, "inputs", {n: WarmupInput.of(spec, f"{what}: input {n!r}") for n, spec in inputs.items()})
        set_field(self, "batch_size", _positive_int(what, "batch_size", batch_size))
        set_field(self, "count", _positive_int(what, "count", count))

    def request(self, model_name: str) -> InferRequest:
        """A v2 request to ``model_name`` with freshly generated inputs."""
        tensors = []
        for name, spec in self.inputs.items():
            array = spec.array(name, self.batch_size)
            tensors.append(InferInput(name, list(array.shape), spec.datatype, data=array))
        return InferRequest(model_name=model_name, infer_inputs=tensors, request_id=self.name or None)


# --- a model's warm-up list -------------------------------------------------------------------------------------
class WarmupItem(NamedTuple):
    """One entry of ``model.warmup``, ready to send: where it is (``label``), how many times (``runs``), and
    ``build()``, which makes a fresh request body for each run (a model may change what it is given)."""

    label: str
    runs: int
    build: Callable[[], Any]


def declared_warmups(model: Any, model_name: str) -> List[WarmupItem]:
    """The warm-up requests ``model`` declares in its ``warmup`` attribute (none when it has none, or when
    ``warmup`` is a method of its own). A wrong entry is a ValueError naming the model and the entry."""
    declared = getattr(model, "warmup", None)
    if declared is None or (callable(declared) and not isinstance(declared, (list, tuple))):
        return []
    if not isinstance(declared, (list, tuple)):
        raise ValueError(f"model '{model_name}': warmup must be a list of request bodies (dicts) and "
                         f"kserve_sdk.Warmup items, got {type(declared).__name__}")
    return [_item(model_name, index, entry) for index, entry in enumerate(declared)]


def _item(model_name: str, index: int, entry: Any) -> WarmupItem:
    where = f"warmup[{index}]"
    if isinstance(entry, Warmup):
        label = f"{where} ({entry.name!r})" if entry.name else f"{where} (a Warmup)"
        return WarmupItem(label, entry.count, lambda: entry.request(model_name))
    if not isinstance(entry, dict):
        raise ValueError(f"model '{model_name}': {where} is a {type(entry).__name__}, not a request body (a dict) "
                         "or a kserve_sdk.Warmup")
    if "instances" in entry or "inputs" not in entry:  # a v1 body, given to the model as it is
        return WarmupItem(f"{where} (a v1 request)", 1, lambda: copy.deepcopy(entry))
    try:  # decoded as the REST v2 route decodes a JSON body
        InferRequest.from_dict(copy.deepcopy(entry), model_name)
    except InvalidInput as e:
        raise ValueError(f"model '{model_name}': {where} is not a v2 request: {e}") from None
    request_id = entry.get("id")
    label = f"{where} ({request_id!r})" if isinstance(request_id, str) and request_id else f"{where} (a v2 request)"
    return WarmupItem(label, 1, lambda: InferRequest.from_dict(copy.deepcopy(entry), model_name))


# --- running them -----------------------------------------------------------------------------------------------
def _described(error: BaseException) -> str:
    """The error as the log and the repository index say it: a model's own exception by its own type."""
    cause = error.__cause__ if isinstance(error, ModelError) and error.__cause__ is not None else error
    return f"{type(cause).__name__}: {cause}"


async def warm_up(dataplane: "DataPlane", name: str, model: Any) -> Optional[str]:
    """Send ``model``'s warm-up requests (registered as ``name``) through the data plane, one after another;
    the model is not ready until they have all passed. Returns None when they passed (one INFO line: how
    many, how long), else why not: a failure is logged once (the model, the entry, the error) and kept as the
    model's reason in the repository index. A server that stops, or a model unloaded or replaced meanwhile,
    ends the warm-up quietly."""
    registry = dataplane.model_registry
    try:
        items = declared_warmups(model, name)
    except ValueError as e:
        return _failed(registry, name, model, str(e))
    if not items:
        registry.end_warmup(name, model, None)
        return None
    registry.begin_warmup(name, model)
    start, sent = perf_counter(), 0
    for item in items:
        for run in range(item.runs):
            if dataplane.draining or not _still_served(registry, name, model):
                return "the warm-up stopped: the server is stopping or the model was unloaded"
            try:
                await dataplane.infer(name, item.build(), {}, model=model)
            except Exception as e:
                if dataplane.draining:
                    return "the warm-up stopped: the server is stopping"
                label = item.label if item.runs == 1 else f"{item.label}, run {run + 1} of {item.runs}"
                return _failed(registry, name, model, f"warm-up {label} failed: {_described(e)}")
            sent += 1
    logger.info("model '%s' warmed up: %d warm-up request%s in %.1f ms", name, sent, "" if sent == 1 else "s",
                (perf_counter() - start) * 1000)
    registry.end_warmup(name, model, None)
    return None


def _still_served(registry: Any, name: str, model: Any) -> bool:
    """Whether ``model`` is still the one served as ``name`` (not unloaded, nor replaced)."""
    return registry.get_model(name) is model


def _failed(registry: Any, name: str, model: Any, reason: str) -> str:
    logger.error("model '%s' is not ready: %s", name, reason)
    registry.end_warmup(name, model, reason)
    return reason


#: The warm-ups running in the background; held here, as the event loop holds its tasks weakly.
_running: Set["asyncio.Task[Optional[str]]"] = set()


def start_warmups(dataplane: "DataPlane") -> None:
    """Warm up every served model that declares warm-ups, each in a background task of its own on the running
    loop, so the server answers (live; the model not ready) meanwhile. Each worker warms its own models."""
    registry = dataplane.model_registry
    for name, model in list(registry.get_models().items()):
        if registry.warming_up(name) or getattr(model, "warmup", None):
            registry.begin_warmup(name, model)  # not ready from now on, before the task's first step
            task = asyncio.ensure_future(warm_up(dataplane, name, model))
            _running.add(task)
            task.add_done_callback(_running.discard)

