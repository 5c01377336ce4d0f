"""protocol/grpc/convert.py: ModelInferRequest <-> InferRequest with typed and raw contents, answers both ways,
parameters, and every way a client's message can disagree with itself."""
import numpy as np
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.convert import (
    Undecodable,
    fill_parameters,
    infer_request_from_grpc,
    infer_request_to_grpc,
    infer_response_to_grpc,
    parameters_to_dict,
    tolerant_parser,
    trace_update_from_grpc,
)
from kserve_sdk.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput

#: datatype -> (typed contents field, values)
TYPED = {
    "BOOL": ("bool_contents", [True, False]), "INT8": ("int_contents", [-128, 127]),
    "INT16": ("int_contents", [-300, 300]), "INT32": ("int_contents", [-7, 2 ** 31 - 1]),
    "INT64": ("int64_contents", [-2 ** 63, 5]), "UINT8": ("uint_contents", [0, 255]),
    "UINT16": ("uint_contents", [1, 65535]), "UINT32": ("uint_contents", [0, 2 ** 32 - 1]),
    "UINT64": ("uint64_contents", [0, 2 ** 64 - 1]), "FP32": ("fp32_contents", [0.5, -2.0]),
    "FP64": ("fp64_contents", [0.1, 1e300]), "BYTES": ("bytes_contents", [b"a", b"\xff"]),
}

#: datatype -> its numpy type code, for raw contents
TYPED_NP = {"BOOL": "?", "INT8": "i1", "INT16": "i2", "INT32": "i4", "INT64": "i8", "UINT8": "u1", "UINT16": "u2",
            "UINT32": "u4", "UINT64": "u8", "FP32": "f4", "FP64": "f8"}


def message(*tensors, raws=(), **fields):
    """A ModelInferRequest of (name, shape, datatype, {contents field: values} or None) tensors."""
    msg = pb.ModelInferRequest(model_name="m", **fields)
    for name, shape, datatype, contents in tensors:
        entry = msg.inputs.add(name=name, datatype=datatype, shape=shape)
        for field, values in (contents or {}).items():
            getattr(entry.contents, field).extend(values)
    msg.raw_input_contents.extend(raws)
    return msg


def from_grpc(msg):
    return infer_request_from_grpc(InferRequest, msg)


@pytest.mark.parametrize("datatype", TYPED)
def test_typed_contents_become_numpy_of_the_datatype(datatype):
    field, values = TYPED[datatype]
    request = from_grpc(message(("x", [2, 1], datatype, {field: values})))
    tensor = request.inputs[0]
    assert tensor.as_numpy().shape == (2, 1) and tensor.as_numpy().reshape(-1).tolist() == values
    assert request.from_grpc and not request.use_binary_outputs  # typed in, typed out


@pytest.mark.parametrize("datatype", [d for d in TYPED if d != "BYTES"])
def test_raw_contents_become_views_and_ask_for_raw_answers(datatype):
    _, values = TYPED[datatype]
    raw = np.array(values, dtype="<" + TYPED_NP[datatype]).tobytes()
    request = from_grpc(message(("x", [2], datatype, None), raws=[raw]))
    assert request.inputs[0].as_numpy().tolist() == values
    assert request.use_binary_outputs


def test_raw_bytes_contents_are_length_prefixed():
    request = from_grpc(message(("s", [2], "BYTES", None), raws=[b"\x01\x00\x00\x00a\x00\x00\x00\x00"]))
    assert request.inputs[0].as_numpy().tolist() == [b"a", b""]


@pytest.mark.parametrize("datatype,values", [("INT8", [128]), ("UINT8", [256]), ("INT16", [-40000]),
                                             ("UINT16", [70000])])
def test_narrow_typed_values_out_of_range_are_refused_not_wrapped(datatype, values):
    field = TYPED[datatype][0]
    with pytest.raises(InvalidInput, match="input 'x': Python integer .* out of bounds"):
        from_grpc(message(("x", [1], datatype, {field: values})))


