"""Triton's CUDA shared-memory extension, answered by a server without GPUs.

Clients written for Triton clean up both kinds of shared memory before they start (tritonclient's
``unregister_cuda_shared_memory()`` comes first in its system shared-memory examples), so the endpoints
answer as a Triton built without GPU support does: no region is ever registered, so the status is empty and
unregistering (every region, or one by name) succeeds; registering a region is refused, and the client is
pointed at system shared memory, which works on this server.

The endpoints follow ``--allow_client_shm`` as the system shared-memory ones do (403 while it is off).
"""
from http import HTTPStatus
from typing import Dict, List, NoReturn, Union

from ..errors import InvalidInput, SharedMemoryForbidden


class CudaRegionNotFound(LookupError):
    """The status of a named CUDA region was asked for: none is ever registered (404 / NOT_FOUND)."""

    http_status = HTTPStatus.NOT_FOUND
    grpc_code = "NOT_FOUND"

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return (f"Unable to find cuda shared memory region: '{self.name}': no CUDA shared memory region is "
                "registered on this server, which does not support CUDA shared memory")


class CudaSharedMemoryUnsupported(InvalidInput):
    """A client tried to register a CUDA region (400 / INVALID_ARGUMENT, as Triton without GPUs answers)."""

    def __init__(self, name: str):
        super().__init__(
            f"CUDA shared memory is not supported on this server: failed to register CUDA shared memory region: "
            f"'{name}', GPUs not supported; pass tensors in system shared memory (/v2/systemsharedmemory) or in "
            "the request instead")


def _check_allowed(allowed: bool) -> None:
    if not allowed:
        raise SharedMemoryForbidden()


def status(allowed: bool, name: str = "") -> List[Dict[str, Union[str, int]]]:
    """The registered CUDA regions (``name``: only that one): there are none, so a named one is not found."""
    _check_allowed(allowed)
    if name:
        raise CudaRegionNotFound(name)
    return []


def unregister(allowed: bool, name: str = "") -> None:
    """Forget CUDA region ``name`` (every one when empty): there are none, so this always succeeds."""
    _check_allowed(allowed)


def register(allowed: bool, name: str) -> NoReturn:
    """Register a CUDA region: always refused, this server has no GPU to map it on."""
    _check_allowed(allowed)
    raise CudaSharedMemoryUnsupported(name)
