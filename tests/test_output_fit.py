"""A model's output whose list data does not fit its shape or datatype is the model's error on every encoding:
REST JSON refuses exactly what REST binary and gRPC refuse, with the same message naming the model, the
output and what is wrong (HTTP 500, gRPC INTERNAL); a list that fits is sent as the model gave it."""
import json

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import post_json, read_sse, triton_error, triton_input

MODELS = "tests/models/described_outputs.py"

# (id, datatype, shape, the list the model answers, what the error says after "returned output 'out' ")
UNFIT = [
    ("count", "INT32", [2, 2], [1, 2, 3], "that is malformed: shape [2, 2] needs 4 values but the data has 3"),
    ("out-of-range", "UINT8", [3], [1, -1, 300],
     "whose data does not fit datatype UINT8: Python integer -1 out of bounds for uint8"),
    ("int32-overflow", "INT32", [1], [2 ** 31],
     "whose data does not fit datatype INT32: Python integer 2147483648 out of bounds for int32"),
    ("long-list-out-of-range", "INT8", [20], list(range(19)) + [128],  # longer than struct packs: numpy's path
     "whose data does not fit datatype INT8: Python integer 128 out of bounds for int8"),
    ("ragged", "INT32", [2, 2], [[1, 2], [3]],
     "that is malformed: its data's nested lists differ in length, which shape [2, 2] cannot describe"),
    ("nested-count", "INT32", [2, 2], [[1, 2, 3], [4, 5, 6]],
     "that is malformed: shape [2, 2] needs 4 values but the data has 6"),
    ("not-a-number", "FP32", [2], [1, "x"],
     "whose data does not fit datatype FP32: could not convert string to float: 'x'"),
    ("null", "INT64", [2], [1, None], "whose data does not fit datatype INT64: int() argument must be"),
    ("object-as-text", "BYTES", [2], ["a", {"x": 1}],
     "whose data does not fit datatype BYTES: a BYTES element is a JSON object, not text"),
]
#: a v2 response dict is read as a response first, which finds a flat list's count (the message of UNFIT -> the
#: dict's, after "model 'm' ")
READ_FIRST = {UNFIT[0][4]: "returned a v2 response that cannot be read: output 'out': 3 values given but shape "
                           "[2, 2] needs 4"}
# (datatype, shape, a list that fits): sent in a JSON answer exactly as the model gave it
FITS = [("UINT8", [2], [0, 255]), ("INT64", [2], [-2 ** 63, 2 ** 63 - 1]), ("INT32", [2, 2], [[1, 2], [3, 4]]),
        ("INT8", [20], list(range(-10, 10))), ("FP32", [2], [0.5, 1]), ("FP64", [1], [1e300]),
        ("BYTES", [2], ["a", "b"]), ("BOOL", [2], [True, False]), ("UINT16", [0], [])]


@pytest.fixture(scope="module")
def described(start_server):
    return start_server(MODELS)


def spec_doc(datatype, shape, data, binary=False):
    """A v2 request whose one BYTES input describes the output the model answers."""
    spec = json.dumps({"datatype": datatype, "shape": shape, "data": data})
    doc = {"inputs": [{"name": "spec", "shape": [1], "datatype": "BYTES", "data": [spec]}]}
    if binary:
        doc["outputs"] = [{"name": "out", "parameters": {"binary_data": True}}]
    return doc


@pytest.mark.parametrize("datatype,shape,data,message", [c[1:] for c in UNFIT], ids=[c[0] for c in UNFIT])
def test_unfit_list_outputs_are_the_models_error_on_every_encoding(described, datatype, shape, data, message):
    for model in ("described", "described_dict"):  # an InferOutput, and a v2 response dict
        expected = f"model '{model}' returned output 'out' {message}"
        if model == "described_dict" and message in READ_FIRST:
            expected = f"model '{model}' {READ_FIRST[message]}"
        for binary in (False, True):
            status, _, body = post_json(described.http_port, f"/v2/models/{model}/infer",
                                        spec_doc(datatype, shape, data, binary))
            assert (status, body) == (500, {"error": body.get("error")}), (model, binary, status, body)
            assert expected in body["error"], (model, binary, body)
        spec = np.array([json.dumps({"datatype": datatype, "shape": shape, "data": data}).encode()], np.object_)
        with tgrpc.InferenceServerClient(described.grpc_url) as client:
            code, text = triton_error(client.infer, model, [triton_input(tgrpc, "spec", spec, "BYTES")])
        assert code == "StatusCode.INTERNAL" and expected in text, (model, code, text)


@pytest.mark.parametrize("datatype,shape,data,message", [c[1:] for c in UNFIT], ids=[c[0] for c in UNFIT])
def test_unfit_list_output_ends_a_stream_with_the_models_error(described, datatype, shape, data, message):
    _, events = read_sse(described.url, "/v2/models/described_stream/infer_stream",
                         spec_doc(datatype, shape, data))
    docs = [doc for _, doc in events]
    assert docs[0]["outputs"][0]["data"] == [7] and len(docs) == 2, docs
    assert f"model 'described_stream' returned output 'out' {message}" in docs[1]["error"], docs


@pytest.mark.parametrize("datatype,shape,data", FITS, ids=[f"{d}{s}" for d, s, _ in FITS])
def test_fitting_list_outputs_are_sent_as_given(described, datatype, shape, data):
    for model in ("described", "described_dict"):
        status, _, body = post_json(described.http_port, f"/v2/models/{model}/infer",
                                    spec_doc(datatype, shape, data))
        assert status == 200, body
        assert body["outputs"] == [{"name": "out", "datatype": datatype, "shape": shape, "data": data}], body
