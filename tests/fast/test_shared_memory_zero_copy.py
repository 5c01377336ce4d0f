"""--shm_zero_copy in process: a region is mapped at registration, so what the model reads is a view of the
client's object (a write the client makes afterwards shows in it) and an output lands in the object without
a copy of the server's own; the copying mode reads a snapshot instead."""
import os
import uuid

import numpy as np
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.triton.shared_memory import SharedMemoryRegistry

SIZE = 8192


@pytest.fixture
def key():
    name = f"/kserve-sdk-fast-zc-{uuid.uuid4().hex[:8]}"
    path = "/dev/shm" + name
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, SIZE)
    os.close(fd)
    yield name
    os.unlink(path)


def _write(key: str, data: bytes, at: int) -> None:
    fd = os.open("/dev/shm" + key, os.O_RDWR)
    try:
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)


@pytest.mark.parametrize("zero_copy", [True, False])
def test_a_mapped_region_is_read_as_a_view_and_a_copied_one_as_a_snapshot(key, zero_copy):
    registry = SharedMemoryRegistry(allowed=True, zero_copy=zero_copy)
    registry.register("r", key, 4096, 4096)
    _write(key, b"before", 4096 + 16)
    seen = registry._regions["r"].read(16, 6, "input 'x'")
    _write(key, b"after!", 4096 + 16)
    assert bytes(seen) == (b"after!" if zero_copy else b"before")
    assert seen.readonly


def test_a_mapped_region_takes_an_output_at_its_offset(key):
    registry = SharedMemoryRegistry(allowed=True, zero_copy=True)
    registry.register("r", key, 100, 200)
    registry._regions["r"].write(8, np.arange(3, dtype=np.int32).data, "output 'y'")
    with open("/dev/shm" + key, "rb") as f:
        f.seek(108)
        assert np.frombuffer(f.read(12), np.int32).tolist() == [0, 1, 2]
    with pytest.raises(InvalidInput, match=r"output 'y': offset 196 \+ byte size 12 runs past the end of the "
                                           r"200-byte region"):
        registry._regions["r"].write(196, np.arange(3, dtype=np.int32).data, "output 'y'")


def test_unregistering_a_region_whose_view_a_model_still_holds_leaves_the_view_readable(key):
    registry = SharedMemoryRegistry(allowed=True, zero_copy=True)
    registry.register("r", key, 0, SIZE)
    _write(key, b"kept", 0)
    held = registry._regions["r"].read(0, 4, "input 'x'")
    registry.unregister("r")
    assert bytes(held) == b"kept"
