"""Every bad input and failing model gets its status and a message naming the problem."""
import json
import struct

import numpy as np
import pytest

from helpers import assert_error_answer, binary_body, post_json, request, v2_fp32_doc

INFER = "/v2/models/echo/infer"


CASES = [
    # (id, path, body bytes, headers, status, message)
    ("unknown-model-v2", "/v2/models/nope/infer", json.dumps(v2_fp32_doc()).encode(), {}, 404,
     "Model with name nope does not exist."),
    ("unknown-model-v1", "/v1/models/nope:predict", b'{"instances": [1]}', {}, 404,
     "Model with name nope does not exist."),
    ("left-out-model", "/v1/models/never:predict", b'{"instances": [1]}', {}, 404,
     "Model with name never does not exist."),
    ("malformed-json-v2", INFER, b'{"inputs": [', {}, 400, "Unrecognized request format"),
    ("malformed-json-v1", "/v1/models/echo:predict", b"{nope", {}, 400, "Unrecognized request format"),
    ("empty-body-v1", "/v1/models/echo:predict", b"", {}, 400, "the request body is empty"),
    ("missing-inputs", INFER, b'{"id": "1"}', {}, 400, "has no 'inputs'"),
    ("inputs-not-list", INFER, b'{"inputs": {"name": "x"}}', {}, 400, 'Expected "inputs" to be a list'),
    ("instances-not-list", "/v1/models/echo:predict", b'{"instances": 5}', {}, 400,
     'Expected "instances" to be a list'),
    ("input-not-object", INFER, b'{"inputs": [3]}', {}, 400, "each input must be a JSON object"),
    ("wrong-datatype", INFER, json.dumps(v2_fp32_doc(datatype="FLOAT99")).encode(), {}, 400,
     "unsupported datatype 'FLOAT99'"),
    ("negative-dim", INFER, json.dumps(v2_fp32_doc(shape=[-2])).encode(), {}, 400, "negative dimension"),
    ("shape-not-ints", INFER, json.dumps(v2_fp32_doc(shape=["2"])).encode(), {}, 400,
     "shape must be a list of integers"),
    ("data-length-vs-shape", INFER, json.dumps(v2_fp32_doc(shape=[3])).encode(), {}, 400,
     "2 values given but shape [3] needs 3"),
    ("nested-data-vs-shape", INFER, json.dumps(v2_fp32_doc(shape=[2, 3], data=[[1, 2], [3, 4]])).encode(), {},
     400, "4 values given but shape [2, 3] needs 6"),
    ("data-not-numbers", INFER, json.dumps(v2_fp32_doc(data=["a", "b"])).encode(), {}, 400,
     "data does not fit datatype FP32"),
    ("data-missing", INFER, b'{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32"}]}', {}, 400,
     "'data' field is missing for input 'INPUT0'"),
    ("duplicate-input", INFER, json.dumps({"inputs": v2_fp32_doc()["inputs"] * 2}).encode(), {}, 400,
     "duplicate input name 'INPUT0'"),
    ("unknown-output", INFER, json.dumps({**v2_fp32_doc(), "outputs": [{"name": "NOPE"}]}).encode(), {}, 400,
     "Unexpected inference output 'NOPE' for model 'echo'"),
    ("model-invalid-input", "/v1/models/failing:predict", b'{"instances": ["invalid"]}', {}, 400,
     "instance 0 must be a number"),
    ("model-not-implemented", "/v1/models/failing:predict", b'{"instances": ["notimpl"]}', {}, 501,
     "this model cannot do that"),
    ("model-inference-error", "/v1/models/failing:predict", b'{"instances": ["inference"]}', {}, 500,
     "the model ran out of patience"),
    ("model-exception", "/v1/models/failing:predict", b'{"instances": ["boom"]}', {}, 500,
     "RuntimeError : kaboom"),
    ("explain-not-implemented", "/v1/models/echo:explain", b'{"instances": [1]}', {}, 501,
     "Could not find explainer_host."),
    ("no-route", "/v3/whatever", b"{}", {}, 404, "no route for POST /v3/whatever"),
]


