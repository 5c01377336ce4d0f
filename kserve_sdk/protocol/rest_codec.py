"""The v2 REST wire format: JSON bodies and Triton's binary-data extension, both ways.

With the extension, a body is ``<JSON header><raw tensor 1><raw tensor 2>...`` and the
``Inference-Header-Content-Length`` header gives the JSON header's size; each binary tensor says its
size in ``parameters.binary_data_size``. Decoded binary inputs are memoryview slices of the body, so
``as_numpy()`` is a view and no tensor byte is copied.
"""
from math import prod
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Type, Union

import numpy as np
import orjson

from ..errors import InvalidInput
from .infer_tensors import InferInput, InferMessage, InferOutput, RequestedOutput
from .rest.json_body import loads_json, require_object
from .tensor import (
    DataDoesNotFit,
    Tensor,
    check_bytes_elements,
    check_tensor_header,
    expected_nbytes,
    in_shared_memory,
)

if TYPE_CHECKING:  # for the annotations only: infer_type's classes call this module
    from .infer_type import InferRequest, InferResponse

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def json_default(obj: Any) -> Any:
    """orjson fallback for what it cannot write natively: numpy scalars/odd arrays, bytes, our types."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).decode("utf-8")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (InferMessage, Tensor)):
        return obj.to_dict()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; numpy arrays are written natively, without ``tolist()``."""
    return orjson.dumps(obj, default=json_default, option=_DUMPS_OPTIONS)


def parse_json_length(value: Optional[str], body_length: int) -> Optional[int]:
    """Validate the ``Inference-Header-Content-Length`` header value against the body size."""
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise InvalidInput(f"Inference-Header-Content-Length must be an integer, got {value!r}") from None
    if length < 0 or length > body_length:
        raise InvalidInput(
            f"Inference-Header-Content-Length {length} is outside the request body of {body_length} bytes"
        )
    return length


def decode_infer_request(cls: Type["InferRequest"], body: bytes, json_length: Optional[int],
                         model_name: str) -> "InferRequest":
    """Decode a v2 REST infer body (plain JSON when ``json_length`` is None) into a ``cls``."""
    header = body if json_length is None else memoryview(body)[:json_length]
    return infer_request_from_dict(cls, loads_json(header), model_name, body, json_length)


def infer_request_from_dict(
    cls: Type["InferRequest"], doc: Any, model_name: str, body: Union[bytes, memoryview], json_length: Optional[int]
) -> "InferRequest":
    """Build a ``cls`` (an InferRequest) from a parsed v2 JSON header; binary tensors are cut from ``body``."""
    doc = require_object(doc, name_type=False)
    inputs = doc.get("inputs")
    if inputs is None:
        raise InvalidInput(f"the request for model '{model_name}' has no 'inputs'")
    if not isinstance(inputs, list):
        raise InvalidInput('Expected "inputs" to be a list')
    tensors, end = _decode_tensors(inputs, InferInput, body, json_length, "input")
    check_bytes_elements(tensors)
    if json_length is not None and end != len(body):
        raise InvalidInput(f"{len(body) - end} bytes follow the binary inputs but no input claims them")
    return cls(
        model_name=model_name,
        infer_inputs=tensors,
        request_id=_optional_str(doc, "id"),
        parameters=_optional_dict(doc, "parameters", "request"),
        request_outputs=_requested_outputs(doc.get("outputs")),
    )


