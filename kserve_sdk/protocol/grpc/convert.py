"""``ModelInferRequest``/``ModelInferResponse`` <-> ``InferRequest``/``InferResponse``.

Raw contents become tensors read through numpy views; typed contents are checked against the shape
and datatype. Every problem in a client's message raises InvalidInput (gRPC INVALID_ARGUMENT).
"""
from math import prod
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional, Type, TypeVar

import numpy as np

from ...constants.constants import GRPC_CONTENT_DATATYPE_MAPPINGS
from ...errors import InvalidInput
from ..classification import check_class_counts
from ..dtypes import np_dtype_of
from ..infer_tensors import InferInput, InferOutput, RequestedOutput
from ..tensor import SHM_REGION, Tensor, check_bytes_elements, check_tensor_header, expected_nbytes
from . import grpc_predict_v2_pb2 as pb

if TYPE_CHECKING:  # for the annotations only: infer_type's classes call this module
    from ..infer_type import InferRequest, InferResponse

TensorT = TypeVar("TensorT", bound=Tensor)  # InferInput or InferOutput


#: Triton's decoupled streams: a request's opt-in to an empty answer after its last one, and each answer's flag.
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"


class Undecodable:
    """What a gRPC request that is not a valid protobuf message (bad wire format, string fields that are not
    UTF-8) is decoded as, so that it is answered INVALID_ARGUMENT rather than the library's UNKNOWN."""

    id = model_name = model_version = name = ""

    def __init__(self, message_type: str, error: Exception):
        self.reason = f"the request is not a valid {message_type} message: {error}"


def tolerant_parser(message_class):
    """``message_class.FromString`` that returns an :class:`Undecodable` instead of raising."""
    parse = message_class.FromString

    def parse_or_note(data: bytes):
        try:
            return parse(data)
        except Exception as e:  # google.protobuf.message.DecodeError, and UnicodeDecodeError on some builds
            return Undecodable(message_class.__name__, e)

    return parse_or_note


def parameters_to_dict(params) -> Optional[Dict[str, Any]]:
    """A protobuf ``map<string, InferParameter>`` as a plain dict (None when empty)."""
    if not params:
        return None
    out = {}
    for key, value in params.items():
        field = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, field) if field else None
    return out


