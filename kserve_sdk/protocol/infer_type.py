"""The v2 inference request and response types, under KServe's names and signatures.

``InferRequest`` is what a model's ``preprocess``/``predict`` receive for v2 REST and gRPC calls;
``InferResponse`` is what they return. Wire encoding lives in :mod:`kserve_sdk.protocol.rest_codec`
(REST) and :mod:`kserve_sdk.protocol.grpc.convert` (gRPC); these classes only hold the data. The
tensor classes come from :mod:`.infer_tensors`, below the codecs, and are re-exported here.
"""
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ..constants.constants import GRPC_CONTENT_DATATYPE_MAPPINGS
from ..errors import InvalidInput
from ..utils.optional_packages import require_pandas
from .binary import deserialize_bytes_tensor as _deserialize_bytes
from .binary import serialize_bytes_tensor
from .infer_tensors import InferInput, InferMessage, InferOutput, RequestedOutput, param_value

__all__ = [
    "InferInput",
    "InferOutput",
    "RequestedOutput",
    "InferRequest",
    "InferResponse",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
    "get_content",
    "to_grpc_parameters",
    "to_http_parameters",
]


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """KServe's helper: a 0-d object array holding the length-prefixed encoding of a BYTES tensor."""
    out = np.empty((), dtype=np.object_)
    out[()] = serialize_bytes_tensor(input_tensor)
    return out


def deserialize_bytes_tensor(encoded_tensor: Union[bytes, memoryview]) -> np.ndarray:
    """KServe's helper: the elements of a length-prefixed BYTES tensor, as a 1-D object array of bytes.
    InvalidInput when a length points past the end."""
    return _deserialize_bytes(encoded_tensor)


def get_content(datatype: str, data: Any) -> List[Any]:
    """The values of a gRPC ``InferTensorContents`` for a tensor of ``datatype``, as a list (FP16 has no typed
    contents field: its values come as raw contents, so this is empty). InvalidInput for another datatype."""
    if datatype == "FP16":
        return []
    field = GRPC_CONTENT_DATATYPE_MAPPINGS.get(datatype)
    if field is None:
        raise InvalidInput(f"invalid content type: datatype {datatype!r} has no typed gRPC contents field")
    return list(getattr(data, field))


def to_grpc_parameters(parameters: Mapping[str, Any]) -> Dict[str, Any]:
    """REST parameters (plain values) as gRPC ``InferParameter`` s: text, bool, int (int64, or uint64 past its
    range), float (double); an ``InferParameter`` is kept as it is. InvalidInput for any other value."""
    from .grpc.grpc_predict_v2_pb2 import InferParameter

    converted = {}
    for key, value in parameters.items():
        if isinstance(value, InferParameter):
            converted[key] = value
        elif isinstance(value, str):
            converted[key] = InferParameter(string_param=value)
        elif isinstance(value, bool):
            converted[key] = InferParameter(bool_param=value)
        elif isinstance(value, int):
            converted[key] = InferParameter(uint64_param=value) if value >= 2 ** 63 else InferParameter(
                int64_param=value)
        elif isinstance(value, float):
            converted[key] = InferParameter(double_param=value)
        else:
            raise InvalidInput(f"to_grpc: invalid parameter value: {value!r} (parameter {key!r})")
    return converted


def to_http_parameters(parameters: Mapping[str, Any]) -> Dict[str, Any]:
    """gRPC ``InferParameter`` s as REST parameters: each becomes the value it holds; plain values stay."""
    return {key: param_value(value) for key, value in parameters.items()}


def _as_rest(body: bytes, json_length: Optional[int]) -> Tuple[Union[bytes, Dict], Optional[int]]:
    """KServe's ``to_rest`` shape: a plain dict when there is no binary part, else the bytes."""
    if json_length is None:
        import orjson

        return orjson.loads(body), None
    return body, json_length


def _fields(obj: Any, names: Tuple[str, ...]) -> Dict[str, Any]:
    """The named attributes of a pydantic-style object that are set, as a v2 JSON object."""
    return {name: getattr(obj, name) for name in names if getattr(obj, name, None) is not None}


