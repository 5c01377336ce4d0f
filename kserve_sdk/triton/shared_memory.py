"""Triton's system shared-memory extension: tensors that travel through POSIX shared memory, not the socket.

A client on the same host creates a shared-memory object (``/dev/shm/<key>``), registers a region of it
under a name, and then sends requests whose inputs say ``shared_memory_region`` / ``shared_memory_byte_size``
/ ``shared_memory_offset`` instead of carrying data; requested outputs with the same parameters are written
into a region rather than into the response. Inputs are read as numpy views on the mapping: no copy.

Mapping a client-chosen object lets a client read and write the server's shared memory, so it is off unless
the server is started with ``--allow_client_shm true`` (as Triton's ``--allow-client-shm``).
"""
import mmap
import os
from typing import Dict, List, Union

from ..errors import InvalidInput, ModelNotFound, SharedMemoryForbidden
from ..protocol.infer_type import InferOutput, InferRequest, InferResponse
from ..protocol.tensor import SHM_REGION as REGION
from ..protocol.tensor import expected_nbytes, in_shared_memory

BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
SHM_DIR = "/dev/shm"


class RegionNotFound(ModelNotFound):
    """A region name that is not registered (404 / NOT_FOUND)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no system shared memory region named '{self.name}' is registered"


class _Region:
    def __init__(self, key: str, offset: int, byte_size: int, mapping: mmap.mmap):
        self.key, self.offset, self.byte_size, self.mapping = key, offset, byte_size, mapping

    def window(self, offset: int, byte_size: int, what: str) -> memoryview:
        """The bytes ``[offset, offset + byte_size)`` of this region, as a writable view on the mapping."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise InvalidInput(f"{what}: offset {offset} + byte size {byte_size} runs past the end of the "
                               f"{self.byte_size}-byte region")
        start = self.offset + offset
        return memoryview(self.mapping)[start:start + byte_size]


class SharedMemoryRegistry:
    """The regions clients registered, each mapped into this process."""

    def __init__(self, allowed: bool = False):
        #: Whether clients may register regions at all (``--allow_client_shm``).
        self.allowed = allowed
        self._regions: Dict[str, _Region] = {}

    def _check_allowed(self) -> None:
        if not self.allowed:
            raise SharedMemoryForbidden()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the shared-memory object ``key`` under ``name``."""
        self._check_allowed()
        _check_register_args(name, key, offset, byte_size)
        if name in self._regions:
            raise InvalidInput(f"a system shared memory region named '{name}' is already registered")
        path = os.path.join(SHM_DIR, key.lstrip("/"))
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise InvalidInput(f"cannot open shared memory object '{key}': {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                raise InvalidInput(f"region '{name}': offset {offset} + byte_size {byte_size} is past the end of "
                                   f"shared memory object '{key}' ({size} bytes)")
            mapping = mmap.mmap(fd, offset + byte_size)
        finally:
            os.close(fd)
        self._regions[name] = _Region(key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """Forget the region ``name`` (every region when ``name`` is empty); unknown names are ignored."""
        self._check_allowed()
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                try:
                    region.mapping.close()
                except BufferError:  # a request still reads it: the mapping goes when its last view does
                    pass

    def status(self, name: str = "") -> List[Dict[str, Union[str, int]]]:
        """The registered regions (just ``name`` when given): name, key, offset, byte_size."""
        self._check_allowed()
        if name and name not in self._regions:
            raise RegionNotFound(name)
        names = [name] if name else sorted(self._regions)
        return [{"name": n, "key": self._regions[n].key, "offset": self._regions[n].offset,
                 "byte_size": self._regions[n].byte_size} for n in names]

    def read_inputs(self, request: InferRequest) -> None:
        """Point every input that names a region at its bytes there (a view, not a copy)."""
        for tensor in request.inputs:
            if in_shared_memory(tensor):
                # read-only, like a binary input in a request body: a model cannot write into the client's region
                tensor._raw_data = self._window(tensor.parameters, f"input '{tensor.name}'").toreadonly()
                expected = expected_nbytes(tensor.datatype, tensor.shape)
                if expected >= 0 and len(tensor._raw_data) != expected:
                    raise InvalidInput(f"input '{tensor.name}': {BYTE_SIZE} {len(tensor._raw_data)} does not match "
                                       f"shape {tensor.shape} of {tensor.datatype} ({expected} bytes)")

    def write_outputs(self, request: InferRequest, response: InferResponse) -> None:
        """Write each output the request wants in a region there; the response then names the region."""
        for wanted in request.request_outputs or ():
            if not in_shared_memory(wanted):
                continue
            params = wanted.parameters
            tensor = response.get_output_by_name(wanted.name)
            if tensor is None:
                raise InvalidInput(f"Unexpected inference output '{wanted.name}' for model '{response.model_name}'")
            data = tensor.raw_bytes()
            target = self._window(params, f"output '{wanted.name}'")
            if len(data) > len(target):
                raise InvalidInput(f"output '{wanted.name}' needs {len(data)} bytes but its region holds "
                                   f"{len(target)} ({BYTE_SIZE})")
            target[:len(data)] = data
            placed = {REGION: params[REGION], BYTE_SIZE: len(data)}
            if params.get(OFFSET):
                placed[OFFSET] = params[OFFSET]
            response.outputs[response.outputs.index(tensor)] = InferOutput(
                tensor.name, tensor.shape, tensor.datatype, parameters=placed)

    def _window(self, params: Dict, what: str) -> memoryview:
        self._check_allowed()
        name, size, offset = params.get(REGION), params.get(BYTE_SIZE), params.get(OFFSET, 0)
        if not isinstance(name, str):
            raise InvalidInput(f"{what}: {REGION} must be a string, got {name!r}")
        if type(size) is not int:
            raise InvalidInput(f"{what}: {REGION} needs an integer {BYTE_SIZE}, got {size!r}")
        if type(offset) is not int:
            raise InvalidInput(f"{what}: {OFFSET} must be an integer, got {offset!r}")
        region = self._regions.get(name)
        if region is None:
            raise InvalidInput(f"{what} names system shared memory region '{name}', which is not registered")
        return region.window(offset, size, what)


def uses_shared_memory(request: InferRequest) -> bool:
    """Whether an input or a requested output of ``request`` names a shared-memory region."""
    return any(map(in_shared_memory, request.inputs)) or any(map(in_shared_memory, request.request_outputs or ()))


def _check_register_args(name: str, key: str, offset: int, byte_size: int) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidInput("a shared memory region needs a name")
    if not isinstance(key, str) or not key.lstrip("/") or "/" in key.lstrip("/") or key.strip("/") in (".", ".."):
        raise InvalidInput(f"shared memory key must name an object in {SHM_DIR} (like '/my_region'), got {key!r}")
    for field, value in (("offset", offset), ("byte_size", byte_size)):
        if type(value) is not int or value < 0:
            raise InvalidInput(f"shared memory region '{name}': {field} must be a non-negative integer, got {value!r}")
    if byte_size == 0:
        raise InvalidInput(f"shared memory region '{name}': byte_size must be greater than 0")

