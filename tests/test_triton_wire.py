"""Triton's wire behaviours that its clients and examples rely on, against tests/models/triton_qa.py with
tritonclient (http and grpc) and raw clients: gRPC answers in raw_output_contents, CUDA shared-memory endpoints
answered without a GPU, Triton's mixed-contents message, generated response ids, the empty final response of a
decoupled stream, and the classification extension."""
import base64
import os
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from google.protobuf.message import Message
from tritonclient.utils import np_to_triton_dtype

from helpers import assert_error_answer, post_json, post_json_raw, request, triton_error, triton_input
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

KEY_PREFIX = f"/kserve-sdk-wire-{os.getpid()}"
SCORES = np.array([[0.1, 0.5, 0.25, 0.15], [4.0, 3.0, 2.0, 1.0]], dtype=np.float32)
NO_CUDA = ("CUDA shared memory is not supported on this server: failed to register CUDA shared memory region: "
           "'gpu0', GPUs not supported")


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/triton_qa.py", "--allow_client_shm", "true")


def _http(server):
    return thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def _grpc(server):
    return tgrpc.InferenceServerClient(server.grpc_url)


def _stub_call(server, method: str, message):
    """One RPC with a stub of the raw messages (a stream's answers as a list)."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        answer = getattr(GRPCInferenceServiceStub(channel), method)(message, timeout=30)
        return answer if isinstance(answer, Message) else list(answer)


def _rpc_error(server, method: str, message):
    with pytest.raises(grpc.RpcError) as info:
        _stub_call(server, method, message)
    return info.value.code(), info.value.details()


def _raw_request(model: str, **arrays: np.ndarray):
    """A ModelInferRequest with each array as a raw input of its dtype's datatype."""
    message = pb.ModelInferRequest(model_name=model)
    for name, array in arrays.items():
        message.inputs.add(name=name, datatype=np_to_triton_dtype(array.dtype), shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    return message


def _pair(module, datatype: str, a: np.ndarray, b: np.ndarray):
    return [triton_input(module, "INPUT0", a, datatype), triton_input(module, "INPUT1", b, datatype)]


# --- gRPC answers in raw_output_contents -------------------------------------------------------------------
def _typed_request(model: str, field: str, first: list, second: list, datatype: str):
    message = pb.ModelInferRequest(model_name=model)
    for name, values in (("INPUT0", first), ("INPUT1", second)):
        tensor = message.inputs.add(name=name, datatype=datatype, shape=[1, 16])
        getattr(tensor.contents, field).extend(values)
    return message


@pytest.mark.parametrize("model, field, datatype, dtype", [
    ("simple", "int_contents", "INT32", np.int32),
    ("simple_int8", "int_contents", "INT8", np.int8),
    ("simple_string", "bytes_contents", "BYTES", np.object_),
])
def test_typed_contents_are_answered_in_raw_output_contents(server, model, field, datatype, dtype):
    first, second = list(range(16)), [1] * 16
    encode = (lambda values: [str(v).encode() for v in values]) if datatype == "BYTES" else list
    answer = _stub_call(server, "ModelInfer", _typed_request(model, field, encode(first), encode(second), datatype))
    assert len(answer.raw_output_contents) == 2
    assert all(not output.HasField("contents") for output in answer.outputs)
    result = tgrpc.InferResult(answer)  # what tritonclient reads an answer with
    want_sum, want_diff = np.array([first]) + 1, np.array([first]) - 1
    if datatype == "BYTES":
        want_sum, want_diff = (np.array([[str(v).encode() for v in row] for row in w], dtype=np.object_)
                               for w in (want_sum, want_diff))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want_sum.astype(dtype))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), want_diff.astype(dtype))


def test_raw_and_typed_contents_together_are_refused_in_tritons_words(server):
    message = _typed_request("simple", "int_contents", list(range(8)), [1] * 16, "INT32")
    message.raw_input_contents.append(np.arange(8, dtype=np.int32).tobytes())
    assert _rpc_error(server, "ModelInfer", message) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple': "
        "input 'INPUT0' has typed contents but the message also has raw contents")


# --- CUDA shared memory without a GPU --------------------------------------------------------------------
@pytest.fixture
def regions():
    made = []

    def make(name: str, byte_size: int):
        made.append(shm.create_shared_memory_region(name, f"{KEY_PREFIX}-{name}", byte_size))
        return made[-1]

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("module", [thttp, tgrpc], ids=["rest", "grpc"])
def test_cuda_unregister_then_system_shared_memory_inference(server, regions, module):
    """What Triton's system shared-memory examples do first: clean up both kinds of regions."""
    client = _http(server) if module is thttp else _grpc(server)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never-registered")
    status = client.get_cuda_shared_memory_status(**({"as_json": True} if module is tgrpc else {}))
    assert status in ([], {})
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), dtype=np.int32)
    for name, data in (("in0", a), ("in1", b)):
        shm.set_shared_memory_region(regions(name, 64), [data])
    out = regions("out0", 64)
    try:
        for name in ("in0", "in1", "out0"):
            client.register_system_shared_memory(name, f"{KEY_PREFIX}-{name}", 64)
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("in0", 64)
        inputs[1].set_shared_memory("in1", 64)
        wanted = module.InferRequestedOutput("OUTPUT0")
        wanted.set_shared_memory("out0", 64)
        client.infer("simple", inputs, outputs=[wanted, module.InferRequestedOutput("OUTPUT1")])
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.int32, [1, 16]), a + b)
    finally:
        client.unregister_system_shared_memory()