class InferRequest(InferMessage):
    """A v2 inference request: model name, input tensors, parameters and requested outputs."""

    def __init__(
        self,
        model_name: str,
        infer_inputs: List[InferInput],
        request_id: Optional[str] = None,
        raw_inputs: Optional[List[bytes]] = None,
        from_grpc: Optional[bool] = False,
        parameters: Optional[Dict] = None,
        request_outputs: Optional[List[RequestedOutput]] = None,
        model_version: Optional[str] = None,
    ):
        self.id = request_id
        self.model_name = model_name
        self.model_version = model_version
        self.inputs = infer_inputs
        self.parameters = parameters
        # KServe's API: the instance's flag shadows the classmethod of the same name, which builds a request
        self.from_grpc = from_grpc  # type: ignore[method-assign,assignment]
        self.request_outputs = request_outputs
        self._use_raw_outputs = bool(raw_inputs)
        if raw_inputs:
            if len(raw_inputs) != len(infer_inputs):
                raise InvalidInput(
                    f"{len(raw_inputs)} raw input contents given for {len(infer_inputs)} inputs"
                )
            for tensor, raw in zip(infer_inputs, raw_inputs, strict=True):
                tensor._raw_data = raw

    @property
    def use_binary_outputs(self) -> bool:
        """Whether outputs go back as raw bytes by default.

        gRPC: when the inputs came as raw contents. REST: the request's ``binary_data_output``
        parameter (each requested output's ``binary_data`` overrides it).
        """
        if self.from_grpc:  # type: ignore[truthy-function]  # the instance's flag (see __init__)
            return self._use_raw_outputs or bool(self.parameters and param_value(
                self.parameters.get("binary_data_output", False)))
        return bool(self.parameters and param_value(self.parameters.get("binary_data_output", False)))

    @classmethod
    def from_bytes(cls, req_bytes: bytes, json_length: Optional[int], model_name: str) -> "InferRequest":
        """Decode a REST body that uses the binary-data extension (JSON header of ``json_length`` bytes),
        or plain JSON when ``json_length`` is None."""
        from .rest_codec import decode_infer_request

        return decode_infer_request(cls, req_bytes, json_length, model_name)

    @classmethod
    def from_dict(cls, body: Dict, model_name: str) -> "InferRequest":
        """Build a request from a decoded v2 JSON body."""
        from .rest_codec import infer_request_from_dict

        return infer_request_from_dict(cls, body, model_name, b"", None)

    @classmethod
    def from_inference_request(cls, request: Any, model_name: str) -> "InferRequest":
        """Build a request from KServe's ``InferenceRequest`` (the parsed v2 REST body: ``id``,
        ``parameters``, ``inputs`` with ``name``/``shape``/``datatype``/``data``/``parameters``,
        ``outputs``), or from the same fields as a dict. Inputs are checked as a v2 REST body's are:
        InvalidInput names what is wrong."""
        if isinstance(request, dict):
            return cls.from_dict(request, model_name)
        body: Dict[str, Any] = {"id": getattr(request, "id", None), "parameters": getattr(request, "parameters", None),
                                "inputs": [_fields(i, ("name", "shape", "datatype", "data", "parameters"))
                                           for i in request.inputs or []]}
        if getattr(request, "outputs", None):
            body["outputs"] = [_fields(o, ("name", "parameters")) for o in request.outputs]
        return cls.from_dict({k: v for k, v in body.items() if v is not None}, model_name)

    @classmethod
    def from_grpc(cls, request) -> "InferRequest":
        """Build a request from a gRPC ``ModelInferRequest``."""
        from .grpc.convert import infer_request_from_grpc

        return infer_request_from_grpc(cls, request)

    def to_grpc(self):
        """This request as a gRPC ``ModelInferRequest``."""
        from .grpc.convert import infer_request_to_grpc

        return infer_request_to_grpc(self)

    def to_rest(self) -> Tuple[Union[bytes, Dict], Optional[int]]:
        """This request as a v2 REST body: ``(dict, None)``, or ``(bytes, json_length)`` with binary inputs."""
        from .rest_codec import encode_infer_request

        return _as_rest(*encode_infer_request(self))

    def get_input_by_name(self, name: str) -> Optional[InferInput]:
        """The input with this name, or None."""
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        return None

    def as_dataframe(self):
        """The inputs as a pandas DataFrame, one column per input. Needs pandas (``pip install
        'kserve-sdk[pandas]'``); without it, ModuleNotFoundError says so."""
        pd = require_pandas("InferRequest.as_dataframe")
        columns = {}
        for tensor in self.inputs:
            arr = tensor.as_numpy()
            columns[tensor.name] = arr.reshape(arr.shape[0], -1)[:, 0] if arr.ndim > 1 else arr
        return pd.DataFrame(columns)

    def to_dict(self) -> Dict:
        """The request as a v2 JSON object."""
        out: Dict[str, Any] = {"id": self.id, "model_name": self.model_name,
                               "inputs": [t.to_dict() for t in self.inputs]}
        if self.parameters:
            out["parameters"] = self.parameters
        if self.request_outputs:
            out["outputs"] = [{"name": o.name, "parameters": o.parameters} for o in self.request_outputs]
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InferRequest) and (self.id, self.model_name, self.inputs, self.parameters) == (
            other.id, other.model_name, other.inputs, other.parameters)

    def __repr__(self) -> str:
        return f"InferRequest(model_name={self.model_name!r}, id={self.id!r}, inputs={self.inputs!r})"


