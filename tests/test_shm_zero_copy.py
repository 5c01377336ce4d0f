"""System shared memory with --shm_zero_copy true (docs/security.md): each region is mapped once, when it is
registered, as Triton maps it. Tensors round-trip over REST and gRPC with one or two workers; the region stays
the object that was registered even after the client puts another object under its key (the copying mode
refuses that call instead); and the flag alone opens nothing: without --allow_client_shm the routes stay 403."""
import os
from typing import List

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import post_json

PREFIX = f"kserve-sdk-zero-copy-{os.getpid()}"
SIZE = 4096
DATA = np.arange(4, dtype=np.float32).reshape(1, 4) + 0.5
INFER = "/v2/models/echo/infer"


def _path(key: str) -> str:
    return os.path.join("/dev/shm", key.lstrip("/"))


@pytest.fixture
def objects():
    """``make(name, data)``: a fresh /dev/shm object of SIZE bytes starting with ``data``; removed after the test."""
    made: List[str] = []

    def make(name: str, data: bytes = b"") -> str:
        key = f"/{PREFIX}-{name}"
        made.append(key)
        if os.path.lexists(_path(key)):
            os.unlink(_path(key))
        fd = os.open(_path(key), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
        return key

    yield make
    for key in made:
        if os.path.lexists(_path(key)):
            os.unlink(_path(key))


def _read(key: str, size: int) -> bytes:
    with open(_path(key), "rb") as f:
        return f.read(size)


@pytest.fixture(scope="module", params=[1, 2], ids=["workers1", "workers2"])
def server(request, start_server):
    return start_server("tests/models/zoo.py", "--workers", str(request.param), "--allow_client_shm", "true",
                        "--shm_zero_copy", "true", env={"ZOO_MODELS": "echo"})


def _register(server, name: str, key: str) -> None:
    status, _, body = post_json(server.http_port, f"/v2/systemsharedmemory/region/{name}/register",
                                {"key": key, "offset": 0, "byte_size": SIZE})
    assert status == 200, body


def _unregister(server) -> None:
    assert post_json(server.http_port, "/v2/systemsharedmemory/unregister", {})[0] == 200


def _shm_call(region_in: str, region_out: str) -> dict:
    return {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "parameters": {"shared_memory_region": region_in, "shared_memory_byte_size": 16}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": region_out,
                                                           "shared_memory_byte_size": 16}}]}


def test_a_tensor_round_trips_through_mapped_regions_over_rest(server, objects):
    key_in, key_out = objects("rest-in", DATA.tobytes()), objects("rest-out")
    _register(server, "in", key_in)
    _register(server, "out", key_out)
    try:
        for step in range(4):  # every worker answers some, each from its own mapping
            data = DATA + step
            with open(_path(key_in), "r+b") as f:
                f.write(data.tobytes())
            status, _, body = post_json(server.http_port, INFER, _shm_call("in", "out"))
            assert status == 200, body
            assert body["outputs"][0]["parameters"] == {"shared_memory_region": "out", "shared_memory_byte_size": 16}
            assert np.frombuffer(_read(key_out, 16), np.float32).tolist() == data.ravel().tolist()
    finally:
        _unregister(server)


def test_a_tensor_round_trips_through_mapped_regions_over_grpc(server, objects):
    key_in, key_out = objects("grpc-in", DATA.tobytes()), objects("grpc-out")
    client = tgrpc.InferenceServerClient(server.grpc_url)
    try:
        client.register_system_shared_memory("g-in", key_in, SIZE)
        client.register_system_shared_memory("g-out", key_out, SIZE)
        tensor = tgrpc.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_shared_memory("g-in", 16)
        wanted = tgrpc.InferRequestedOutput("OUTPUT0")
        wanted.set_shared_memory("g-out", 16)
        result = client.infer("echo", [tensor], outputs=[wanted])
        assert result.get_output("OUTPUT0").parameters["shared_memory_region"].string_param == "g-out"
        assert np.frombuffer(_read(key_out, 16), np.float32).tolist() == DATA.ravel().tolist()
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_a_mapped_region_stays_the_object_registered_when_its_key_is_replaced(server, objects):
    key_in, key_out = objects("kept-in", DATA.tobytes()), objects("kept-out")
    _register(server, "in", key_in)
    _register(server, "out", key_out)
    try:
        objects("kept-in", (DATA * 100).tobytes())  # another object under the same key
        status, _, body = post_json(server.http_port, INFER, _shm_call("in", "out"))
        assert status == 200, body  # the copying mode answers 400 "... was replaced by another object ..."
        assert np.frombuffer(_read(key_out, 16), np.float32).tolist() == DATA.ravel().tolist()
    finally:
        _unregister(server)


def test_the_flag_alone_lets_no_client_register(start_server):
    server = start_server("tests/models/zoo.py", "--shm_zero_copy", "true", env={"ZOO_MODELS": "echo"})
    status, _, body = post_json(server.http_port, "/v2/systemsharedmemory/region/r/register",
                                {"key": "/x", "offset": 0, "byte_size": 16})
    assert status == 403
    assert body == {"error": "system shared memory is off on this server; start it with --allow_client_shm true "
                             "to use it"}
