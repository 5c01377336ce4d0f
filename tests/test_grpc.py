"""Acceptance tests of the v2 gRPC endpoint, against real servers, with real clients.

Clients: tritonclient.grpc (sync and aio), tritonclient.http, the raw protobuf stub of
tritonclient.grpc.service_pb2_grpc and kserve_sdk's own InferenceGRPCClient.
"""
import json
import os
import queue
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from functools import partial

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from helpers import ROOT, post_json, triton_error, triton_input

pytestmark = pytest.mark.timeout(60)

MIB8 = 8 * 1024 * 1024
ZOO_MODELS = {"echo", "pipeline", "headers", "failing", "slow", "explained", "raw"}
SIDE_MODELS = ["toggle", "echo", "raw", "listed"]
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


# --- helpers ------------------------------------------------------------------------------------------
@contextmanager
def triton(server):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def raw_stub(server, options=()):
    channel = grpc.insecure_channel(server.grpc_url, options=list(options))
    try:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    finally:
        channel.close()


def rpc_error(call, *args, **kwargs):
    """(code, details) of a call that must fail."""
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value.code(), info.value.details()


def fp32_input(name="INPUT0", values=((1.0, 2.0, 3.0, 4.0),)):
    arr = np.asarray(values, dtype=np.float32)
    return pb.ModelInferRequest.InferInputTensor(name=name, datatype="FP32", shape=list(arr.shape)), arr.tobytes()


def bytes_input(text):
    return triton_input(tgrpc, "INPUT0", np.array([text.encode()], dtype=np.object_))


def unknown(name, served=ZOO_MODELS):
    """The message of a model the server never knew: Triton's sentence, KServe's, then the models served."""
    return (f"Request for unknown model: '{name}' is not found. Model with name {name} does not exist. "
            f"Models served: {', '.join(sorted(served))}.")


# --- servers other than the session zoo ---------------------------------------------------------------
@pytest.fixture(scope="module")
def side(start_server):
    """A zoo with "toggle" (can turn unready) and models a test may unload."""
    return start_server("tests/models/zoo.py", env={"ZOO_MODELS": ",".join(SIDE_MODELS)})


@pytest.fixture(scope="module")
def grpc_models(start_server):
    """tests/models/grpc_models.py: "hdr" and "stats"."""
    return start_server("tests/models/grpc_models.py")


# --- 1. every unary RPC through tritonclient.grpc ----------------------------------------------------
def test_health_and_server_metadata(zoo):
    with triton(zoo) as client:
        assert client.is_server_live() is True
        assert client.is_server_ready() is True
        assert client.is_model_ready("echo") is True
        meta = client.get_server_metadata()
        assert meta.name == "kserve-sdk"
        assert meta.version
        assert {"model_repository_extension", "binary_tensor_data"} <= set(meta.extensions)
        assert triton_error(client.is_model_ready, "nope") == ("StatusCode.NOT_FOUND", unknown("nope"))


def test_model_metadata(zoo):
    with triton(zoo) as client:
        meta = client.get_model_metadata("echo")
        assert meta.name == "echo"
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("INPUT0", "FP32", [-1, 4])]
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("OUTPUT0", "FP32", [-1, 4])]
        as_json = client.get_model_metadata("echo", as_json=True)
        assert as_json["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "4"]}]
        assert triton_error(client.get_model_metadata, "nope") == ("StatusCode.NOT_FOUND", unknown("nope"))


def test_repository_index(zoo):
    with triton(zoo) as client:
        index = client.get_model_repository_index()
        assert {m.name: m.state for m in index.models} == {name: "READY" for name in ZOO_MODELS}
        assert "never" not in {m.name for m in index.models}  # its load failed: not served


def test_load_and_unload(side):
    with triton(side) as client:
        assert triton_error(client.load_model, "not-in-repo") == (
            "StatusCode.NOT_FOUND", "failed to load model 'not-in-repo': " + unknown("not-in-repo", SIDE_MODELS))
        assert triton_error(client.unload_model, "not-in-repo") == ("StatusCode.NOT_FOUND",
                                                                    unknown("not-in-repo", SIDE_MODELS))
        assert client.is_model_ready("raw") is True
        client.unload_model("raw")
        assert {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}["raw"] == (
            "UNAVAILABLE", "unloaded")
        assert client.is_model_ready("raw") is False
        tensor = tgrpc.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert triton_error(client.infer, "raw", [tensor]) == (
            "StatusCode.NOT_FOUND", "Request for unknown model: 'raw' has no available versions. Model raw was "
            "unloaded: load it again (POST /v2/repository/models/raw/load) to serve it.")
        client.load_model("raw")  # the repository serves again the model it unloaded
        assert client.is_model_ready("raw") is True and client.is_model_ready("echo") is True


# --- 1. infer round trips ------------------------------------------------------------------------------
ROUND_TRIP = {
    "FP32": np.array([[0.0, -1.5, 3.4028235e38, 1.0e-45], [np.inf, -np.inf, np.nan, -0.0]], dtype=np.float32),
    "FP16": np.array([[0.0, -1.5, 65504.0, 6.0e-8], [np.inf, -np.inf, np.nan, -0.0]], dtype=np.float16),
    "INT64": np.array([[np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max]], dtype=np.int64),
    "BOOL": np.array([[True, False, False], [False, True, True]], dtype=np.bool_),
    "BYTES": np.array([[b"plain", b"", "h\u00e9llo \u2603".encode(), b"\x00\xff\xfe binary"]], dtype=np.object_),
    "FP64": np.array([1e300, -0.0, np.nan, 5e-324]),
    "INT8": np.array([[-128, 127], [0, -1]], dtype=np.int8),
    "INT32": np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], dtype=np.int32),
    "UINT8": np.array([0, 255], dtype=np.uint8),
    "UINT64": np.array([0, 2 ** 64 - 1], dtype=np.uint64),
}
try:
    import ml_dtypes

    ROUND_TRIP["BF16"] = np.array([[1.5, -2.0, 3.0, np.inf]], dtype=ml_dtypes.bfloat16)