def test_cuda_register_is_refused_over_rest(server):
    handle = base64.b64encode(b"\0" * 64).decode()
    assert triton_error(_http(server).register_cuda_shared_memory, "gpu0", handle, 0, 64) == ("400", NO_CUDA +
        "; pass tensors in system shared memory (/v2/systemsharedmemory) or in the request instead")
    assert_error_answer(server.http_port, request(server.http_port, "GET", "/v2/cudasharedmemory/region/gpu0/status"),
                        404, "Unable to find cuda shared memory region: 'gpu0'")
    assert post_json(server.http_port, "/v2/cudasharedmemory/region/gpu0/unregister", {})[::2] == (200, {})
    assert request(server.http_port, "GET", "/v2/cudasharedmemory/status")[::2] == (200, b"[]")


def test_cuda_register_is_refused_over_grpc(server):
    register = pb.CudaSharedMemoryRegisterRequest(name="gpu0", raw_handle=b"\0" * 64, device_id=0, byte_size=64)
    code, message = _rpc_error(server, "CudaSharedMemoryRegister", register)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith(NO_CUDA)
    code, message = _rpc_error(server, "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="gpu0"))
    assert code == grpc.StatusCode.NOT_FOUND and message.startswith("Unable to find cuda shared memory region: 'gpu0'")
    assert _stub_call(server, "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()).regions == {}


def test_cuda_endpoints_follow_allow_client_shm(start_server):
    closed = start_server("tests/models/triton_qa.py")
    got = request(closed.http_port, "GET", "/v2/cudasharedmemory/status")
    assert_error_answer(closed.http_port, got, 403, "start it with --allow_client_shm true")
    assert triton_error(_grpc(closed).unregister_cuda_shared_memory)[0] == "StatusCode.PERMISSION_DENIED"


# --- response ids ---------------------------------------------------------------------------------------
def test_a_request_without_an_id_is_answered_with_one(server):
    """simple builds InferResponse(response_id=payload.id, ...): the server fills in the id."""
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), dtype=np.int32)
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": d.ravel().tolist()}
                       for n, d in (("INPUT0", a), ("INPUT1", b))]}
    status, headers, doc = post_json(server.http_port, "/v2/models/simple/infer", body)
    assert status == 200 and doc["id"] == headers["x-request-id"] and doc["id"]
    assert post_json(server.http_port, "/v2/models/simple/infer", {**body, "id": "mine"})[2]["id"] == "mine"
    assert post_json(server.http_port, "/v2/models/simple/infer", body, {"x-request-id": "c7"})[2]["id"] == "c7"
    assert _http(server).infer("simple", _pair(thttp, "INT32", a, b)).get_response()["id"]
    assert _grpc(server).infer("simple", _pair(tgrpc, "INT32", a, b)).get_response().id
    assert _grpc(server).infer("simple", _pair(tgrpc, "INT32", a, b), request_id="r7").get_response().id == "r7"


# --- decoupled streams ------------------------------------------------------------------------------------
def _repeat_inputs(values):
    return [triton_input(tgrpc, "IN", np.array(values, dtype=np.int32)),
            triton_input(tgrpc, "DELAY", np.full(len(values), 5, dtype=np.uint32)),
            triton_input(tgrpc, "WAIT", np.array([5], dtype=np.uint32))]


def _final_flag(result):
    params = result.get_response().parameters
    return params["triton_final_response"].bool_param if "triton_final_response" in params else None


def test_a_decoupled_stream_ends_with_the_flagged_empty_response(server):
    answers: queue.Queue = queue.Queue()
    client = _grpc(server)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("repeat_int32", _repeat_inputs([7, 8]), request_id="plain")
        client.async_stream_infer("repeat_int32", _repeat_inputs([10, 11, 12]), request_id="flagged",
                                  enable_empty_final_response=True)
        got = [answers.get(timeout=30) for _ in range(6)]
    finally:
        client.stop_stream()
    assert [error for _, error in got] == [None] * 6
    results = [result for result, _ in got]
    assert [(r.get_response().id, _final_flag(r)) for r in results[:2]] == [("plain", None)] * 2
    assert [r.as_numpy("OUT").tolist() for r in results[:2]] == [[7], [8]]
    flagged, final = results[2:5], results[5]
    assert [(r.get_response().id, _final_flag(r), r.as_numpy("OUT").tolist()) for r in flagged] == [
        ("flagged", False, [10]), ("flagged", False, [11]), ("flagged", False, [12])]
    response = final.get_response()
    assert (response.id, response.model_name, _final_flag(final), len(response.outputs)) == (
        "flagged", "repeat_int32", True, 0)


