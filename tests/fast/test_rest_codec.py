"""protocol/rest_codec.py: v2 REST bodies, plain JSON and with Triton's binary-data extension, decoded (good and
bad) and encoded (binary outputs, requested outputs)."""
import numpy as np
import orjson
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput
from kserve_sdk.protocol.rest_codec import (
    decode_infer_request,
    dumps,
    encode_infer_request,
    encode_infer_response,
    loads_json,
    parse_json_length,
)


def binary_body(header: dict, *raws: bytes):
    """A binary-extension body and its Inference-Header-Content-Length."""
    head = orjson.dumps(header)
    return head + b"".join(raws), len(head)


def decode(doc, body=None, json_length=None):
    if body is None:
        body = orjson.dumps(doc)
    return decode_infer_request(InferRequest, body, json_length, "m")


def test_a_json_body_decodes_into_a_request():
    request = decode({"id": "r1", "parameters": {"p": 1},
                      "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
                                 {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]}],
                      "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
    assert (request.id, request.model_name, request.parameters) == ("r1", "m", {"p": 1})
    assert request.inputs[0].as_numpy().tolist() == [[1, 2], [3, 4]] and request.inputs[1].as_string() == ["hi"]
    assert request.request_outputs == [RequestedOutput("y", {"binary_data": True})]
    assert request.request_outputs[0].binary_data is True and not request.use_binary_outputs


def test_nested_json_data_is_accepted_and_checked_when_read():
    request = decode({"inputs": [{"name": "x", "shape": [2, 1], "datatype": "INT32", "data": [[1], [2]]}]})
    assert request.inputs[0].as_numpy().tolist() == [[1], [2]]
    short = decode({"inputs": [{"name": "x", "shape": [3, 1], "datatype": "INT32", "data": [[1], [2]]}]})
    with pytest.raises(InvalidInput, match=r"2 values given but shape \[3, 1\] needs 3"):
        short.inputs[0].as_numpy()


def test_binary_inputs_are_views_of_the_body():
    x = np.arange(4, dtype="<f4")
    body, length = binary_body({"inputs": [
        {"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
        {"name": "j", "shape": [1], "datatype": "INT64", "data": [7]},
        {"name": "s", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 11}}]},
        x.tobytes(), b"\x02\x00\x00\x00ab\x01\x00\x00\x00c")
    request = decode(None, body, length)
    assert request.inputs[0].as_numpy().tolist() == [0, 1, 2, 3]
    assert request.inputs[1].as_numpy().tolist() == [7]
    assert request.inputs[2].as_numpy().tolist() == [b"ab", b"c"]
    assert isinstance(request.inputs[0]._raw_data, memoryview)


@pytest.mark.parametrize("doc,message", [
    ([1, 2], "the request body must be a JSON object"),
    ({}, "the request for model 'm' has no 'inputs'"),
    ({"inputs": {}}, 'Expected "inputs" to be a list'),
    ({"inputs": [1]}, "each input must be a JSON object, got int"),
    ({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}, "tensor name must be a string, got None"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]}, "input 'x': shape must be a list of integers"),
    ({"inputs": [{"name": "x", "shape": [1], "data": [1]}]}, "input 'x': unsupported datatype None"),
    ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}, "'data' field is missing for input 'x'"),
    ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": 1}]}, "'data' must be a list, got int"),
    ({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]},
     r"input 'x': 2 values given but shape \[3\] needs 3"),
    ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}] * 2}, "duplicate input name 'x'"),
    ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": []}]},
     "input 'x' 'parameters' must be a JSON object"),
    ({"inputs": [], "parameters": "p"}, "request 'parameters' must be a JSON object"),
    ({"inputs": [], "id": 5}, "'id' must be a string"),
    ({"inputs": [], "outputs": {}}, 'Expected "outputs" to be a list'),
    ({"inputs": [], "outputs": [{"parameters": {}}]}, "each requested output must be an object with a 'name'"),
    ({"inputs": [], "outputs": [{"name": "y", "parameters": 1}]}, "output 'parameters' must be a JSON object"),
    ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]},
     "input 'x' has binary_data_size but the request has no Inference-Header-Content-Length header"),
])
def test_a_bad_json_body_is_named(doc, message):
    with pytest.raises(InvalidInput, match=message):
        decode(doc)


@pytest.mark.parametrize("body", [b"{", b"", b"{'a': 1}", b"\xff"])
def test_malformed_json_is_the_clients_error(body):
    with pytest.raises(InvalidInput, match="Unrecognized request format"):
        decode_infer_request(InferRequest, body, None, "m")


def tensor_with_size(size, shape=(2,), datatype="FP32"):
    return {"inputs": [{"name": "x", "shape": list(shape), "datatype": datatype,
                        "parameters": {"binary_data_size": size}}]}


@pytest.mark.parametrize("header,raw,message", [
    (tensor_with_size(8), b"\x00" * 4, r"input 'x': binary_data_size 8 runs past the end of the body \(4 bytes left\)"),
    (tensor_with_size(4), b"\x00" * 4, r"binary_data_size 4 does not match shape \[2\] of FP32 \(8 bytes\)"),
    (tensor_with_size(8), b"\x00" * 12, "4 bytes follow the binary inputs but no input claims them"),
    (tensor_with_size(-1), b"", "binary_data_size must be a non-negative integer, got -1"),
    (tensor_with_size("8"), b"\x00" * 8, "binary_data_size must be a non-negative integer, got '8'"),
    (tensor_with_size(5, (1,), "BYTES"), b"\x09\x00\x00\x00a", "BYTES element length 9 at offset 0 runs past"),
])
def test_a_bad_binary_body_is_named(header, raw, message):
    body, length = binary_body(header, raw)
    with pytest.raises(InvalidInput, match=message):
        decode(None, body, length).inputs[0].as_numpy()