def decode_infer_response(cls: Type["InferResponse"], doc: Any, body: Union[bytes, memoryview],
                          json_length: Optional[int]) -> "InferResponse":
    """Build a ``cls`` (an InferResponse) from a parsed v2 JSON response (and its binary tail, if any)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("outputs"), list):
        raise InvalidInput(f"not a v2 inference response: {str(doc)[:200]}")
    tensors, _ = _decode_tensors(doc["outputs"], InferOutput, body, json_length, "output")
    return cls(
        response_id=doc.get("id"),
        model_name=doc.get("model_name"),
        model_version=doc.get("model_version"),
        infer_outputs=tensors,
        parameters=doc.get("parameters"),
    )


def _decode_tensors(entries: List, cls: type, body, json_length: Optional[int], kind: str) -> Tuple[List, int]:
    view = memoryview(body)
    offset = json_length or 0
    tensors, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise InvalidInput(f"each {kind} must be a JSON object, got {type(entry).__name__}")
        name: Any = entry.get("name")  # a str once check_tensor_header passes
        shape = check_tensor_header(name, entry.get("shape"), entry.get("datatype"))
        if name in seen:
            raise InvalidInput(f"duplicate {kind} name '{name}'")
        seen.add(name)
        params = _optional_dict(entry, "parameters", f"{kind} '{name}'")
        tensor = cls(name, shape, entry["datatype"], parameters=params)
        data = entry.get("data")
        if data is not None:
            _check_json_data(name, data, shape, kind)
            tensor._data = data
        elif params and "binary_data_size" in params:
            size = _binary_size(name, params["binary_data_size"], tensor.datatype, shape, len(view) - offset,
                                json_length)
            tensor._raw_data = view[offset:offset + size]
            offset += size
        elif not in_shared_memory(tensor):  # shared-memory content is read by the data plane
            raise InvalidInput(f"'data' field is missing for {kind} '{name}'")
        tensors.append(tensor)
    return tensors, offset


def _check_json_data(name: str, data: Any, shape: List[int], kind: str) -> None:
    if not isinstance(data, list):
        raise InvalidInput(f"{kind} '{name}': 'data' must be a list, got {type(data).__name__}")
    # A flat list is checked here; nested lists are checked when the tensor is read (as_numpy).
    if data and not isinstance(data[0], list) and len(data) != prod(shape):
        raise InvalidInput(f"{kind} '{name}': {len(data)} values given but shape {shape} needs {prod(shape)}")


def _binary_size(name: str, size: Any, datatype: str, shape: List[int], left: int,
                 json_length: Optional[int]) -> int:
    if json_length is None:
        raise InvalidInput(
            f"input '{name}' has binary_data_size but the request has no Inference-Header-Content-Length header"
        )
    if type(size) is not int or size < 0:
        raise InvalidInput(f"input '{name}': binary_data_size must be a non-negative integer, got {size!r}")
    if size > left:
        raise InvalidInput(f"input '{name}': binary_data_size {size} runs past the end of the body ({left} bytes left)")
    expected = expected_nbytes(datatype, shape)
    if expected >= 0 and size != expected:
        raise InvalidInput(
            f"input '{name}': binary_data_size {size} does not match shape {shape} of {datatype} ({expected} bytes)"
        )
    return size


def _optional_dict(doc: Dict, key: str, what: str) -> Optional[Dict]:
    value = doc.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{what} '{key}' must be a JSON object")
    return value


def _optional_str(doc: Dict, key: str) -> Optional[str]:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"'{key}' must be a string")
    return value


def _requested_outputs(outputs: Any) -> Optional[List[RequestedOutput]]:
    if outputs is None:
        return None
    if not isinstance(outputs, list):
        raise InvalidInput('Expected "outputs" to be a list')
    result = []
    for entry in outputs:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidInput("each requested output must be an object with a 'name'")
        result.append(RequestedOutput(entry["name"], _optional_dict(entry, "parameters", "output")))
    return result


def _encode_tensors(pairs, doc: Dict, key: str) -> Tuple[bytes, Optional[int]]:
    """Write tensors into ``doc[key]``; binary ones go after the JSON header."""
    entries, raws = [], []
    for tensor, binary in pairs:
        entry = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        params = {k: v for k, v in (tensor.parameters or {}).items() if k not in ("binary_data_size", "binary_data")}
        if in_shared_memory(tensor):
            pass  # the content is in the client's region already
        elif binary:
            raw = tensor.raw_bytes()
            params["binary_data_size"] = len(raw)
            raws.append(raw)
        else:
            entry["data"] = tensor.json_data()
        if params:
            entry["parameters"] = params
        entries.append(entry)
    doc[key] = entries
    header = dumps(doc)
    if raws:
        return b"".join([header, *raws]), len(header)
    return header, None


def encode_infer_response(response: "InferResponse", json_only: bool = False) -> Tuple[bytes, Optional[int]]:
    """Encode a response as v2 REST bytes; ``json_length`` is None unless some output is binary.
    ``json_only`` writes every output as JSON (Server-Sent Events carry no binary part)."""
    doc: Dict[str, Any] = {"id": response.id, "model_name": response.model_name,
                           "model_version": response.model_version}
    if response.parameters:
        doc["parameters"] = response.parameters
    pairs = response.selected_outputs()
    if json_only:
        pairs = [(tensor, False) for tensor, _ in pairs]
    try:
        return _encode_tensors(pairs, doc, "outputs")
    except DataDoesNotFit as e:  # on every route that writes an answer (streams too), it is the model's fault
        raise e.as_model_error(str(response.model_name)) from None


def encode_infer_request(request: "InferRequest") -> Tuple[bytes, Optional[int]]:
    """Encode a request as v2 REST bytes (binary inputs stay binary), for forwarding to a predictor."""
    doc: Dict[str, Any] = {}
    if request.id:
        doc["id"] = request.id
    if request.parameters:
        doc["parameters"] = request.parameters
    if request.request_outputs:
        doc["outputs"] = [
            {"name": o.name, **({"parameters": o.parameters} if o.parameters else {})} for o in request.request_outputs
        ]
    pairs = [(t, t._raw_data is not None or t.binary_data) for t in request.inputs]
    return _encode_tensors(pairs, doc, "inputs")