def test_a_bad_empty_final_response_parameter_is_refused(server):
    message = _raw_request("repeat_int32", IN=np.array([1], np.int32), DELAY=np.array([1], np.uint32),
                           WAIT=np.array([1], np.uint32))
    message.parameters["triton_enable_empty_final_response"].string_param = "yes"
    answers = _stub_call(server, "ModelStreamInfer", iter([message]))
    assert len(answers) == 1 and answers[0].error_message == (
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param "
        "(tritonclient's enable_empty_final_response=True)")


# --- classification ---------------------------------------------------------------------------------------
WANT_SCORES = [[b"0.500000:1:bee", b"0.250000:2:cat", b"0.150000:3:dog"],
               [b"4.000000:0:ant", b"3.000000:1:bee", b"2.000000:2:cat"]]
WANT_COUNTS = [[b"5:1", b"2:2", b"1:0"], [b"40:0", b"30:1", b"20:2"]]


@pytest.mark.parametrize("module", [thttp, tgrpc], ids=["rest", "grpc"])
def test_class_count_answers_tritons_strings(server, module):
    client = _http(server) if module is thttp else _grpc(server)
    outputs = [module.InferRequestedOutput("SCORES", class_count=3),
               module.InferRequestedOutput("COUNTS", class_count=3)]
    result = client.infer("classifier", [triton_input(module, "INPUT0", SCORES)], outputs=outputs)
    assert result.as_numpy("SCORES").tolist() == WANT_SCORES
    assert result.as_numpy("COUNTS").tolist() == WANT_COUNTS


def test_class_count_over_rest_json(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": SCORES.ravel().tolist()}],
            "outputs": [{"name": "SCORES", "parameters": {"classification": 9}}]}
    status, _, doc = post_json(server.http_port, "/v2/models/classifier/infer", body)
    assert status == 200 and doc["outputs"] == [{"name": "SCORES", "datatype": "BYTES", "shape": [2, 4], "data": [
        "0.500000:1:bee", "0.250000:2:cat", "0.150000:3:dog", "0.100000:0:ant",
        "4.000000:0:ant", "3.000000:1:bee", "2.000000:2:cat", "1.000000:3:dog"]}]


@pytest.mark.parametrize("count", [0, -2, 2.5, "3", True])
def test_a_bad_class_count_is_refused_over_rest(server, count):
    body = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": SCORES.ravel().tolist()}],
            "outputs": [{"name": "SCORES", "parameters": {"classification": count}}]}
    got = post_json_raw(server.http_port, "/v2/models/classifier/infer", body)
    assert_error_answer(server.http_port, got, 400, "invalid value for 'classification' parameter of output 'SCORES': "
                        f"the class count (class_count) must be an integer of at least 1, got {count!r}")


def test_a_bad_class_count_is_refused_over_grpc(server):
    client = _grpc(server)
    assert triton_error(client.infer, "classifier", [triton_input(tgrpc, "INPUT0", SCORES)],
                        outputs=[tgrpc.InferRequestedOutput("SCORES", class_count=-1)]) == (
        "StatusCode.INVALID_ARGUMENT", "invalid value for 'classification' parameter of output 'SCORES': the class "
        "count (class_count) must be an integer of at least 1, got -1")
    message = _raw_request("classifier", INPUT0=SCORES)
    message.outputs.add(name="SCORES").parameters["classification"].string_param = "3"
    assert _rpc_error(server, "ModelInfer", message) == (
        grpc.StatusCode.INVALID_ARGUMENT, "invalid value for 'classification' parameter of output 'SCORES': the "
        "class count (class_count) must be an integer of at least 1, got '3'")


@pytest.mark.parametrize("module", [thttp, tgrpc], ids=["rest", "grpc"])
def test_a_bytes_output_cannot_be_classified(server, module):
    client = _http(server) if module is thttp else _grpc(server)
    status, message = triton_error(client.infer, "classifier", [triton_input(module, "INPUT0", SCORES)],
                                   outputs=[module.InferRequestedOutput("NAMES", class_count=2)])
    assert status == ("400" if module is thttp else "StatusCode.INVALID_ARGUMENT")
    assert message == ("output 'NAMES' cannot be classified (class_count 2): class result not available for output "
                       "due to unsupported type 'BYTES'")


def test_classification_and_shared_memory_are_refused_together(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": SCORES.ravel().tolist()}],
            "outputs": [{"name": "SCORES", "parameters": {"classification": 2, "shared_memory_region": "r",
                                                          "shared_memory_byte_size": 64}}]}
    got = post_json_raw(server.http_port, "/v2/models/classifier/infer", body)
    assert_error_answer(server.http_port, got, 400,
                        "output 'SCORES': Output can't set both 'shared_memory_region' and 'classification'")