except ImportError:  # tritonclient needs ml_dtypes for BF16
    pass


@pytest.mark.parametrize("datatype", sorted(ROUND_TRIP))
def test_infer_round_trip(zoo, datatype):
    data = ROUND_TRIP[datatype]
    tensor = tgrpc.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    with triton(zoo) as client:
        result = client.infer("echo", [tensor], request_id=f"rt-{datatype}")
    out = result.as_numpy("OUTPUT0")
    assert out.dtype == data.dtype
    assert out.shape == data.shape
    if datatype == "BYTES":
        assert out.tolist() == data.tolist()
    else:
        assert out.tobytes() == data.tobytes()  # bit-exact, nan and -0.0 included
    response = result.get_response()
    assert (response.id, response.model_name) == (f"rt-{datatype}", "echo")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", datatype, list(data.shape))]


def test_infer_empty_tensor(zoo):
    tensor = tgrpc.InferInput("INPUT0", [0, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((0, 4), np.float32))
    with triton(zoo) as client:
        out = client.infer("echo", [tensor]).as_numpy("OUTPUT0")
    assert out.shape == (0, 4) and out.dtype == np.float32


# (datatype, shape, the list the model answers): short lists are packed without numpy, and must come out
# as numpy makes them, truncation, strings and nested lists included
LISTED = [("INT8", [2], [127, -128]), ("INT16", [1, 2], [[1, -2]]), ("INT32", [2], [1.5, -2.7]),
          ("INT64", [2], [True, 2 ** 40]), ("UINT8", [1], [255]), ("UINT16", [1], [258]),
          ("UINT32", [1], [2 ** 32 - 2]), ("UINT64", [1], [2 ** 64 - 2]),
          ("FP32", [3], [0.1, float("nan"), "2.5"]), ("FP64", [2], [1, -0.0]),
          ("FP32", [2, 2], [0, 1, 2, 3]),  # flat, for a shape of two dimensions
          ("FP32", [20], list(range(20)))]  # longer than the packed ones: numpy's path, for comparison


@pytest.mark.parametrize("datatype,shape,data", LISTED)
def test_list_outputs_are_sent_as_numpy_makes_them(side, datatype, shape, data):
    spec = bytes_input(json.dumps({"datatype": datatype, "shape": shape, "data": data}))
    with triton(side) as client:
        result = client.infer("listed", [spec])
        out = result.as_numpy("out")
    expected = np.asarray(data, dtype=out.dtype).reshape(shape)
    assert out.dtype == tgrpc.triton_to_np_dtype(datatype)
    assert out.tobytes() == expected.tobytes()  # bit-exact: 0.1 as float32, nan, -0.0, 1.5 -> 1


# A value out of its datatype's range is found as the answer is encoded, a count that does not match the
# shape before: both are the model's fault, and name the model, the output and what is wrong.
@pytest.mark.parametrize("datatype,data,message", [
    ("UINT8", [-1], "model 'listed' returned output 'out' whose data does not fit datatype UINT8: Python "
                    "integer -1 out of bounds for uint8"),
    ("INT32", [2 ** 31], "output 'out' whose data does not fit datatype INT32: Python integer 2147483648 out "
                         "of bounds for int32"),
    ("INT16", [1, 2], "model 'listed' returned output 'out' that is malformed: shape [1] needs 1 values but "
                      "the data has 2"),
])
def test_list_outputs_that_do_not_fit_are_named(side, datatype, data, message):
    spec = json.dumps({"datatype": datatype, "shape": [1], "data": data})
    with triton(side) as client:
        got, text = triton_error(client.infer, "listed", [bytes_input(spec)])
    assert (got, message in text) == ("StatusCode.INTERNAL", True), (got, text)
    # the same answer over REST, its output asked for as binary (raw bytes, as over gRPC)
    status, _, body = post_json(side.http_port, "/v2/models/listed/infer", timeout=10, doc={
        "inputs": [{"name": "spec", "shape": [1], "datatype": "BYTES", "data": [spec]}],
        "outputs": [{"name": "out", "parameters": {"binary_data": True}}]})
    assert (status, message in body["error"]) == (500, True), (status, body)


def test_requested_outputs(zoo):
    arrays = {"INPUT0": ROUND_TRIP["FP32"], "INPUT1": ROUND_TRIP["BYTES"], "INPUT2": ROUND_TRIP["INT64"]}
    datatypes = {"INPUT0": "FP32", "INPUT1": "BYTES", "INPUT2": "INT64"}
    inputs = []
    for name, arr in arrays.items():
        tensor = tgrpc.InferInput(name, list(arr.shape), datatypes[name])
        tensor.set_data_from_numpy(arr)
        inputs.append(tensor)
    with triton(zoo) as client:
        everything = client.infer("echo", inputs)
        assert [o.name for o in everything.get_response().outputs] == ["OUTPUT0", "OUTPUT1", "OUTPUT2"]
        picked = client.infer("echo", inputs, outputs=[tgrpc.InferRequestedOutput("OUTPUT2"),
                                                       tgrpc.InferRequestedOutput("OUTPUT1")])
        assert [o.name for o in picked.get_response().outputs] == ["OUTPUT2", "OUTPUT1"]
        assert picked.as_numpy("OUTPUT0") is None
        assert picked.as_numpy("OUTPUT2").tolist() == arrays["INPUT2"].tolist()
        assert picked.as_numpy("OUTPUT1").tolist() == arrays["INPUT1"].tolist()
        assert triton_error(client.infer, "echo", inputs, outputs=[tgrpc.InferRequestedOutput("OUTPUT9")]) == (
            "StatusCode.INVALID_ARGUMENT", "Unexpected inference output 'OUTPUT9' for model 'echo'")


def test_typed_contents_are_answered_in_raw_output_contents(zoo):
    """A request with typed contents (no raw) is answered, as Triton answers every request, in
    ``raw_output_contents``: tritonclient reads every typed datatype back with ``as_numpy``."""
    request = pb.ModelInferRequest(model_name="echo", id="typed")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 2]).contents.fp32_contents.extend([1.5, -2, 0, 8])
    request.inputs.add(name="INPUT1", datatype="INT64", shape=[2]).contents.int64_contents.extend([-(2 ** 63), 7])
    request.inputs.add(name="INPUT2", datatype="BOOL", shape=[3]).contents.bool_contents.extend([True, False, True])
    request.inputs.add(name="INPUT3", datatype="BYTES", shape=[2]).contents.bytes_contents.extend([b"a\x00", b""])
    request.inputs.add(name="INPUT4", datatype="UINT64", shape=[1]).contents.uint64_contents.extend([2 ** 64 - 1])
    with raw_stub(zoo) as stub:
        response = stub.ModelInfer(request)
    assert len(response.raw_output_contents) == 5
    assert all(not o.HasField("contents") for o in response.outputs)
    result = tgrpc.InferResult(response)
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", "FP32", [2, 2]), ("OUTPUT1", "INT64", [2]), ("OUTPUT2", "BOOL", [3]), ("OUTPUT3", "BYTES", [2]),
        ("OUTPUT4", "UINT64", [1])]
    assert result.as_numpy("OUTPUT0").tolist() == [[1.5, -2], [0, 8]]
    assert result.as_numpy("OUTPUT1").tolist() == [-(2 ** 63), 7]
    assert result.as_numpy("OUTPUT2").tolist() == [True, False, True]
    assert result.as_numpy("OUTPUT3").tolist() == [b"a\x00", b""]
    assert result.as_numpy("OUTPUT4").tolist() == [2 ** 64 - 1]
    assert response.id == "typed"


