"""The public API has KServe's names, import paths and signatures; binary tensors are views."""
import inspect
import json

import numpy as np
import pytest

import kserve_sdk as kserve
from kserve_sdk import errors
from kserve_sdk.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput
from kserve_sdk.utils import numpy_codec, utils


def params(fn):
    return list(inspect.signature(fn).parameters)


def test_names_and_import_paths():
    for name in ["Model", "ModelServer", "ModelRepository", "InferRequest", "InferResponse", "InferInput",
                 "InferOutput", "RequestedOutput", "PredictorConfig", "InferenceRESTClient", "InferenceGRPCClient"]:
        assert hasattr(kserve, name), name
    for name in ["InvalidInput", "ModelNotFound", "ModelNotReady", "InferenceError", "ServerNotReady",
                 "UnsupportedProtocol"]:
        assert issubclass(getattr(errors, name), Exception)
    from kserve_sdk.constants import constants
    from kserve_sdk.logging import configure_logging
    from kserve_sdk.model_server import parser
    from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2 import ModelInferRequest
    from kserve_sdk.utils.utils import generate_uuid, strtobool

    assert constants.DEFAULT_HTTP_PORT == 8080 and parser.add_help is False
    assert callable(configure_logging) and ModelInferRequest().model_name == ""
    assert len(generate_uuid()) == 36 and strtobool("Yes") is True and strtobool("0") is False
    with pytest.raises(ValueError):
        strtobool("maybe")


def test_signatures_match_kserve():
    assert params(kserve.Model.__init__)[:3] == ["self", "name", "return_response_headers"]
    assert params(kserve.Model.predict) == ["self", "payload", "headers", "response_headers"]
    assert params(kserve.Model.postprocess) == ["self", "result", "headers", "response_headers"]
    assert params(kserve.Model.preprocess) == ["self", "payload", "headers"]
    assert params(kserve.Model.explain) == ["self", "payload", "headers"]
    assert params(kserve.Model.__call__) == ["self", "body", "headers", "verb"]
    assert params(InferInput.__init__) == ["self", "name", "shape", "datatype", "data", "parameters"]
    assert params(InferRequest.__init__) == ["self", "model_name", "infer_inputs", "request_id", "raw_inputs",
                                             "from_grpc", "parameters", "request_outputs", "model_version"]
    assert params(InferResponse.__init__) == ["self", "response_id", "model_name", "infer_outputs",
                                              "model_version", "raw_outputs", "from_grpc", "parameters",
                                              "use_binary_outputs", "requested_outputs"]
    assert params(kserve.ModelServer.start) == ["self", "models"]
    assert params(kserve.ModelServer.register_model) == ["self", "model", "name"]
    assert params(kserve.PredictorConfig.__init__)[:3] == ["self", "predictor_host", "predictor_protocol"]
    assert params(utils.get_predict_response) == ["payload", "result", "model_name"]


def test_numpy_codec():
    assert numpy_codec.to_np_dtype("FP16") is np.float16 and numpy_codec.to_np_dtype("BYTES") is np.object_
    assert numpy_codec.to_np_dtype("NOPE") is None
    assert numpy_codec.from_np_dtype(np.dtype("int8")) == "INT8" and numpy_codec.from_np_dtype(bool) == "BOOL"
    assert numpy_codec.from_np_dtype(np.dtype("<U3")) == "BYTES"


def test_binary_inputs_are_numpy_views_on_the_body():
    data = np.arange(1024, dtype=np.float32)
    head = json.dumps({"inputs": [{"name": "x", "shape": [1024], "datatype": "FP32",
                                   "parameters": {"binary_data_size": data.nbytes}}]}).encode()
    body = head + data.tobytes()
    request = InferRequest.from_bytes(body, len(head), "m")
    array = request.inputs[0].as_numpy()
    np.testing.assert_array_equal(array, data)
    assert np.shares_memory(array, np.frombuffer(body, dtype=np.uint8))


def test_to_rest_round_trip_and_model_call():
    out = InferOutput("y", [2, 2], "FP32")
    out.set_data_from_numpy(np.eye(2, dtype=np.float32), binary_data=False)
    doc, json_length = InferResponse("id1", "m", [out]).to_rest()
    assert json_length is None and doc["outputs"][0]["data"] == [1.0, 0.0, 0.0, 1.0]
    assert InferResponse.from_rest(doc).outputs[0].as_numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]

    inp = InferInput("x", [3], "INT32", data=[1, 2, 3])
    assert inp.as_numpy().dtype == np.int32 and inp.data == [1, 2, 3]
    assert RequestedOutput("y", {"binary_data": True}).binary_data is True

    class Double(kserve.Model):
        def predict(self, payload, headers=None):
            return {"predictions": [v * 2 for v in payload["instances"]]}

    import asyncio

    model = Double("d")
    response, response_headers = asyncio.run(model({"instances": [1, 2]}, {}))
    assert response == {"predictions": [2, 4]} and response_headers == {}


def test_every_typed_error_answers_a_row_of_the_status_table():
    """errors.STATUS_TABLE: each typed error's HTTP status and gRPC code are one row of it, and both
    directions read it (first row wins: RESOURCE_EXHAUSTED is 413, 429 is RESOURCE_EXHAUSTED)."""
    typed = [cls for cls in vars(errors).values() if isinstance(cls, type) and hasattr(cls, "grpc_code")]
    assert len(typed) >= 10
    for cls in typed:
        assert (int(cls.http_status), cls.grpc_code) in errors.STATUS_TABLE, cls
        assert errors.grpc_code_for_http(cls.http_status) == cls.grpc_code, cls
    for status, code in [(403, "PERMISSION_DENIED"), (401, "UNAUTHENTICATED"), (429, "RESOURCE_EXHAUSTED"),
                         (499, "CANCELLED"), (418, "INTERNAL")]:
        assert errors.grpc_code_for_http(status) == code
        assert errors.UpstreamError(status, "x").grpc_code == code
    for code, status in [("PERMISSION_DENIED", 403), ("RESOURCE_EXHAUSTED", 413), ("CANCELLED", 499),
                         ("DATA_LOSS", 500)]:
        assert errors.http_status_for_grpc(code) == status