@pytest.mark.parametrize("msg,error", [
    (message(("x", [3], "FP32", {"fp32_contents": [1, 2]})), r"input 'x': 2 values given but shape \[3\] needs 3"),
    (message(("x", [1], "FP32", {"int_contents": [1]})),
     "input 'x': datatype FP32 takes fp32_contents, got int_contents"),
    (message(("x", [1], "FP16", {"fp32_contents": [1]})), "datatype FP16 takes raw_input_contents, got fp32_contents"),
    (message(("x", [2], "FP32", None)), "input 'x' has no contents"),
    (message(("x", [1], "FP32", {"fp32_contents": [1]}), raws=[b"\x00" * 4]),
     "input 'x' has typed contents but the message also has raw contents"),
    (message(("x", [2], "FP32", None), raws=[b"\x00" * 4]),
     r"input 'x': 4 raw bytes do not match shape \[2\] of FP32 \(8 bytes\)"),
    (message(("x", [1], "FP32", None), ("y", [1], "FP32", None), raws=[b"\x00" * 4]),
     "1 raw input contents given for 2 inputs"),
    (message(("x", [1], "FP32", {"fp32_contents": [1]}), ("x", [1], "FP32", {"fp32_contents": [1]})),
     "duplicate input name 'x'"),
    (message(("x", [1], "FLOAT", None)), "input 'x': unsupported datatype 'FLOAT'"),
    (message(("x", [-1], "FP32", None)), r"input 'x': shape \[-1\] has a negative dimension"),
])
def test_a_bad_message_is_named(msg, error):
    with pytest.raises(InvalidInput, match=error):
        from_grpc(msg)


def test_an_empty_tensor_needs_no_contents():
    tensor = from_grpc(message(("x", [0, 3], "FP32", None))).inputs[0]
    assert tensor.as_numpy().shape == (0, 3) and tensor.as_numpy().dtype == np.float32


def test_shared_memory_inputs_take_no_raw_content():
    msg = message(("x", [1], "FP32", None), ("y", [1], "INT32", None), raws=[b"\x07\x00\x00\x00"])
    msg.inputs[0].parameters["shared_memory_region"].string_param = "r"
    request = from_grpc(msg)
    assert request.inputs[0].parameters == {"shared_memory_region": "r"} and request.inputs[0]._raw_data is None
    assert request.inputs[1].as_numpy().tolist() == [7]


def test_ids_parameters_and_requested_outputs_are_read():
    msg = message(("x", [1], "INT64", {"int64_contents": [1]}), id="r1", model_version="3")
    msg.parameters["binary_data_output"].bool_param = True
    msg.parameters["n"].int64_param = 4
    msg.outputs.add(name="y").parameters["binary_data"].bool_param = False
    request = from_grpc(msg)
    assert (request.id, request.model_version, request.parameters) == ("r1", "3", {"binary_data_output": True, "n": 4})
    assert request.request_outputs == [RequestedOutput("y", {"binary_data": False})]
    assert request.use_binary_outputs
    assert from_grpc(message(("x", [1], "INT64", {"int64_contents": [1]}))).id is None


def test_an_undecodable_message_is_invalid_input():
    parse = tolerant_parser(pb.ModelInferRequest)
    broken = parse(b"\x0a\x05ab")  # a string field that runs past the end of the message
    assert isinstance(broken, Undecodable)
    with pytest.raises(InvalidInput, match="the request is not a valid ModelInferRequest message"):
        from_grpc(broken)
    assert parse(message(("x", [0], "FP32", None)).SerializeToString()).model_name == "m"


def test_parameters_both_ways_keep_their_types():
    msg = pb.ModelInferRequest()
    fill_parameters(msg.parameters, {"b": True, "i": -3, "u": 2 ** 63, "d": 0.5, "s": "x", "o": [1]})
    kinds = {k: v.WhichOneof("parameter_choice") for k, v in msg.parameters.items()}
    assert kinds == {"b": "bool_param", "i": "int64_param", "u": "uint64_param", "d": "double_param",
                     "s": "string_param", "o": "string_param"}
    assert parameters_to_dict(msg.parameters) == {"b": True, "i": -3, "u": 2 ** 63, "d": 0.5, "s": "x", "o": "[1]"}
    assert parameters_to_dict(pb.ModelInferRequest().parameters) is None