# --- parameters ------------------------------------------------------------------------------------------
def test_parameters_of_every_kind_reach_the_model(zoo):
    """The echo model answers with ``parameters=payload.parameters``: what it received comes back."""
    request = pb.ModelInferRequest(model_name="echo", id="params")
    tensor, raw = fp32_input()
    request.inputs.append(tensor)
    request.raw_input_contents.append(raw)
    request.parameters["flag"].bool_param = True
    request.parameters["off"].bool_param = False
    request.parameters["count"].int64_param = -(2 ** 40)
    request.parameters["name"].string_param = "h\u00e9llo"
    request.parameters["ratio"].double_param = 0.125
    request.parameters["huge"].uint64_param = 2 ** 64 - 2
    with raw_stub(zoo) as stub:
        response = stub.ModelInfer(request)
    got = {k: (v.WhichOneof("parameter_choice"), getattr(v, v.WhichOneof("parameter_choice")))
           for k, v in response.parameters.items()}
    assert got == {"flag": ("bool_param", True), "off": ("bool_param", False),
                   "count": ("int64_param", -(2 ** 40)), "name": ("string_param", "h\u00e9llo"),
                   "ratio": ("double_param", 0.125), "huge": ("uint64_param", 2 ** 64 - 2)}


def test_parameters_through_tritonclient(zoo):
    tensor = tgrpc.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    with triton(zoo) as client:
        result = client.infer("echo", [tensor], parameters={"b": True, "i": 42, "s": "text", "d": 2.5})
    params = result.get_response().parameters
    assert params["b"].bool_param is True
    assert params["i"].int64_param == 42
    assert params["s"].string_param == "text"
    assert params["d"].double_param == 2.5
    assert set(params) == {"b", "i", "s", "d"}