@pytest.mark.parametrize("path,body,headers,status,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(zoo, path, body, headers, status, message):
    assert_error_answer(zoo.http_port, request(zoo.http_port, "POST", path, body, headers), status, message)


def _binary_case(size_param, payload, header_len=None, shape=(2,)):
    header = {"inputs": [{"name": "INPUT0", "shape": list(shape), "datatype": "FP32",
                          "parameters": {"binary_data_size": size_param}}]}
    body, headers = binary_body(header, payload)
    if header_len is not None:
        headers["Inference-Header-Content-Length"] = header_len
    return body, headers


BINARY_CASES = [
    ("size-vs-shape", _binary_case(4, b"\0" * 4), "binary_data_size 4 does not match shape [2] of FP32 (8 bytes)"),
    ("size-past-body", _binary_case(16, b"\0" * 8), "binary_data_size 16 runs past the end of the body"),
    ("negative-size", _binary_case(-8, b"\0" * 8), "binary_data_size must be a non-negative integer"),
    ("trailing-bytes", _binary_case(8, b"\0" * 12), "4 bytes follow the binary inputs"),
    ("header-length-past-body", _binary_case(8, b"\0" * 8, header_len="999999"),
     "Inference-Header-Content-Length 999999 is outside the request body"),
    ("header-length-not-int", _binary_case(8, b"\0" * 8, header_len="ten"),
     "Inference-Header-Content-Length must be an integer"),
    ("header-length-negative", _binary_case(8, b"\0" * 8, header_len="-1"),
     "Inference-Header-Content-Length -1 is outside the request body"),
]


@pytest.mark.parametrize("body_headers,message", [c[1:] for c in BINARY_CASES], ids=[c[0] for c in BINARY_CASES])
def test_binary_error(zoo, body_headers, message):
    body, headers = body_headers
    assert_error_answer(zoo.http_port, request(zoo.http_port, "POST", INFER, body, headers), 400, message)


def test_binary_size_without_header(zoo):
    doc = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]}
    got = request(zoo.http_port, "POST", INFER, json.dumps(doc).encode() + b"\0" * 8)
    assert_error_answer(zoo.http_port, got, 400, "Unrecognized request format")


def test_bytes_length_prefix_that_lies(zoo):
    element = struct.pack("<I", 50) + b"short"
    header = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES",
                          "parameters": {"binary_data_size": len(element)}}]}
    body, headers = binary_body(header, element)
    got = request(zoo.http_port, "POST", INFER, body, headers)
    assert_error_answer(zoo.http_port, got, 400, "BYTES element length 50 at offset 0 runs past the end of the data")


def test_non_utf8_bytes_as_json_output(zoo):
    element = struct.pack("<I", 2) + b"\xff\xfe"
    header = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES",
                          "parameters": {"binary_data_size": len(element)}}],
              "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]}
    body, headers = binary_body(header, element)
    got = request(zoo.http_port, "POST", INFER, body, headers)
    assert_error_answer(zoo.http_port, got, 400, "tensor 'OUTPUT0' holds bytes that are not UTF-8 text")


def test_model_not_ready_is_503(start_server):
    server = start_server("tests/models/zoo.py", env={"ZOO_MODELS": "toggle"}, grpc=False)
    assert post_json(server.http_port, "/v1/models/toggle:predict", {"instances": ["off"]})[0] == 200
    for path in ("/v1/models/toggle:predict", "/v2/models/toggle/infer"):
        doc = {"instances": [1]} if path.startswith("/v1") else v2_fp32_doc()
        status, _, body = post_json(server.http_port, path, doc)
        assert status == 503 and body == {"error": "Model with name toggle is not ready."}
    assert request(server.http_port, "GET", "/v1/models/toggle")[0] == 503
    assert request(server.http_port, "GET", "/v2/models/toggle/ready")[0] == 503
    status, _, body = request(server.http_port, "GET", "/v2/health/ready")
    assert status == 503 and json.loads(body) == {"error": "Server is not ready."}
    assert request(server.http_port, "GET", "/v2/health/live")[0] == 200


def test_binary_inputs_are_views_not_copies(zoo):
    """A 1 MiB binary tensor round-trips exactly (the decoder hands numpy a view of the body)."""
    data = np.arange(262144, dtype=np.float32)
    header = {"inputs": [{"name": "INPUT0", "shape": [262144], "datatype": "FP32",
                          "parameters": {"binary_data_size": data.nbytes}}],
              "parameters": {"binary_data_output": True}}
    body, headers = binary_body(header, data.tobytes())
    status, resp_headers, resp = request(zoo.http_port, "POST", INFER, body, headers)
    assert status == 200
    json_len = int(resp_headers["inference-header-content-length"])
    out = json.loads(resp[:json_len])["outputs"][0]
    assert out["parameters"]["binary_data_size"] == data.nbytes
    np.testing.assert_array_equal(np.frombuffer(resp[json_len:], dtype=np.float32), data)