def test_a_request_goes_out_with_raw_contents_and_comes_back_equal():
    request = InferRequest("m", [InferInput("x", [2], "FP32", [1.5, 2.5]), InferInput("s", [1], "BYTES", ["hé"])],
                           request_id="r", parameters={"p": 1}, request_outputs=[RequestedOutput("y", {"q": "v"})],
                           model_version="1")
    msg = infer_request_to_grpc(request)
    assert (msg.model_name, msg.id, msg.model_version) == ("m", "r", "1")
    assert list(msg.raw_input_contents) == [np.array([1.5, 2.5], "<f4").tobytes(), b"\x03\x00\x00\x00h\xc3\xa9"]
    assert [o.name for o in msg.outputs] == ["y"] and msg.outputs[0].parameters["q"].string_param == "v"
    back = from_grpc(msg)
    assert back == InferRequest("m", [InferInput("x", [2], "FP32", [1.5, 2.5]),
                                      InferInput("s", [1], "BYTES", [b"h\xc3\xa9"])], request_id="r",
                                parameters={"p": 1})


def answer(*outputs, binary=False, requested=None):
    return InferResponse("r1", "m", list(outputs), model_version="2", parameters={"k": 1}, use_binary_outputs=binary,
                         requested_outputs=requested)


def test_an_answer_to_typed_inputs_is_raw_as_triton_answers():
    msg = infer_response_to_grpc(answer(InferOutput("y", [2], "INT32", np.array([1, 2], dtype=np.int32)),
                                        InferOutput("s", [1], "BYTES", ["a"])))
    assert (msg.id, msg.model_name, msg.model_version) == ("r1", "m", "2") and msg.parameters["k"].int64_param == 1
    assert list(msg.raw_output_contents) == [np.array([1, 2], "<i4").tobytes(), b"\x01\x00\x00\x00a"]
    assert not msg.outputs[0].HasField("contents") and not msg.outputs[1].HasField("contents")


def test_an_answer_is_all_raw_when_one_output_has_no_typed_field():
    msg = infer_response_to_grpc(answer(InferOutput("y", [1], "INT32", [1]), InferOutput("h", [1], "FP16", [1.0])))
    assert list(msg.raw_output_contents) == [b"\x01\x00\x00\x00", np.array([1.0], "<f2").tobytes()]
    assert not msg.outputs[0].HasField("contents")


def test_a_binary_answer_and_requested_outputs():
    y, z = InferOutput("y", [1], "INT8", [1]), InferOutput("z", [1], "INT8", [2])
    msg = infer_response_to_grpc(answer(y, z, binary=True, requested=[RequestedOutput("z")]))
    assert [o.name for o in msg.outputs] == ["z"] and list(msg.raw_output_contents) == [b"\x02"]
    back = InferResponse.from_grpc(msg)
    assert back.outputs[0].as_numpy().tolist() == [2] and back.model_version == "2"


def test_a_shared_memory_output_keeps_its_raw_slot_empty():
    y = InferOutput("y", [1], "INT8", [1], parameters={"shared_memory_region": "r"})
    msg = infer_response_to_grpc(answer(y, InferOutput("z", [1], "INT8", [2]), binary=True))
    assert list(msg.raw_output_contents) == [b"", b"\x02"]


def test_an_answer_written_into_a_given_message():
    target = pb.ModelStreamInferResponse()
    infer_response_to_grpc(answer(InferOutput("y", [1], "FP64", [0.5])), target.infer_response)
    assert list(target.infer_response.raw_output_contents) == [np.array([0.5]).tobytes()]


def test_trace_settings_updates():
    request = pb.TraceSettingRequest()
    request.settings["trace_level"].value.extend(["TIMESTAMPS", "TENSORS"])
    request.settings["trace_rate"].value.extend(["10"])
    request.settings["log_frequency"]  # no value: clears the setting
    assert trace_update_from_grpc(request) == {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "10",
                                               "log_frequency": None}
    request.settings["trace_file"].value.extend(["a", "b"])
    with pytest.raises(InvalidInput, match="trace_file takes one value"):
        trace_update_from_grpc(request)