# --- 2. streaming ----------------------------------------------------------------------------------------
def _collect(results, result, error):
    results.put((result, error))


def _fp32(value, n=4):
    return triton_input(tgrpc, "INPUT0", np.full((1, n), value, np.float32))


def test_stream_answers_in_order(zoo):
    results = queue.Queue()
    with triton(zoo) as client:
        client.start_stream(callback=partial(_collect, results))
        try:
            for i in range(10):
                client.async_stream_infer("echo", [_fp32(i * 1.5)], request_id=f"s{i}")
            answers = [results.get(timeout=15) for _ in range(10)]
        finally:
            client.stop_stream()
    for i, (result, error) in enumerate(answers):
        assert error is None, error
        assert result.get_response().id == f"s{i}"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), i * 1.5, np.float32))
    assert results.empty()


def test_stream_goes_on_after_failed_requests(zoo):
    results = queue.Queue()
    with triton(zoo) as client:
        client.start_stream(callback=partial(_collect, results))
        try:
            client.async_stream_infer("echo", [_fp32(1)], request_id="a")
            client.async_stream_infer("nope", [_fp32(2)], request_id="b")
            client.async_stream_infer("echo", [_fp32(3)], request_id="c")
            client.async_stream_infer("failing", [bytes_input("invalid")], request_id="d")
            client.async_stream_infer("failing", [bytes_input("boom")], request_id="e")
            client.async_stream_infer("echo", [_fp32(4)], request_id="f")
            answers = [results.get(timeout=15) for _ in range(6)]
        finally:
            client.stop_stream()
    oks = {0: ("a", 1), 2: ("c", 3), 5: ("f", 4)}
    for index, (request_id, value) in oks.items():
        result, error = answers[index]
        assert error is None, error
        assert result.get_response().id == request_id
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), value, np.float32))
    errors = {index: answers[index] for index in (1, 3, 4)}
    assert all(result is None for result, _ in errors.values())
    assert errors[1][1].message() == unknown("nope")
    assert errors[3][1].message() == "instance 0 must be a number"
    assert errors[4][1].message() == "RuntimeError : kaboom (model 'failing')"


# --- 3. status codes ----------------------------------------------------------------------------------
def test_unknown_model_is_not_found_on_every_rpc(zoo):
    tensor, raw = fp32_input()
    infer = pb.ModelInferRequest(model_name="x", inputs=[tensor], raw_input_contents=[raw])
    expected = (grpc.StatusCode.NOT_FOUND, unknown("x"))
    with raw_stub(zoo) as stub:
        assert rpc_error(stub.ModelInfer, infer) == expected
        assert rpc_error(stub.ModelReady, pb.ModelReadyRequest(name="x")) == expected
        assert rpc_error(stub.ModelMetadata, pb.ModelMetadataRequest(name="x")) == expected
        assert rpc_error(stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="x")) == (
            grpc.StatusCode.NOT_FOUND, "failed to load model 'x': " + unknown("x"))
        assert rpc_error(stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="x")) == expected


