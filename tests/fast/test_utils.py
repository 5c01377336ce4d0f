"""utils/utils.py, utils/numpy_codec.py and constants: KServe's helpers for custom models."""
import uuid

import numpy as np
import pytest

from kserve_sdk.constants import constants
from kserve_sdk.constants.constants import GRPC_CONTENT_DATATYPE_MAPPINGS, PredictorProtocol
from kserve_sdk.errors import InvalidInput
from kserve_sdk.protocol.dtypes import DATATYPES
from kserve_sdk.protocol.infer_type import InferInput, InferRequest, RequestedOutput
from kserve_sdk.utils import numpy_codec, utils


def test_generate_uuid_makes_version_4_uuids():
    ids = {utils.generate_uuid() for _ in range(500)}
    assert len(ids) == 500
    for value in list(ids)[:50]:
        parsed = uuid.UUID(value)
        assert str(parsed) == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


@pytest.mark.parametrize("text", ["y", "YES", " t", "True", "on", "1", True])
def test_strtobool_true(text):
    assert utils.strtobool(text) is True


@pytest.mark.parametrize("text", ["n", "No", "f", "FALSE", "off", "0 ", False])
def test_strtobool_false(text):
    assert utils.strtobool(text) is False


@pytest.mark.parametrize("text", ["", "maybe", "2"])
def test_strtobool_refuses_anything_else(text):
    with pytest.raises(ValueError, match="invalid truth value"):
        utils.strtobool(text)


@pytest.mark.parametrize("protocol,v1,v2", [("v1", True, False), ("V2", False, True), ("grpc-v2", False, False),
                                            (PredictorProtocol.REST_V1, True, False),
                                            (PredictorProtocol.REST_V2, False, True)])
def test_protocol_names(protocol, v1, v2):
    assert (utils.is_v1(protocol), utils.is_v2(protocol)) == (v1, v2)


def test_cpu_count_is_at_least_one():
    assert 1 <= utils.cpu_count() <= 4096


def test_predict_input_of_a_v1_body():
    assert utils.get_predict_input({"instances": [[1, 2], [3, 4]]}).tolist() == [[1, 2], [3, 4]]
    assert utils.get_predict_input({"inputs": [[1]], "instances": [[2]]}).tolist() == [[1]]
    assert utils.get_predict_input({"instances": ["a", "b"]}) == ["a", "b"]
    assert utils.get_predict_input({"instances": []}).size == 0
    with pytest.raises(InvalidInput, match='the request has neither "instances" nor "inputs"'):
        utils.get_predict_input({})
    with pytest.raises(InvalidInput, match="unsupported payload type str"):
        utils.get_predict_input("x")


def test_predict_input_of_a_v2_request():
    numbers = InferRequest("m", [InferInput("x", [2], "INT32", [1, 2])])
    assert utils.get_predict_input(numbers).tolist() == [1, 2]
    text = InferRequest("m", [InferInput("s", [2], "BYTES", ["a", "b"])])
    assert utils.get_predict_input(text) == ["a", "b"]


def test_predict_response_of_a_v1_body():
    assert utils.get_predict_response({"instances": []}, np.array([1, 2]), "m") == {"predictions": [1, 2]}
    assert utils.get_predict_response({"instances": []}, [3], "m") == {"predictions": [3]}


def test_predict_response_of_a_v2_request():
    request = InferRequest("m", [InferInput("x", [1], "INT32", [1])], request_id="r",
                           parameters={"binary_data_output": True}, request_outputs=[RequestedOutput("output-0")])
    response = utils.get_predict_response(request, np.array([[0.5, 1.5]], dtype=np.float32), "m")
    [output] = response.outputs
    assert (response.id, response.model_name, output.name, output.datatype, output.shape) == (
        "r", "m", "output-0", "FP32", [1, 2])
    assert output.binary_data and response.selected_outputs() == [(output, True)]
    words = utils.get_predict_response(InferRequest("m", []), ["a", "b"], "m")
    assert words.outputs[0].datatype == "BYTES" and words.outputs[0].data == ["a", "b"]
    assert uuid.UUID(words.id).version == 4  # no request id: one is made
    with pytest.raises(InvalidInput, match="cannot send numpy dtype complex128 as a v2 tensor"):
        utils.get_predict_response(InferRequest("m", []), np.array([1j]), "m")


@pytest.mark.parametrize("datatype", sorted(DATATYPES - {"BF16"}))
def test_numpy_codec_round_trips_every_datatype(datatype):
    np_type = numpy_codec.to_np_dtype(datatype)
    assert np_type is not None and numpy_codec.from_np_dtype(np_type) == datatype


def test_numpy_codec_has_no_type_for_bf16_or_unknown_names():
    assert numpy_codec.to_np_dtype("BF16") is None and numpy_codec.to_np_dtype("FLOAT") is None
    assert numpy_codec.to_np_dtype("FP32") is np.float32 and numpy_codec.from_np_dtype(np.complex64) is None


def test_constants_are_kserves():
    assert (constants.DEFAULT_HTTP_PORT, constants.DEFAULT_GRPC_PORT) == (8080, 8081)
    assert constants.PREDICTOR_V2_URL_FORMAT.format("http", "h:1", "m") == "http://h:1/v2/models/m/infer"
    assert constants.PREDICTOR_URL_FORMAT.format("https", "h", "m") == "https://h/v1/models/m:predict"
    assert constants.INFERENCE_CONTENT_LENGTH_HEADER == "inference-header-content-length"
    assert [p.value for p in PredictorProtocol] == ["v1", "v2", "grpc-v2"]


def test_every_typed_grpc_field_exists_and_fp16_bf16_have_none():
    from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb

    fields = set(pb.InferTensorContents.DESCRIPTOR.fields_by_name)
    assert set(GRPC_CONTENT_DATATYPE_MAPPINGS.values()) <= fields
    assert set(GRPC_CONTENT_DATATYPE_MAPPINGS) == DATATYPES - {"FP16", "BF16"}
