"""A model's output list in a JSON answer: checked against its shape (content_problem) and its datatype
(json_data) as the binary encoders would, and sent as the model gave it when it fits; and the JSON-body
vocabulary the REST codecs share (protocol/rest/json_body.py)."""
import pytest

from kserve_sdk.errors import InferenceError, InvalidInput
from kserve_sdk.protocol.infer_type import InferOutput, InferResponse
from kserve_sdk.protocol.rest.json_body import json_object, require_object
from kserve_sdk.protocol.rest_codec import encode_infer_response
from kserve_sdk.protocol.tensor import DataDoesNotFit


@pytest.mark.parametrize("datatype,data", [
    ("UINT8", [0, 255]), ("INT8", list(range(-64, 64))), ("UINT64", [2 ** 64 - 1]), ("FP16", [0.5, 2]),
    ("FP32", [1, 2.5]), ("BOOL", [True, False]), ("BYTES", ["a", b"b"]), ("INT32", [1.5]),  # numpy's 1
])
def test_a_list_that_fits_is_sent_as_given(datatype, data):
    output = InferOutput("out", [len(data)], datatype, data=data)
    assert output.content_problem() is None and output.json_data() is data


@pytest.mark.parametrize("datatype,data,detail", [
    ("UINT8", [1, -1, 300], "Python integer -1 out of bounds for uint8"),
    ("INT8", list(range(100, 130)), "Python integer 128 out of bounds for int8"),  # longer than struct packs
    ("FP32", [1, "x"], "could not convert string to float: 'x'"),
    ("BYTES", ["a", {"x": 1}], "a BYTES element is a JSON object, not text"),
])
def test_a_list_its_datatype_cannot_hold_is_the_models_error(datatype, data, detail):
    output = InferOutput("out", [len(data)], datatype, data=data)
    with pytest.raises(DataDoesNotFit, match=detail):
        output.json_data()
    response = InferResponse(response_id="1", model_name="m", infer_outputs=[output])
    with pytest.raises(InferenceError) as error:  # the model's (500), not the client's (InvalidInput, 400)
        encode_infer_response(response, json_only=True)
    assert str(error.value).startswith(f"model 'm' returned output 'out' whose data does not fit datatype {datatype}: ")
    assert detail in str(error.value) and not isinstance(error.value, InvalidInput)


@pytest.mark.parametrize("shape,data,problem", [
    ([2, 2], [[1, 2], [3]], "its data's nested lists differ in length, which shape [2, 2] cannot describe"),
    ([2, 2], [[1, 2, 3], [4, 5, 6]], "shape [2, 2] needs 4 values but the data has 6"),
    ([2, 1, 2], [[[1, 2]], [[3, 4], [5, 6]]], "its data's nested lists differ in length"),
    ([2, 2], [1, 2, 3], "shape [2, 2] needs 4 values but the data has 3"),
])
def test_nested_lists_are_counted_against_the_shape(shape, data, problem):
    assert problem in InferOutput("out", shape, "INT32", data=data).content_problem()


def test_regular_nested_lists_fit():
    assert InferOutput("out", [2, 1, 2], "INT32", data=[[[1, 2]], [[3, 4]]]).content_problem() is None
    assert InferOutput("out", [2, 0], "INT32", data=[[], []]).content_problem() is None


@pytest.mark.parametrize("body,what,message", [
    (b"[1]", "the request body", "the request body must be a JSON object, got list"),
    (b'"text"', "a forecast request", "a forecast request must be a JSON object, got str"),
    (b"{nope", "the request body", "Unrecognized request format: "),
])
def test_a_json_body_must_be_an_object(body, what, message):
    with pytest.raises(InvalidInput) as error:
        json_object(body, what)
    assert str(error.value).startswith(message)


def test_the_v2_codec_names_no_type():
    with pytest.raises(InvalidInput) as error:
        require_object([1], name_type=False)
    assert str(error.value) == "the request body must be a JSON object"
    assert json_object(b'{"a": 1}') == {"a": 1}
