"""protocol/infer_type.py: InferRequest / InferResponse as KServe's users build and read them: construction,
to_rest / from_rest, to_grpc / from_grpc, as_numpy, and KServe's helpers."""
import numpy as np
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.infer_tensors import param_value
from kserve_sdk.protocol.infer_type import (
    InferInput,
    InferOutput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    deserialize_bytes_tensor,
    serialize_byte_tensor,
)


def a_request(**kwargs):
    return InferRequest("m", [InferInput("x", [2], "FP32", [1.0, 2.0]), InferInput("s", [1], "BYTES", ["a"])],
                        **kwargs)


def test_a_request_holds_what_it_was_given():
    request = a_request(request_id="r", parameters={"p": 1}, request_outputs=[RequestedOutput("y")],
                        model_version="3")
    assert (request.id, request.model_name, request.model_version, request.parameters) == ("r", "m", "3", {"p": 1})
    assert request.get_input_by_name("s").as_string() == ["a"] and request.get_input_by_name("z") is None
    assert repr(request).startswith("InferRequest(model_name='m', id='r', inputs=[InferInput(name='x'")


def test_raw_inputs_are_given_to_the_inputs_in_order():
    request = InferRequest("m", [InferInput("a", [1], "INT8"), InferInput("b", [1], "INT8")],
                           raw_inputs=[b"\x01", b"\x02"], from_grpc=True)
    assert [t.as_numpy().tolist() for t in request.inputs] == [[1], [2]] and request.use_binary_outputs
    with pytest.raises(InvalidInput, match="1 raw input contents given for 2 inputs"):
        InferRequest("m", [InferInput("a", [1], "INT8"), InferInput("b", [1], "INT8")], raw_inputs=[b"\x01"])


@pytest.mark.parametrize("parameters,from_grpc,expected", [
    (None, False, False), ({"binary_data_output": True}, False, True), ({"binary_data_output": False}, False, False),
    ({"other": True}, True, False), ({"binary_data_output": True}, True, True),
])
def test_use_binary_outputs_follows_the_parameter(parameters, from_grpc, expected):
    assert a_request(parameters=parameters, from_grpc=from_grpc).use_binary_outputs is expected


