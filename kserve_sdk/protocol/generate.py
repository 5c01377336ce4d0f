"""The Open Inference Protocol generate extension's JSON: ``{"text_input": ..., "parameters": {...}}`` in,
flat fields out (``{"model_name", "model_version", "text_output": ...}``)."""
from typing import Any, Dict, List, Optional

import numpy as np

from .infer_type import InferResponse


def is_tensor_request(doc: Any) -> bool:
    """Whether a generate body is a v2 tensor request (has ``inputs``) rather than the generate form."""
    return isinstance(doc, dict) and "inputs" in doc


def _plain(value: np.ndarray) -> Any:
    flat = [v.decode("utf-8", errors="replace") if isinstance(v, (bytes, bytearray)) else v
            for v in value.reshape(-1).tolist()]
    return flat[0] if len(flat) == 1 else flat


def to_generate_json(item: Any, model_name: str, model_version: Optional[str]) -> Dict[str, Any]:
    """One response in generate form: output tensors become fields (one-element tensors become scalars)."""
    if isinstance(item, InferResponse):
        out: Dict[str, Any] = {"model_name": item.model_name or model_name,
                               "model_version": item.model_version or model_version}
        for tensor in item.outputs:
            out[tensor.name] = _plain(tensor.as_numpy())
        return out
    if isinstance(item, dict):
        if "model_name" not in item:
            item = {"model_name": model_name, "model_version": model_version, **item}
        return item
    return {"model_name": model_name, "model_version": model_version, "text_output": item}


#: String fields that name the answer rather than carry its text: the last response's value stands.
_NOT_CONCATENATED = ("model_name", "model_version", "id")


def merge_generate(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    """What ``/generate`` answers for a streaming model: string fields concatenated across the responses
    in order, every other field from the last response."""
    merged: Dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            if isinstance(value, str) and isinstance(merged.get(key), str) and key not in _NOT_CONCATENATED:
                merged[key] += value
            else:
                merged[key] = value
    return merged
