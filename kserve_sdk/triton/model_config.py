"""Triton's model configuration extension: a served model described in the shape of Triton's
``ModelConfig`` (model_config.proto), as JSON field names; gRPC parses the same dict into the message.

The model's scheduling policy comes in already rendered (``SchedulingPolicy.triton_config``, passed by the
data plane), so this module knows Triton's shapes and nothing of the scheduler."""
from typing import Any, Dict, List, Mapping, Optional

from ..errors import InferenceError

#: The platform and backend a configuration names.
PLATFORM = "kserve_sdk"

#: Open Inference Protocol datatypes -> Triton's DataType names.
TRITON_TYPES = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64", "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING", "BF16": "TYPE_BF16",
}


def triton_config(name: str, inputs: List[Any], outputs: List[Any], max_batch_size: Optional[int],
                  max_latency_ms: float, scheduling: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The configuration of model ``name``: its tensors (``get_input_types()`` / ``get_output_types()``)
    and, when it batches (``max_batch_size`` above 1), ``max_batch_size`` and ``dynamic_batching`` with
    the batch's wait. A batching model's dims leave out the first dimension, the one batches grow along,
    as Triton's do. ``scheduling``: the fields of the model's scheduling policy (``instance_group``,
    ``dynamic_batching``'s priorities and queue policy), merged in beside the batching ones."""
    batch = int(max_batch_size) if max_batch_size and max_batch_size > 1 else 0
    config: Dict[str, Any] = {
        "name": name, "platform": PLATFORM, "backend": PLATFORM, "max_batch_size": batch,
        "input": [_tensor(name, "input", t, batch) for t in inputs or ()],
        "output": [_tensor(name, "output", t, batch) for t in outputs or ()],
    }
    if batch:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": int(max_latency_ms * 1000)}
    for field, value in (scheduling or {}).items():
        if field == "dynamic_batching":
            config["dynamic_batching"] = {**config.get("dynamic_batching", {}), **value}
        else:
            config[field] = value
    return config


def _tensor(model: str, kind: str, tensor: Any, batch: int) -> Dict[str, Any]:
    """One ``ModelInput`` / ``ModelOutput``; a description that is not {name, datatype, shape} is the
    model's fault (500)."""
    try:
        shape = [int(d) for d in tensor.get("shape", ())]
        return {"name": str(tensor["name"]), "data_type": TRITON_TYPES.get(str(tensor["datatype"]).upper(),
                                                                          "TYPE_INVALID"),
                "dims": shape[1:] if batch and shape else shape}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise InferenceError(f"model '{model}' describes an {kind} as {tensor!r}: get_{kind}_types() must "
                             "return dicts with name, datatype and shape") from None