@pytest.mark.parametrize("value,message", [
    ("x", "Inference-Header-Content-Length must be an integer, got 'x'"),
    ("-1", "Inference-Header-Content-Length -1 is outside the request body of 10 bytes"),
    ("11", "Inference-Header-Content-Length 11 is outside the request body of 10 bytes"),
])
def test_a_lying_header_length_is_refused(value, message):
    with pytest.raises(InvalidInput, match=message):
        parse_json_length(value, 10)


def test_a_header_length_within_the_body_is_taken():
    assert parse_json_length("10", 10) == 10 and parse_json_length("0", 10) == 0
    assert parse_json_length(None, 10) is None


def test_a_header_length_that_cuts_the_json_short_is_malformed_json():
    body, length = binary_body(tensor_with_size(8), b"\x00" * 8)
    with pytest.raises(InvalidInput, match="Unrecognized request format"):
        decode(None, body, length - 3)


def test_shared_memory_inputs_need_no_data():
    request = decode({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32",
                                  "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4}}]})
    assert request.inputs[0]._data is None and request.inputs[0]._raw_data is None


def response(*outputs, requested=None, binary=False):
    return InferResponse("r1", "m", list(outputs), model_version="2", parameters={"k": "v"},
                         use_binary_outputs=binary, requested_outputs=requested)


def test_a_json_answer_holds_every_output():
    y = InferOutput("y", [2], "INT32", np.array([1, 2], dtype=np.int32))
    body, length = encode_infer_response(response(y))
    assert length is None
    assert orjson.loads(body) == {"id": "r1", "model_name": "m", "model_version": "2", "parameters": {"k": "v"},
                                  "outputs": [{"name": "y", "datatype": "INT32", "shape": [2], "data": [1, 2]}]}


def test_binary_outputs_follow_the_json_header():
    y = InferOutput("y", [2], "FP32", np.array([1.5, 2.5], dtype=np.float32))
    s = InferOutput("s", [1], "BYTES", ["hé"])
    body, length = encode_infer_response(response(y, s, binary=True))
    header = orjson.loads(body[:length])
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [8, 7]
    assert "data" not in header["outputs"][0]
    assert body[length:] == np.array([1.5, 2.5], dtype="<f4").tobytes() + b"\x03\x00\x00\x00h\xc3\xa9"
    decoded = InferResponse.from_bytes(body, length)
    assert decoded.outputs[0].as_numpy().tolist() == [1.5, 2.5] and decoded.outputs[1].as_string() == ["hé"]


def test_requested_outputs_pick_order_and_binary_each():
    y, z = InferOutput("y", [1], "INT32", [1]), InferOutput("z", [1], "INT32", [2])
    wanted = [RequestedOutput("z", {"binary_data": True}), RequestedOutput("y")]
    body, length = encode_infer_response(response(y, z, requested=wanted))
    header = orjson.loads(body[:length])
    assert [o["name"] for o in header["outputs"]] == ["z", "y"]
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 4} and header["outputs"][1]["data"] == [1]
    assert body[length:] == b"\x02\x00\x00\x00"


def test_an_unknown_requested_output_is_the_clients_error():
    with pytest.raises(InvalidInput, match="Unexpected inference output 'nope' for model 'm'"):
        encode_infer_response(response(InferOutput("y", [1], "INT32", [1]), requested=[RequestedOutput("nope")]))


def test_json_only_writes_binary_outputs_as_json():
    y = InferOutput("y", [1], "INT32", np.array([3], dtype=np.int32))
    body, length = encode_infer_response(response(y, binary=True), json_only=True)
    assert length is None and orjson.loads(body)["outputs"][0]["data"] == [3]


def test_shared_memory_outputs_are_sent_without_data():
    y = InferOutput("y", [1], "INT32", [3], parameters={"shared_memory_region": "r"})
    out = orjson.loads(encode_infer_response(response(y))[0])["outputs"][0]
    assert "data" not in out and out["parameters"] == {"shared_memory_region": "r"}


def test_a_request_is_encoded_with_its_binary_inputs_binary():
    raw = InferInput("x", [2], "INT16")
    raw._raw_data = b"\x01\x00\x02\x00"
    request = InferRequest("m", [raw, InferInput("j", [1], "FP64", [0.5])], request_id="r",
                           parameters={"a": 1}, request_outputs=[RequestedOutput("y", {"binary_data": True})])
    body, length = encode_infer_request(request)
    header = orjson.loads(body[:length])
    assert header["id"] == "r" and header["parameters"] == {"a": 1}
    assert header["outputs"] == [{"name": "y", "parameters": {"binary_data": True}}]
    assert header["inputs"][0]["parameters"] == {"binary_data_size": 4} and header["inputs"][1]["data"] == [0.5]
    again = decode_infer_request(InferRequest, body, length, "m")
    assert again.inputs == request.inputs


def test_dumps_writes_numpy_bytes_sets_and_tensors():
    doc = {"a": np.float32(1.5), "b": np.array([1, 2]), "c": b"x", "d": (1,), "e": InferOutput("y", [1], "INT8", [1])}
    assert orjson.loads(dumps(doc)) == {"a": 1.5, "b": [1, 2], "c": "x", "d": [1],
                                        "e": {"name": "y", "shape": [1], "datatype": "INT8", "data": [1]}}
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"x": object()})


def test_loads_json_reads_bytes_and_memoryviews():
    assert loads_json(memoryview(b'{"a": [1]}')) == {"a": [1]}
