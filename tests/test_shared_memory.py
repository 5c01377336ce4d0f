"""Triton's system shared-memory extension, over REST and gRPC, with tritonclient's own shared-memory helpers."""
import json
import os

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from helpers import post_json, request
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

BIG = 16 * 1024 * 1024  # FP32 elements: 64 MiB
KEY_PREFIX = f"/kserve-sdk-test-{os.getpid()}"


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("tests/models/zoo.py", "--allow_client_shm", "true", env={"ZOO_MODELS": "echo"})


@pytest.fixture
def regions():
    """Make shared-memory objects (tritonclient's helper) and destroy them after the test."""
    made = []

    def make(name: str, byte_size: int):
        handle = shm.create_shared_memory_region(name, f"{KEY_PREFIX}-{name}", byte_size)
        made.append(handle)
        return handle

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def _values(count: int) -> np.ndarray:
    return np.random.default_rng(7).random((1, count), dtype=np.float32)


def _round_trip(client, module, regions, count: int) -> None:
    data = _values(count)
    size = data.nbytes
    shm.set_shared_memory_region(regions("in", size), [data])
    out_handle = regions("out", size)
    client.register_system_shared_memory("in", f"{KEY_PREFIX}-in", size)
    client.register_system_shared_memory("out", f"{KEY_PREFIX}-out", size)
    try:
        tensor = module.InferInput("INPUT0", [1, count], "FP32")
        tensor.set_shared_memory("in", size)
        wanted = module.InferRequestedOutput("OUTPUT0")
        wanted.set_shared_memory("out", size)
        result = client.infer("echo", [tensor], outputs=[wanted])
        output = result.get_output("OUTPUT0")
        params = output["parameters"] if isinstance(output, dict) else output.parameters
        region = params["shared_memory_region"]
        assert (region if isinstance(region, str) else region.string_param) == "out"
        got = shm.get_contents_as_numpy(out_handle, np.float32, [1, count])
        assert np.array_equal(got, data)
    finally:
        client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status(**({"as_json": True} if module is tgrpc else {})) in ([], {})


def test_64_mib_round_trip_over_rest(server, regions):
    client = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=60)
    _round_trip(client, thttp, regions, BIG)


def test_64_mib_round_trip_over_grpc(server, regions):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    _round_trip(client, tgrpc, regions, BIG)


def test_status_lists_registered_regions(server, regions):
    regions("a", 4096)
    client = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    client.register_system_shared_memory("a", f"{KEY_PREFIX}-a", 1024, offset=512)
    try:
        assert client.get_system_shared_memory_status() == [
            {"name": "a", "key": f"{KEY_PREFIX}-a", "offset": 512, "byte_size": 1024}]
        status = tgrpc.InferenceServerClient(server.grpc_url).get_system_shared_memory_status("a", as_json=True)
        assert status["regions"]["a"]["byte_size"] == "1024" and status["regions"]["a"]["offset"] == "512"
        assert "system_shared_memory" in client.get_server_metadata()["extensions"]
    finally:
        client.unregister_system_shared_memory("a")
    assert client.get_system_shared_memory_status() == []


def test_shared_memory_input_with_inline_output_and_the_reverse(server, regions):
    data = _values(256)
    shm.set_shared_memory_region(regions("in", data.nbytes + 64), [data], offset=64)
    out_handle = regions("out", data.nbytes)
    http = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    http.register_system_shared_memory("in", f"{KEY_PREFIX}-in", data.nbytes + 64)
    http.register_system_shared_memory("out", f"{KEY_PREFIX}-out", data.nbytes)
    try:
        tensor = thttp.InferInput("INPUT0", [1, 256], "FP32")
        tensor.set_shared_memory("in", data.nbytes, offset=64)
        assert np.array_equal(http.infer("echo", [tensor]).as_numpy("OUTPUT0"), data)  # answered inline

        grpc_client = tgrpc.InferenceServerClient(server.grpc_url)
        inline = tgrpc.InferInput("INPUT0", [1, 256], "FP32")
        inline.set_data_from_numpy(data)
        wanted = tgrpc.InferRequestedOutput("OUTPUT0")
        wanted.set_shared_memory("out", data.nbytes)
        grpc_client.infer("echo", [inline], outputs=[wanted])
        assert np.array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 256]), data)
    finally:
        http.unregister_system_shared_memory()