def _bad(kind):
    """A ModelInferRequest to echo that is malformed in one way, with the message it must get."""
    request = pb.ModelInferRequest(model_name="echo")
    tensor, raw = fp32_input()
    if kind == "raw and typed mixed":
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
        request.inputs.append(tensor)
        request.raw_input_contents.append(raw)
        return request, ("contents field must not be specified when using raw_input_contents for 'INPUT0' for model "
                         "'echo': input 'INPUT0' has typed contents but the message also has raw contents")
    if kind == "raw count mismatch":
        request.inputs.append(tensor)
        request.inputs.append(fp32_input("INPUT1")[0])
        request.raw_input_contents.append(raw)
        return request, "1 raw input contents given for 2 inputs"
    if kind == "raw size mismatch":
        request.inputs.append(tensor)
        request.raw_input_contents.append(raw[:-1])
        return request, "input 'INPUT0': 15 raw bytes do not match shape [1, 4] of FP32 (16 bytes)"
    if kind == "unknown datatype":
        tensor.datatype = "FP33"
        request.inputs.append(tensor)
        request.raw_input_contents.append(raw)
        return request, "input 'INPUT0': unsupported datatype 'FP33'"
    if kind == "typed count mismatch":
        tensor.shape[:] = [2, 4]
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
        request.inputs.append(tensor)
        return request, "input 'INPUT0': 4 values given but shape [2, 4] needs 8"
    if kind == "typed field of another datatype":
        tensor.contents.int64_contents.extend([1, 2, 3, 4])
        request.inputs.append(tensor)
        return request, "input 'INPUT0': datatype FP32 takes fp32_contents, got int64_contents"
    if kind == "typed contents for FP16":
        tensor.datatype = "FP16"
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
        request.inputs.append(tensor)
        return request, "input 'INPUT0': datatype FP16 takes raw_input_contents, got fp32_contents"
    if kind == "no contents":
        request.inputs.append(tensor)
        return request, "input 'INPUT0' has no contents"
    if kind == "negative dimension":
        tensor.shape[:] = [-1, 4]
        request.inputs.append(tensor)
        request.raw_input_contents.append(raw)
        return request, "input 'INPUT0': shape [-1, 4] has a negative dimension"
    if kind == "typed value out of range":
        tensor.datatype = "INT8"
        tensor.shape[:] = [1]
        tensor.contents.int_contents.append(300)
        request.inputs.append(tensor)
        return request, "input 'INPUT0': Python integer 300 out of bounds for int8"
    if kind.startswith("raw BYTES"):
        tensor.datatype = "BYTES"
        tensor.shape[:] = [2] if kind == "raw BYTES count mismatch" else [1]
        request.inputs.append(tensor)
        raw, message = {
            "raw BYTES count mismatch": (b"\x03\0\0\0abc", "1 BYTES elements given but the shape needs 2"),
            "raw BYTES length past the end": (b"\x09\0\0\0abc", "BYTES element length 9 at offset 0 runs past "
                                                                  "the end of the data"),
            "raw BYTES truncated prefix": (b"\x03\0\0\0abc\x01", "BYTES element at offset 7 has a truncated "
                                                                "length prefix"),
        }[kind]
        request.raw_input_contents.append(raw)
        return request, f"input 'INPUT0': {message}"
    if kind == "duplicate input":
        request.inputs.extend([tensor, tensor])
        request.raw_input_contents.extend([raw, raw])
        return request, "duplicate input name 'INPUT0'"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["raw and typed mixed", "raw count mismatch", "raw size mismatch",
                                  "unknown datatype", "typed count mismatch", "typed field of another datatype",
                                  "typed contents for FP16", "no contents", "duplicate input", "negative dimension",
                                  "typed value out of range", "raw BYTES count mismatch",
                                  "raw BYTES length past the end", "raw BYTES truncated prefix"])
def test_bad_input_is_invalid_argument(zoo, kind):
    request, message = _bad(kind)
    with raw_stub(zoo) as stub:
        assert rpc_error(stub.ModelInfer, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)
        # the server goes on
        tensor, raw = fp32_input()
        assert stub.ModelInfer(pb.ModelInferRequest(model_name="echo", inputs=[tensor],
                                                    raw_input_contents=[raw])).raw_output_contents == [raw]


def _failing(what):
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(what.encode())
    return pb.ModelInferRequest(model_name="failing", inputs=[tensor])