class InferResponse(InferMessage):
    """A v2 inference response: id, model name, output tensors and parameters."""

    def __init__(
        self,
        response_id: Optional[str],
        model_name: Optional[str],
        infer_outputs: List[InferOutput],
        model_version: Optional[str] = None,
        raw_outputs: Optional[List[bytes]] = None,
        from_grpc: Optional[bool] = False,
        parameters: Optional[Dict] = None,
        use_binary_outputs: Optional[bool] = False,
        requested_outputs: Optional[List[RequestedOutput]] = None,
    ):
        self.id = response_id
        self.model_name = model_name
        self.model_version = model_version
        self.outputs = infer_outputs
        self.parameters = parameters
        # KServe's API: the instance's flag shadows the classmethod of the same name, which builds a response
        self.from_grpc = from_grpc  # type: ignore[method-assign,assignment]
        self._use_binary_outputs = bool(use_binary_outputs)
        self._requested_outputs = requested_outputs
        if raw_outputs:
            for tensor, raw in zip(infer_outputs, raw_outputs, strict=False):
                tensor._raw_data = raw

    @classmethod
    def from_rest(cls, response: Dict) -> "InferResponse":
        """Build a response from a decoded v2 JSON response body."""
        from .rest_codec import decode_infer_response

        return decode_infer_response(cls, response, b"", None)

    @classmethod
    def from_bytes(cls, res_bytes: bytes, json_length: int) -> "InferResponse":
        """Decode a REST response that uses the binary-data extension."""
        import orjson

        from .rest_codec import decode_infer_response

        return decode_infer_response(cls, orjson.loads(res_bytes[:json_length]), res_bytes, json_length)

    @classmethod
    def from_grpc(cls, response) -> "InferResponse":
        """Build a response from a gRPC ``ModelInferResponse``."""
        from .grpc.convert import infer_response_from_grpc

        return infer_response_from_grpc(cls, response)

    def to_grpc(self):
        """This response as a gRPC ``ModelInferResponse``."""
        from .grpc.convert import infer_response_to_grpc

        return infer_response_to_grpc(self)

    def to_rest(self) -> Tuple[Union[bytes, Dict], Optional[int]]:
        """This response as a v2 REST body: ``(dict, None)``, or ``(bytes, json_length)`` with binary outputs."""
        from .rest_codec import encode_infer_response

        return _as_rest(*encode_infer_response(self))

    def selected_outputs(self) -> List[Tuple[InferOutput, bool]]:
        """The outputs to send, each with whether it goes as raw bytes.

        Requested outputs pick and order them (an unknown name is the client's error); an output is
        binary when its request says ``binary_data``, else when the request asked for binary outputs.
        """
        default_binary = self._use_binary_outputs
        if not self._requested_outputs:
            return [(tensor, default_binary) for tensor in self.outputs]
        pairs = []
        for wanted in self._requested_outputs:
            tensor = self.get_output_by_name(wanted.name)
            if tensor is None:
                raise InvalidInput(f"Unexpected inference output '{wanted.name}' for model '{self.model_name}'")
            binary = wanted.binary_data
            pairs.append((tensor, default_binary if binary is None else binary))
        return pairs

    def get_output_by_name(self, name: str) -> Optional[InferOutput]:
        """The output with this name, or None."""
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        return None

    def to_dict(self) -> Dict:
        """The response as a v2 JSON object."""
        out: Dict[str, Any] = {"id": self.id, "model_name": self.model_name,
                               "outputs": [t.to_dict() for t in self.outputs]}
        if self.model_version:
            out["model_version"] = self.model_version
        if self.parameters:
            out["parameters"] = self.parameters
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InferResponse) and (self.id, self.model_name, self.outputs, self.parameters) == (
            other.id, other.model_name, other.outputs, other.parameters)

    def __repr__(self) -> str:
        return f"InferResponse(model_name={self.model_name!r}, id={self.id!r}, outputs={self.outputs!r})"