def _infer_doc(params: dict, outputs=None) -> dict:
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "parameters": params}]}
    if outputs is not None:
        doc["outputs"] = outputs
    return doc


def _error(server, path: str, doc) -> tuple:
    status, _, body = post_json(server.http_port, path, doc)
    return status, body["error"]


def test_a_streamed_request_reads_its_inputs_from_shared_memory(server, regions):
    data = _values(4)
    shm.set_shared_memory_region(regions("s", data.nbytes), [data])
    post_json(server.http_port, "/v2/systemsharedmemory/region/s/register", {"key": f"{KEY_PREFIX}-s", "byte_size": 16})
    try:
        doc = _infer_doc({"shared_memory_region": "s", "shared_memory_byte_size": 16})
        status, _, body = request(server.http_port, "POST", "/v2/models/echo/infer_stream", json.dumps(doc).encode())
        assert status == 200 and body.startswith(b"data: "), body
        event = json.loads(body[len(b"data: "):].strip())
        assert np.array_equal(np.float32(event["outputs"][0]["data"]), data[0])
    finally:
        request(server.http_port, "POST", "/v2/systemsharedmemory/unregister", b"")


def test_bad_registrations_are_refused_with_the_reason(server, regions):
    regions("small", 64)
    register = "/v2/systemsharedmemory/region/r/register"
    assert _error(server, register, {"key": "/no-such-object", "byte_size": 16}) == (
        400, "cannot open shared memory object '/no-such-object': No such file or directory")
    assert _error(server, register, {"key": "../../etc/passwd", "byte_size": 16}) == (
        400, "shared memory key '../../etc/passwd' must name one object in /dev/shm, like '/my_region' (as shm_open "
             "takes it): it holds a '/' other than a leading one")
    assert _error(server, register, {"key": f"{KEY_PREFIX}-small", "byte_size": 128}) == (
        400, f"region 'r': offset 0 + byte_size 128 is past the end of shared memory object '{KEY_PREFIX}-small' "
             "(64 bytes)")
    assert _error(server, register, {"key": f"{KEY_PREFIX}-small", "byte_size": -1}) == (
        400, "shared memory region 'r': byte_size must be a non-negative integer, got -1")
    assert _error(server, register, [1, 2]) == (
        400, 'register a region with a JSON object {"key": ..., "offset": ..., "byte_size": ...}')
    assert post_json(server.http_port, register, {"key": f"{KEY_PREFIX}-small", "byte_size": 64})[0] == 200
    try:
        assert _error(server, register, {"key": f"{KEY_PREFIX}-small", "byte_size": 64}) == (
            400, "a system shared memory region named 'r' is already registered")
    finally:
        request(server.http_port, "POST", "/v2/systemsharedmemory/unregister", b"")
    status, _, body = request(server.http_port, "GET", "/v2/systemsharedmemory/region/r/status")
    assert (status, body) == (404, b'{"error":"no system shared memory region named \'r\' is registered"}')