@pytest.mark.parametrize("what, code, message", [
    ("invalid", grpc.StatusCode.INVALID_ARGUMENT, "instance 0 must be a number"),
    ("notimpl", grpc.StatusCode.UNIMPLEMENTED, "this model cannot do that"),
    ("inference", grpc.StatusCode.INTERNAL, "the model ran out of patience"),
    ("boom", grpc.StatusCode.INTERNAL, "RuntimeError : kaboom (model 'failing')"),
])
def test_model_errors_map_to_status_codes(zoo, what, code, message):
    with raw_stub(zoo) as stub:
        assert rpc_error(stub.ModelInfer, _failing(what)) == (code, message)
    # and the message is the one v2 REST gives for the same request
    status, _, body = post_json(zoo.http_port, "/v2/models/failing/infer",
                                {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": [what]}]},
                                timeout=10)
    assert body == {"error": message}
    assert status == {"INVALID_ARGUMENT": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500}[code.name]


def test_model_not_ready_is_unavailable(side):
    tensor, raw = fp32_input()
    request = pb.ModelInferRequest(model_name="toggle", inputs=[tensor], raw_input_contents=[raw])
    with raw_stub(side) as stub:
        assert stub.ModelReady(pb.ModelReadyRequest(name="toggle")).ready is True
        status, _, body = post_json(side.http_port, "/v1/models/toggle:predict", {"instances": ["off"]}, timeout=10)
        assert (status, body) == (200, {"predictions": ["off"]})
        assert rpc_error(stub.ModelInfer, request) == (
            grpc.StatusCode.UNAVAILABLE, "Model with name toggle is not ready.")
        assert stub.ModelReady(pb.ModelReadyRequest(name="toggle")).ready is False
        assert stub.ServerReady(pb.ServerReadyRequest()).ready is False
        assert stub.ServerLive(pb.ServerLiveRequest()).live is True
        index = stub.RepositoryIndex(pb.RepositoryIndexRequest())
        assert {m.name: m.state for m in index.models}["toggle"] == "UNAVAILABLE"
        ready_only = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
        assert "toggle" not in {m.name for m in ready_only.models} and "echo" in {m.name for m in ready_only.models}
        # stream: the unready model's request fails, the next one is answered
        echo = pb.ModelInferRequest(model_name="echo", id="after", inputs=[tensor], raw_input_contents=[raw])
        answers = list(stub.ModelStreamInfer(iter([request, echo])))
        assert answers[0].error_message == "Model with name toggle is not ready."
        assert answers[1].error_message == "" and answers[1].infer_response.id == "after"


# --- 4. message size limits -----------------------------------------------------------------------------
def _request_of_size(size):
    """A ModelInferRequest to echo whose serialized size is exactly ``size`` bytes."""
    n = size - 64
    for _ in range(10):
        request = pb.ModelInferRequest(model_name="echo", id="big")
        request.inputs.add(name="INPUT0", datatype="UINT8", shape=[n])
        request.raw_input_contents.append(b"\x07" * n)
        diff = size - request.ByteSize()
        if diff == 0:
            return request
        n += diff
    request.id = "big" + "x" * (size - request.ByteSize())  # a varint boundary: pad the id instead
    assert request.ByteSize() == size
    return request


def test_default_limit_is_8_mib(zoo):
    """Echo answers 1 byte more than it is sent ("OUTPUT0" vs "INPUT0"): both 8 MiB limits are exact."""
    with raw_stub(zoo, UNLIMITED) as stub:
        fits = _request_of_size(MIB8 - 1)
        response = stub.ModelInfer(fits)
        assert response.ByteSize() == MIB8
        assert response.raw_output_contents[0] == fits.raw_input_contents[0]
        # a request at the limit whose answer is 1 byte over the send limit
        code, details = rpc_error(stub.ModelInfer, _request_of_size(MIB8))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"Sent message larger than max ({MIB8 + 1} vs. {MIB8})" in details
        # 8 MiB + 1 byte is refused on receipt
        code, details = rpc_error(stub.ModelInfer, _request_of_size(MIB8 + 1))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"Received message larger than max ({MIB8 + 1} vs. {MIB8})" in details
        assert stub.ServerLive(pb.ServerLiveRequest()).live is True


def test_raised_limits(start_server):
    server = start_server("tests/models/zoo.py", "--grpc_max_receive_message_length", "16777216",
                          "--grpc_max_send_message_length", "16777216", env={"ZOO_MODELS": "echo"})
    request = _request_of_size(MIB8 + 1)
    with raw_stub(server, UNLIMITED) as stub:
        response = stub.ModelInfer(request)
        assert response.raw_output_contents[0] == request.raw_input_contents[0]
        assert response.ByteSize() > MIB8
        code, details = rpc_error(stub.ModelInfer, _request_of_size(16777216 + 1))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Received message larger than max (16777217 vs. 16777216)" in details


# --- 5. headers -----------------------------------------------------------------------------------------
def _hdr_request():
    return pb.ModelInferRequest(model_name="hdr", id="h1", inputs=[fp32_input()[0]],
                                raw_input_contents=[fp32_input()[1]])


def test_metadata_reaches_the_model_and_response_headers_come_back(grpc_models):
    with raw_stub(grpc_models) as stub:
        response, call = stub.ModelInfer.with_call(
            _hdr_request(), metadata=(("x-request-id", "rid-42"), ("x-custom-thing", "v")))
    result = tgrpc.InferResult(response)
    assert result.as_numpy("REQUEST_ID").tolist() == [b"rid-42"]
    assert {b"x-custom-thing", b"x-request-id"} <= set(result.as_numpy("HEADER_NAMES").tolist())
    trailing = dict(call.trailing_metadata())
    assert trailing["x-model-said"] == "hello rid-42"
    assert trailing["x-postprocessed"] == "yes"


def test_tritonclient_headers_reach_the_model(grpc_models):
    with triton(grpc_models) as client:
        result = client.infer("hdr", [_fp32(1.0)], headers={"x-request-id": "tc-1", "x-other": "o"})
        assert result.as_numpy("REQUEST_ID").tolist() == [b"tc-1"]
        assert {b"x-other", b"x-request-id"} <= set(result.as_numpy("HEADER_NAMES").tolist())
        without = client.infer("hdr", [_fp32(1.0)])
    # With none sent, the server makes one up (issue 5) and the model sees it.
    generated = without.as_numpy("REQUEST_ID").tolist()[0].decode()
    assert len(generated) == 36 and generated.count("-") == 4 and generated != "tc-1"
    assert b"x-request-id" in without.as_numpy("HEADER_NAMES").tolist()


# --- 6. tritonclient and kserve_sdk in one process --------------------------------------------------------
BOTH_IMPORTS = textwrap.dedent('''
    import asyncio, sys
    import grpc, numpy as np
    if sys.argv[1] == "tritonclient-first":
        import tritonclient.grpc as tgrpc
        import tritonclient.grpc.aio as tgrpc_aio
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        import kserve_sdk as kserve
        from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
    else:
        import kserve_sdk as kserve
        from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
        import tritonclient.grpc as tgrpc
        import tritonclient.grpc.aio as tgrpc_aio
        from tritonclient.grpc import service_pb2, service_pb2_grpc
    from kserve_sdk.dataplane import DataPlane
    from kserve_sdk.handlers.grpc import InferenceServicer

    class Double(kserve.Model):
        def __init__(self, name):
            super().__init__(name)
            self.ready = True
        def predict(self, payload, headers=None):
            return payload.inputs[0].as_numpy() * 2

    class TritonSideServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        """A server written on tritonclient's generated classes only."""
        async def ServerLive(self, request, context):
            return service_pb2.ServerLiveResponse(live=True)
        async def ModelInfer(self, request, context):
            out = service_pb2.ModelInferResponse(model_name=request.model_name, id="triton-side")
            out.outputs.add(name="copy", datatype=request.inputs[0].datatype, shape=request.inputs[0].shape)
            out.raw_output_contents.extend(request.raw_input_contents)
            return out

    async def main():
        repo = kserve.ModelRepository()
        repo.update(Double("double"))
        ours = grpc.aio.server()
        kpb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(DataPlane(repo)), ours)
        our_port = ours.add_insecure_port("127.0.0.1:0")
        theirs = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(TritonSideServicer(), theirs)
        their_port = theirs.add_insecure_port("127.0.0.1:0")
        await ours.start(); await theirs.start()
        data = np.arange(4, dtype=np.float32).reshape(1, 4)
        # messages of either module are the same types
        assert kpb.ModelInferRequest is service_pb2.ModelInferRequest
        parsed = kpb.ModelInferRequest.FromString(service_pb2.ModelInferRequest(model_name="m").SerializeToString())
        assert parsed.model_name == "m"
        for port, model, expect in ((our_port, "double", data * 2), (their_port, "any", data)):
            # tritonclient -> server
            client = tgrpc_aio.InferenceServerClient(f"127.0.0.1:{port}")
            tensor = tgrpc_aio.InferInput("input-0", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            result = await client.infer(model, [tensor])
            got = result.as_numpy(result.get_response().outputs[0].name)
            assert np.array_equal(got, expect), (got, expect)
            assert await client.is_server_live()
            await client.close()
            # kserve_sdk client -> server
            kclient = kserve.InferenceGRPCClient(f"127.0.0.1:{port}", retries=0)
            request = kserve.InferRequest(model_name=model, infer_inputs=[kserve.InferInput("input-0", [1, 4], "FP32")])
            request.inputs[0].set_data_from_numpy(data)
            response = await kclient.infer(request)
            assert np.array_equal(response.outputs[0].as_numpy(), expect)
            assert await kclient.is_server_live()
            await kclient.close()
        await ours.stop(None); await theirs.stop(None)
        print("both ways ok:", sys.argv[1])

    asyncio.run(main())
''')


@pytest.mark.parametrize("order", ["tritonclient-first", "kserve_sdk-first"])
def test_tritonclient_and_kserve_sdk_in_one_process(order):
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", BOTH_IMPORTS, order], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=45)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"both ways ok: {order}"


# --- 7. one KServe-API model over REST and gRPC -----------------------------------------------------------
@pytest.mark.parametrize("binary", [True, False], ids=["rest-binary", "rest-json"])
def test_same_outputs_over_rest_and_grpc(grpc_models, binary):
    values = np.array([[1, 9, 3, 4], [0.5, 0.25, 0.125, 0], [-7, 2, 30, 1]], dtype=np.float32)
    names = ["sum", "argmax", "label"]

    grpc_in = tgrpc.InferInput("values", list(values.shape), "FP32")
    grpc_in.set_data_from_numpy(values)
    with triton(grpc_models) as client:
        over_grpc = client.infer("stats", [grpc_in], request_id="same")

    http_in = thttp.InferInput("values", list(values.shape), "FP32")
    http_in.set_data_from_numpy(values, binary_data=binary)
    http_client = thttp.InferenceServerClient(grpc_models.url.split("//", 1)[1])
    try:
        over_rest = http_client.infer("stats", [http_in], request_id="same",
                                      outputs=[thttp.InferRequestedOutput(n, binary_data=binary) for n in names])
    finally:
        http_client.close()

    assert over_grpc.as_numpy("sum").tolist() == [17.0, 0.875, 26.0]
    assert over_grpc.as_numpy("argmax").tolist() == [1, 0, 2]
    assert over_grpc.as_numpy("label").tolist() == [b"row0:big", b"row1:small", b"row2:big"]
    for name in names:
        a, b = over_grpc.as_numpy(name), over_rest.as_numpy(name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if name == "label" and not binary:  # tritonclient.http gives JSON BYTES as str
            b = np.array([v.encode() for v in b], dtype=np.object_)
        assert a.tolist() == b.tolist(), name
    assert over_rest.get_response()["id"] == over_grpc.get_response().id == "same"


# --- 8. a transformer forwarding over gRPC --------------------------------------------------------------
def _iris_classes(rows_cm):
    """What the sample's own artefact predicts for these rows (the answer the transformer must relay)."""
    import joblib

    classifier = joblib.load(os.path.join(ROOT, "samples", "custom_model", "model", "model.joblib"))
    return classifier.predict(np.asarray(rows_cm, dtype=np.float64)).astype(np.int64).tolist()


def test_transformer_forwards_over_grpc(start_server):
    predictor = start_server("samples/custom_model/model.py", "--model_name", "iris")
    transformer = start_server("tests/models/grpc_transformer.py", "--model_name", "iris",
                               "--predictor_protocol", "grpc-v2", "--predictor_host", predictor.grpc_url)
    rows_mm = np.array([[51, 35, 14, 2], [59, 30, 42, 15], [77, 30, 61, 23]], dtype=np.float32)
    expected = _iris_classes(rows_mm / 10)
    assert expected == [0, 1, 2]
    assert _iris_classes(rows_mm) != expected  # without the transformer's scaling the answer differs

    with triton(transformer) as client:
        tensor = tgrpc.InferInput("input-0", [3, 4], "FP32")
        tensor.set_data_from_numpy(rows_mm)
        over_grpc = client.infer("iris", [tensor], request_id="t-grpc", headers={"x-request-id": "fwd-4711"})
        # a predictor error comes back with its status code and message
        short = tgrpc.InferInput("input-0", [1, 3], "FP32")
        short.set_data_from_numpy(np.ones((1, 3), np.float32))
        status, message = triton_error(client.infer, "iris", [short])
    assert status == "StatusCode.INTERNAL"
    assert message.startswith("[INTERNAL] ValueError : cannot reshape array of size 3"), message
    predictor.log_with("requestId: fwd-4711")  # x-request-id was forwarded to the predictor
    out = over_grpc.as_numpy("output-0")
    assert out.dtype == np.int64 and out.tolist() == expected
    assert over_grpc.get_response().model_name == "iris"

    http_client = thttp.InferenceServerClient(transformer.url.split("//", 1)[1])
    try:
        tensor = thttp.InferInput("input-0", [3, 4], "FP32")
        tensor.set_data_from_numpy(rows_mm, binary_data=False)
        over_rest = http_client.infer("iris", [tensor], request_id="t-rest")
    finally:
        http_client.close()
    out = over_rest.as_numpy("output-0")
    assert out.dtype == np.int64 and out.tolist() == expected
    assert over_rest.get_response()["model_name"] == "iris"

    # the predictor itself, given the unscaled rows, answers differently
    with triton(predictor) as client:
        tensor = tgrpc.InferInput("input-0", [3, 4], "FP32")
        tensor.set_data_from_numpy(rows_mm)
        assert client.infer("iris", [tensor]).as_numpy("output-0").tolist() == _iris_classes(rows_mm)

    # an unreachable predictor is the transformer's UNAVAILABLE
    predictor.stop()
    with triton(transformer) as client:
        tensor = tgrpc.InferInput("input-0", [3, 4], "FP32")
        tensor.set_data_from_numpy(rows_mm)
        status, message = triton_error(client.infer, "iris", [tensor])
    assert status == "StatusCode.UNAVAILABLE"
    assert message.startswith("[UNAVAILABLE] ")


# --- registration ---------------------------------------------------------------------------------------
def test_service_is_served_by_one_generic_handler_and_no_registered_methods():
    """Registered methods make grpc.aio wait on one pending task per method for every call (116k
    instructions per small ModelInfer): the service must be served by its generic handler only, and that
    handler must answer every method of the v2 service with a tolerant parser."""
    from kserve_sdk.handlers.grpc import InferenceServicer, _TolerantRegistration
    from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as ours_pb
    from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import add_GRPCInferenceServiceServicer_to_server

    class Recorder:
        def __init__(self):
            self.generic, self.registered = [], []

        def add_generic_rpc_handlers(self, handlers):
            self.generic.extend(handlers)

        def add_registered_method_handlers(self, service, handlers):
            self.registered.append(service)

    server = Recorder()
    add_GRPCInferenceServiceServicer_to_server(InferenceServicer(None), _TolerantRegistration(server))
    assert server.registered == []
    assert len(server.generic) == 1
    service = ours_pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for method in service.methods:
        details = type("Details", (), {"method": f"/{service.full_name}/{method.name}", "invocation_metadata": ()})
        handler = server.generic[0].service(details)
        assert handler is not None, method.name
        assert type(handler.request_deserializer(b"\xff\xff")).__name__ == "Undecodable", method.name