def fill_parameters(target, params: Optional[Dict[str, Any]]) -> None:
    """Copy a dict into a protobuf ``map<string, InferParameter>``."""
    for key, value in (params or {}).items():
        slot = target[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            if value >= 2 ** 63:
                slot.uint64_param = value
            else:
                slot.int64_param = value
        elif isinstance(value, float):
            slot.double_param = value
        else:
            slot.string_param = str(value)


def log_settings_response(settings: Dict[str, Any]):
    """Log settings as Triton's ``LogSettingsResponse`` (whose numbers are uint32)."""
    response = pb.LogSettingsResponse()
    for key, value in settings.items():
        slot = response.settings[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            slot.uint32_param = value
        else:
            slot.string_param = str(value)
    return response


def trace_update_from_grpc(request: Any) -> Dict[str, Optional[Any]]:
    """A ``TraceSettingRequest``'s settings as the JSON update REST takes: no value clears a setting,
    ``trace_level`` is a list, the others one string each."""
    update: Dict[str, Optional[Any]] = {}
    for name, setting in request.settings.items():
        values = list(setting.value)
        if not values:
            update[name] = None
        elif name == "trace_level":
            update[name] = values
        elif len(values) == 1:
            update[name] = values[0]
        else:
            raise InvalidInput(f"{name} takes one value; got {values!r}")
    return update


def trace_settings_response(settings: Dict[str, Any]):
    """Trace settings (strings, or lists of strings) as Triton's ``TraceSettingResponse``."""
    response = pb.TraceSettingResponse()
    for name, value in settings.items():
        response.settings[name].value.extend(value if isinstance(value, list) else [value])
    return response


def model_config_response(config: Dict[str, Any]):
    """A model configuration dict (model_config.py's, JSON field names) as Triton's ``ModelConfigResponse``."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    return pb.ModelConfigResponse(config=json_format.ParseDict(config, model_config_pb2.ModelConfig()))


_NARROW = frozenset({"INT8", "INT16", "UINT8", "UINT16"})


def _typed_contents(tensor: Tensor, contents) -> Optional[np.ndarray]:
    """The values of a tensor's typed ``contents`` as a flat array, or None when there are none."""
    field = GRPC_CONTENT_DATATYPE_MAPPINGS.get(tensor.datatype)
    used = [f.name for f, _ in contents.ListFields()]
    if not used:
        return None
    if field is None or used != [field]:
        want = field or "raw_input_contents"
        raise InvalidInput(f"input '{tensor.name}': datatype {tensor.datatype} takes {want}, got {', '.join(used)}")
    values = getattr(contents, field)
    if tensor.datatype == "BYTES":
        flat = np.empty(len(values), dtype=np.object_)
        flat[:] = list(values)
    else:
        try:
            if tensor.datatype in _NARROW:  # int_contents / uint_contents hold 32 bits: numpy would wrap them
                values = list(values)
            flat = np.array(values, dtype=np_dtype_of(tensor.datatype))
        except OverflowError as e:
            raise InvalidInput(f"input '{tensor.name}': {e}") from None
    return flat


def _mixed_contents(kind: str, name: str, model_name: str) -> InvalidInput:
    """Typed contents in a message with raw contents: refused in Triton's words, then ours."""
    return InvalidInput(f"contents field must not be specified when using raw_{kind}_contents for '{name}' for "
                        f"model '{model_name}': {kind} '{name}' has typed contents but the message also has raw "
                        "contents")


def _tensors_from_grpc(entries, raws, cls: Type[TensorT], kind: str, model_name: str = "") -> List[TensorT]:
    # Tensors in shared memory may have no raw content: then the raw contents belong to the others, in order.
    aligned = len(raws) == len(entries)
    if raws and not aligned:
        in_place = sum(1 for e in entries if SHM_REGION not in e.parameters)
        if len(raws) != in_place:
            typed = next((e.name for e in entries if e.HasField("contents")), None)
            if typed is not None:  # the count is off because some tensor came typed: say that
                raise _mixed_contents(kind, typed, model_name)
            raise InvalidInput(f"{len(raws)} raw {kind} contents given for {in_place} {kind}s")
    next_raw = iter(raws).__next__
    tensors: List[TensorT] = []
    seen = set()
    for entry in entries[:]:  # a slice of a repeated field is a list at once; iterating it is slower
        name, datatype, params = entry.name, entry.datatype, parameters_to_dict(entry.parameters)
        shape = check_tensor_header(name, entry.shape[:], datatype)
        if name in seen:
            raise InvalidInput(f"duplicate {kind} name '{name}'")
        seen.add(name)
        tensor = cls(name, shape, datatype, parameters=params)
        typed = entry.HasField("contents")
        if params is not None and SHM_REGION in params:
            if raws and aligned:
                next_raw()  # the empty placeholder of a tensor in shared memory
            # the data plane reads the content from the region
        elif raws:
            if typed:
                raise _mixed_contents(kind, name, model_name)
            raw = next_raw()
            expected = expected_nbytes(datatype, shape)
            if expected >= 0 and len(raw) != expected:
                raise InvalidInput(f"{kind} '{name}': {len(raw)} raw bytes do not match shape {shape} "
                                   f"of {tensor.datatype} ({expected} bytes)")
            tensor._raw_data = raw
        elif typed and (flat := _typed_contents(tensor, entry.contents)) is not None:
            if flat.size != prod(shape):
                raise InvalidInput(f"{kind} '{name}': {flat.size} values given but shape {shape} "
                                   f"needs {prod(shape)}")
            tensor._array = flat.reshape(shape)
        elif prod(shape) != 0:
            raise InvalidInput(f"{kind} '{name}' has no contents")
        else:
            tensor._array = np.empty(shape, dtype=np_dtype_of(tensor.datatype))
        tensors.append(tensor)
    return tensors


def infer_request_from_grpc(cls: Type["InferRequest"], request) -> "InferRequest":
    """A ``ModelInferRequest`` as a ``cls`` (an InferRequest; raw contents are kept as bytes, read as views)."""
    if isinstance(request, Undecodable):
        raise InvalidInput(request.reason)
    raws = request.raw_input_contents[:]  # repeated fields are read by slices: a list at C speed
    inputs = _tensors_from_grpc(request.inputs, raws, InferInput, "input", request.model_name)
    check_bytes_elements(inputs)
    wanted = request.outputs
    outputs = [RequestedOutput(o.name, parameters_to_dict(o.parameters)) for o in wanted[:]] if wanted else None
    if outputs is not None:
        check_class_counts(outputs)  # Triton's classification extension: refused before the model runs
    parameters = parameters_to_dict(request.parameters)
    if parameters and type(parameters.get(EMPTY_FINAL_RESPONSE, False)) is not bool:
        raise InvalidInput(f"invalid value type for '{EMPTY_FINAL_RESPONSE}' parameter, expected bool_param "
                           "(tritonclient's enable_empty_final_response=True)")
    result = cls(model_name=request.model_name, infer_inputs=inputs, request_id=request.id or None,
                 from_grpc=True, parameters=parameters,
                 request_outputs=outputs, model_version=request.model_version or None)
    result._use_raw_outputs = bool(raws)
    return result


def _tensor_message(msg, tensor: Tensor, raws) -> None:
    msg.name = tensor.name
    msg.datatype = tensor.datatype
    msg.shape.extend(tensor.shape)
    params = tensor.parameters
    if params:
        fill_parameters(msg.parameters,
                        {k: v for k, v in params.items() if k not in ("binary_data_size", "binary_data")})
    if params and SHM_REGION in params:
        raws.append(b"")  # clients find an output's raw content by its index
    else:
        raws.append(bytes(tensor.raw_bytes()))


def infer_response_to_grpc(response: "InferResponse", msg=None):
    """An InferResponse as a ``ModelInferResponse``, written into ``msg`` when given (e.g. the
    ``infer_response`` of a stream message, which would otherwise be copied in).

    Outputs always go as ``raw_output_contents``, as Triton sends them (its clients read them there), whether
    the request's inputs came raw or typed.
    """
    pairs = response.selected_outputs()
    if msg is None:
        msg = pb.ModelInferResponse()
    # Fields are set one by one and only when there is something to set: each access to a message's
    # map or repeated field builds a wrapper object, a visible cost for a small call.
    if response.model_name:
        msg.model_name = response.model_name
    if response.model_version:
        msg.model_version = response.model_version
    if response.id:
        msg.id = response.id
    if response.parameters:
        fill_parameters(msg.parameters, response.parameters)
    outputs, raws = msg.outputs, msg.raw_output_contents
    for tensor, _ in pairs:
        _tensor_message(outputs.add(), tensor, raws)
    return msg


def infer_request_to_grpc(request: "InferRequest"):
    """An InferRequest as a ``ModelInferRequest`` (all inputs as raw contents)."""
    msg = pb.ModelInferRequest(model_name=request.model_name or "", model_version=request.model_version or "",
                               id=request.id or "")
    fill_parameters(msg.parameters, request.parameters)
    raws: List[bytes] = []
    for tensor in request.inputs:
        _tensor_message(msg.inputs.add(), tensor, raws)
    msg.raw_input_contents.extend(raws)
    for wanted in request.request_outputs or []:
        out = msg.outputs.add(name=wanted.name)
        fill_parameters(out.parameters, wanted.parameters)
    return msg


def infer_response_from_grpc(cls: Type["InferResponse"], response) -> "InferResponse":
    """A ``ModelInferResponse`` as a ``cls`` (an InferResponse)."""
    outputs = _tensors_from_grpc(response.outputs, list(response.raw_output_contents), InferOutput, "output",
                                 response.model_name)
    return cls(response_id=response.id, model_name=response.model_name,
               model_version=response.model_version or None, infer_outputs=outputs,
               from_grpc=True, parameters=parameters_to_dict(response.parameters))


def wants_empty_final_response(request) -> bool:
    """Whether a ``ModelInferRequest`` of a stream asks for Triton's empty final response (a value that is not a
    bool is refused when the request is decoded)."""
    if isinstance(request, Undecodable):
        return False
    params = request.parameters
    return EMPTY_FINAL_RESPONSE in params and params[EMPTY_FINAL_RESPONSE].bool_param


async def with_final_response(request, messages: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A stream's answers to ``request`` as Triton's decoupled streams send them to a request that asks for an
    empty final response: each ``ModelStreamInferResponse`` flagged ``triton_final_response: false``, then an
    empty one flagged true, with the request's id, model name and version."""
    try:
        async for message in messages:
            message.infer_response.parameters[FINAL_RESPONSE].bool_param = False
            yield message
    except BaseException:  # the client went away: the answers stop at once, their model's too
        await messages.aclose()  # type: ignore[attr-defined]  # an async generator
        raise
    final = pb.ModelStreamInferResponse()
    answer = final.infer_response
    answer.id, answer.model_name, answer.model_version = request.id, request.model_name, request.model_version
    answer.parameters[FINAL_RESPONSE].bool_param = True
    yield final