def test_bad_references_in_inference_requests(server, regions):
    regions("r", 64)
    post_json(server.http_port, "/v2/systemsharedmemory/region/r/register", {"key": f"{KEY_PREFIX}-r", "byte_size": 64})
    infer = "/v2/models/echo/infer"
    try:
        assert _error(server, infer, _infer_doc({"shared_memory_region": "ghost", "shared_memory_byte_size": 16})) == (
            400, "input 'INPUT0' names system shared memory region 'ghost', which is not registered")
        assert _error(server, infer, _infer_doc({"shared_memory_region": "r"})) == (
            400, "input 'INPUT0': shared_memory_region needs an integer shared_memory_byte_size, got None")
        assert _error(server, infer, _infer_doc({"shared_memory_region": "r", "shared_memory_byte_size": 12})) == (
            400, "input 'INPUT0': shared_memory_byte_size 12 does not match shape [1, 4] of FP32 (16 bytes)")
        assert _error(server, infer, _infer_doc({"shared_memory_region": "r", "shared_memory_byte_size": 16,
                                                 "shared_memory_offset": 56})) == (
            400, "input 'INPUT0': offset 56 + byte size 16 runs past the end of the 64-byte region")
        small_out = [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}]
        assert _error(server, infer, _infer_doc({"shared_memory_region": "r", "shared_memory_byte_size": 16},
                                                small_out)) == (
            400, "output 'OUTPUT0' needs 16 bytes but its region holds 8 (shared_memory_byte_size)")

        streamed = _infer_doc({"shared_memory_region": "r", "shared_memory_byte_size": 16},
                              [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r",
                                                                  "shared_memory_byte_size": 16}}])
        assert _error(server, "/v2/models/echo/infer_stream", streamed) == (
            400, "streamed responses cannot be written to shared memory: request the outputs without "
                 "shared_memory_region")

        stub = GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
        message = pb.ModelInferRequest(model_name="echo")
        tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
        tensor.parameters["shared_memory_region"].string_param = "ghost"
        tensor.parameters["shared_memory_byte_size"].int64_param = 16
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(message, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == \
            "input 'INPUT0' names system shared memory region 'ghost', which is not registered"
    finally:
        request(server.http_port, "POST", "/v2/systemsharedmemory/unregister", b"")
    assert post_json(server.http_port, infer, {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32",
                                                           "data": [1.5]}]})[2]["outputs"][0]["data"] == [1.5]


def test_off_unless_the_server_allows_it(zoo, regions):
    regions("r", 64)
    message = "system shared memory is off on this server; start it with --allow_client_shm true to use it"
    assert _error(zoo, "/v2/systemsharedmemory/region/r/register", {"key": f"{KEY_PREFIX}-r", "byte_size": 64}) == (
        403, message)
    assert _error(zoo, "/v2/models/echo/infer", _infer_doc({"shared_memory_region": "r",
                                                            "shared_memory_byte_size": 16})) == (403, message)
    with pytest.raises(InferenceServerException) as caught:
        tgrpc.InferenceServerClient(zoo.grpc_url).register_system_shared_memory("r", f"{KEY_PREFIX}-r", 64)
    assert "PERMISSION_DENIED" in str(caught.value.status()) and message in caught.value.message()


def test_regions_reach_every_worker(start_server, regions):
    server = start_server("tests/models/zoo.py", "--workers", "2", "--allow_client_shm", "true",
                          env={"ZOO_MODELS": "echo"})
    data = _values(4)
    shm.set_shared_memory_region(regions("w", data.nbytes), [data])
    post_json(server.http_port, "/v2/systemsharedmemory/region/w/register", {"key": f"{KEY_PREFIX}-w", "byte_size": 16})
    doc = _infer_doc({"shared_memory_region": "w", "shared_memory_byte_size": 16})
    answers = [post_json(server.http_port, "/v2/models/echo/infer", doc) for _ in range(20)]  # new connections
    assert {status for status, _, _ in answers} == {200}
    assert all(np.array_equal(np.float32(body["outputs"][0]["data"]), data[0]) for _, _, body in answers)
    request(server.http_port, "POST", "/v2/systemsharedmemory/region/w/unregister", b"")
    answers = [post_json(server.http_port, "/v2/models/echo/infer", doc) for _ in range(20)]
    assert {(status, body["error"]) for status, _, body in answers} == {
        (400, "input 'INPUT0' names system shared memory region 'w', which is not registered")}


def test_inputs_are_read_only_copies_of_the_region(regions):
    from kserve_sdk.protocol.infer_type import InferInput, InferRequest
    from kserve_sdk.triton.shared_memory import SharedMemoryRegistry

    data = _values(4)
    handle = regions("ro", data.nbytes)
    shm.set_shared_memory_region(handle, [data])
    registry = SharedMemoryRegistry(allowed=True)
    registry.register("ro", f"{KEY_PREFIX}-ro", 0, data.nbytes)
    tensor = InferInput("INPUT0", [1, 4], "FP32",
                        parameters={"shared_memory_region": "ro", "shared_memory_byte_size": data.nbytes})
    registry.read_inputs(InferRequest("echo", [tensor]))
    shm.set_shared_memory_region(handle, [data + 1])  # the client writes again: the model's input stays
    array = tensor.as_numpy()
    assert np.array_equal(array, data) and not array.flags.writeable  # the model cannot write back either
    registry.unregister()