def test_a_json_request_goes_to_rest_as_a_dict_and_back():
    body, length = a_request(request_id="r", parameters={"p": 1}).to_rest()
    assert length is None and body == {"id": "r", "parameters": {"p": 1}, "inputs": [
        {"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]},
        {"name": "s", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    assert InferRequest.from_dict(body, "m") == a_request(request_id="r", parameters={"p": 1})


def test_a_request_with_binary_inputs_goes_to_rest_as_bytes_and_back():
    x = InferInput("x", [2], "INT32")
    x.set_data_from_numpy(np.array([5, 6], dtype=np.int32))
    body, length = InferRequest("m", [x]).to_rest()
    assert isinstance(body, bytes) and body[length:] == b"\x05\x00\x00\x00\x06\x00\x00\x00"
    again = InferRequest.from_bytes(body, length, "m")
    assert again.inputs[0].as_numpy().tolist() == [5, 6] and again.model_name == "m"


def test_a_request_to_grpc_and_back():
    request = a_request(request_id="r")
    back = InferRequest.from_grpc(request.to_grpc())
    assert back.id == "r" and back.inputs[0].as_numpy().tolist() == [1.0, 2.0]
    assert back.inputs[1].as_numpy().tolist() == [b"a"]


class KServeStyleInput:
    """What KServe's InferenceRequest's inputs look like: attributes, unset ones None."""

    def __init__(self, **fields):
        self.name = self.shape = self.datatype = self.data = self.parameters = None
        self.__dict__.update(fields)


class KServeStyleRequest:
    def __init__(self, inputs, outputs=None, id=None, parameters=None):
        self.inputs, self.outputs, self.id, self.parameters = inputs, outputs, id, parameters


def test_from_inference_request_reads_kserves_parsed_body():
    parsed = KServeStyleRequest([KServeStyleInput(name="x", shape=[1], datatype="INT64", data=[3])], id="r",
                                outputs=[KServeStyleInput(name="y")])
    request = InferRequest.from_inference_request(parsed, "m")
    assert request.id == "r" and request.inputs[0].as_numpy().tolist() == [3]
    assert request.request_outputs == [RequestedOutput("y")]
    as_dict = InferRequest.from_inference_request({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64",
                                                                "data": [3]}]}, "m")
    assert as_dict.inputs == request.inputs


def test_from_inference_request_checks_its_inputs():
    parsed = KServeStyleRequest([KServeStyleInput(name="x", shape=[2], datatype="INT64", data=[3])])
    with pytest.raises(InvalidInput, match=r"input 'x': 1 values given but shape \[2\] needs 2"):
        InferRequest.from_inference_request(parsed, "m")


def test_to_dict_and_equality():
    request = a_request(request_id="r", request_outputs=[RequestedOutput("y", {"binary_data": True})])
    doc = request.to_dict()
    assert doc["outputs"] == [{"name": "y", "parameters": {"binary_data": True}}] and doc["model_name"] == "m"
    assert request == a_request(request_id="r") and request != a_request(request_id="other")
    assert request != "not a request"


def an_answer(**kwargs):
    return InferResponse("r", "m", [InferOutput("y", [2], "FP64", np.array([0.5, 1.5]))], **kwargs)


def test_a_response_to_rest_and_back():
    body, length = an_answer(model_version="1", parameters={"k": "v"}).to_rest()
    assert length is None and body["model_version"] == "1" and body["outputs"][0]["data"] == [0.5, 1.5]
    back = InferResponse.from_rest(body)
    assert back == an_answer(parameters={"k": "v"}) and back.model_version == "1"


def test_a_binary_response_to_rest_and_back():
    body, length = an_answer(use_binary_outputs=True).to_rest()
    assert isinstance(body, bytes) and len(body) - length == 16
    assert InferResponse.from_bytes(body, length).outputs[0].as_numpy().tolist() == [0.5, 1.5]


def test_a_response_to_grpc_and_back():
    back = InferResponse.from_grpc(an_answer().to_grpc())
    assert back.id == "r" and back.outputs[0].as_numpy().tolist() == [0.5, 1.5] and back.from_grpc


@pytest.mark.parametrize("doc", [{}, {"outputs": {}}, [1], "x"])
def test_from_rest_refuses_what_is_not_a_response(doc):
    with pytest.raises(InvalidInput, match="not a v2 inference response"):
        InferResponse.from_rest(doc)


def test_raw_outputs_and_lookups():
    response = InferResponse("r", "m", [InferOutput("y", [1], "UINT16")], raw_outputs=[b"\x02\x01"])
    assert response.get_output_by_name("y").as_numpy().tolist() == [258] and response.get_output_by_name("z") is None
    assert response.to_dict() == {"id": "r", "model_name": "m",
                                  "outputs": [{"name": "y", "shape": [1], "datatype": "UINT16", "data": [258]}]}


def test_kserves_byte_tensor_helpers():
    packed = serialize_byte_tensor(np.array([b"ab", b"c"], dtype=object))
    assert packed.shape == () and packed.item() == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert deserialize_bytes_tensor(packed.item()).tolist() == [b"ab", b"c"]


def test_requested_output_binary_data():
    assert RequestedOutput("y").binary_data is None
    assert RequestedOutput("y", {"binary_data": 0}).binary_data is False
    grpc_true = pb.InferParameter(bool_param=True)
    assert RequestedOutput("y", {"binary_data": grpc_true}).binary_data is True
    assert param_value(pb.InferParameter()) is None and param_value(5) == 5
    assert repr(RequestedOutput("y")) == "RequestedOutput(name='y', parameters=None)"


def test_as_dataframe_has_a_column_per_input():
    import pandas as pd  # the test extra installs it

    request = InferRequest("m", [InferInput("a", [2], "INT32", [1, 2]), InferInput("b", [2, 1], "FP32", [[.5], [.25]])])
    frame = request.as_dataframe()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["a", "b"] and frame["b"].tolist() == [.5, .25]
