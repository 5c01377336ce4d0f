"""Triton's system shared-memory extension: tensors that travel through POSIX shared memory, not the socket.

A client on the same host creates a shared-memory object (``/dev/shm/<key>``), registers a region of it
under a name, and then sends requests whose inputs say ``shared_memory_region`` / ``shared_memory_byte_size``
/ ``shared_memory_offset`` instead of carrying data; requested outputs with the same parameters are written
into a region rather than into the response.

The object stays the client's: it may shrink, vanish or be replaced at any moment. So the server never maps
it (touching a mapping past a shrunk object's end kills the process with SIGBUS) and keeps no file open
between calls. Each use opens the key again the way ``shm_open`` does (one name, no symbolic link, a
regular file), checks that it is still the object registered and still holds the region, then copies
through the file descriptor: an input's bytes are read into memory of the server's own, which the model
gets; an output is written with ``pwrite``. A read that comes up short is an error, never a signal.

A client that may register regions can read and write any object in /dev/shm the server's user may open,
so it is off unless the server is started with ``--allow_client_shm true`` (as Triton's ``--allow-client-shm``);
``--max_shm_regions`` caps the regions one worker keeps.

``--shm_zero_copy true`` is for clients the operator trusts not to shrink their objects: each region is then
mapped once, at registration, as Triton maps it; inputs reach the model as views of the client's memory and
outputs are copied straight into it, with no system call and no copy of the server's own. A client that
shrinks its object then crashes the worker with SIGBUS (docs/security.md says when that is acceptable).
"""
import errno
import mmap
import os
import stat
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ..errors import InvalidInput, ModelNotFound, PayloadTooLarge, SharedMemoryForbidden
from ..protocol.infer_type import InferOutput, InferRequest, InferResponse
from ..protocol.tensor import SHM_REGION as REGION
from ..protocol.tensor import expected_nbytes, in_shared_memory

BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
SHM_DIR = "/dev/shm"
#: The longest name a file in SHM_DIR may have, in bytes (Linux's NAME_MAX).
NAME_MAX = 255
#: Regions one worker keeps registered unless told otherwise (``--max_shm_regions``; 0: no limit).
DEFAULT_MAX_REGIONS = 1024
#: How a key is opened: read-write, never through a symbolic link, not inherited by child processes, and
#: without waiting (a FIFO planted under a key must not block the worker; it is refused as not a file).
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: The smallest part of an input read on a thread of its own: tmpfs copies a large object page by page,
#: and reads of different parts of one object run side by side.
_READ_PART_BYTES = 4 << 20
#: The most parts one input is read in (the calling thread reads one of them).
_READ_PARTS = max(1, min(4, os.cpu_count() or 1))


class RegionNotFound(ModelNotFound):
    """A region name that is not registered (404 / NOT_FOUND)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no system shared memory region named '{self.name}' is registered"


def key_problem(key: Any) -> Optional[str]:
    """Why ``key`` does not name one object of /dev/shm the way ``shm_open`` takes a name, or None.

    A key is one file name with at most a leading "/" ("/my_region" or "my_region"): no other "/", not
    "." or "..", no NUL byte, not empty, at most 255 bytes once encoded."""
    if not isinstance(key, str):
        return "it is not a string"
    name = key[1:] if key.startswith("/") else key
    if not name:
        return "it names no object"
    if "\0" in name:
        return "it holds a NUL byte"
    if "/" in name:
        return "it holds a '/' other than a leading one"
    if name in (".", ".."):
        return f"'{name}' is a directory"
    try:
        encoded = os.fsencode(name)
    except UnicodeEncodeError:
        return "it is not valid text for a file name"
    if len(encoded) > NAME_MAX:
        return f"it is {len(encoded)} bytes long, more than the {NAME_MAX} a file name may have"
    return None


def check_key(key: Any) -> str:
    """The file name in /dev/shm that ``key`` names; InvalidInput (400) naming the key when it names none."""
    problem = key_problem(key)
    if problem is not None:
        raise InvalidInput(f"shared memory key {key!r} must name one object in {SHM_DIR}, like '/my_region' "
                           f"(as shm_open takes it): {problem}")
    return key[1:] if key.startswith("/") else key


def _path_of(key: str) -> str:
    return os.path.join(SHM_DIR, check_key(key))


def _open_object(key: str) -> Tuple[int, os.stat_result]:
    """A read-write descriptor on the object ``key`` names and its fstat, if it is a regular file reached
    without following a link; else InvalidInput naming the key and why not."""
    try:
        fd = os.open(_path_of(key), _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InvalidInput(f"shared memory object '{key}' is a symbolic link; a key must name the object "
                               "itself (links are not followed)") from None
        raise InvalidInput(f"cannot open shared memory object '{key}': {e.strerror}") from None
    try:
        info = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise InvalidInput(f"cannot open shared memory object '{key}': {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise InvalidInput(f"shared memory object '{key}' is not a regular file")
    return fd, info


class _Region:
    """A registered region: where it is, and which object it was registered on (device and inode)."""

    __slots__ = ("name", "key", "offset", "byte_size", "identity")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, identity: Tuple[int, int]):
        self.name, self.key, self.offset, self.byte_size, self.identity = name, key, offset, byte_size, identity

    def start_of(self, offset: int, byte_size: int, what: str) -> int:
        """Where the bytes ``[offset, offset + byte_size)`` of this region start in its object."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise InvalidInput(f"{what}: offset {offset} + byte size {byte_size} runs past the end of the "
                               f"{self.byte_size}-byte region")
        return self.offset + offset

    def open(self) -> int:
        """A descriptor on this region's object, once it is checked to be the object registered and to
        still hold the whole region; InvalidInput naming the region and what changed otherwise."""
        try:
            fd, info = _open_object(self.key)
        except InvalidInput as e:
            if not os.path.lexists(_path_of(self.key)):
                raise InvalidInput(f"region '{self.name}' cannot be used: its shared memory object '{self.key}' "
                                   "no longer exists (it was deleted after the region was registered); register "
                                   "the region again") from None
            raise InvalidInput(f"region '{self.name}' cannot be used: {e}") from None
        if (info.st_dev, info.st_ino) != self.identity:
            os.close(fd)
            raise InvalidInput(f"region '{self.name}' cannot be used: its shared memory object '{self.key}' was "
                               "replaced by another object after the region was registered; register the region "
                               "again")
        if info.st_size < self.offset + self.byte_size:
            os.close(fd)
            raise self.shrunk(info.st_size)
        return fd

    def shrunk(self, size: int, while_read: bool = False) -> InvalidInput:
        """The error for an object now ``size`` bytes long (that ended at byte ``size`` while it was read), too
        short for this region."""
        now = f"ended at byte {size} while it was read" if while_read else f"holds {size} bytes"
        return InvalidInput(f"region '{self.name}' is smaller than its registered size now: shared memory object "
                            f"'{self.key}' {now}, and the region needs {self.offset + self.byte_size} "
                            f"(offset {self.offset} + byte_size {self.byte_size}); register the region again")

    def read(self, offset: int, byte_size: int, what: str) -> memoryview:
        """A copy of the region's bytes ``[offset, offset + byte_size)``, read-only, in the server's memory."""
        start = self.start_of(offset, byte_size, what)
        try:
            buffer = np.empty(byte_size, np.uint8)
        except MemoryError:
            raise PayloadTooLarge(f"{what}: the {byte_size} bytes it names in region '{self.name}' do not fit in "
                                  "this server's memory") from None
        fd = self.open()
        try:
            done = _read_into(fd, buffer.data, start)
        except OSError as e:
            raise self.failed("reading", e) from None
        finally:
            os.close(fd)
        if done < byte_size:  # the object shrank after it was checked
            raise self.shrunk(start + done, while_read=True)
        return buffer.data.toreadonly()

    def write(self, offset: int, data: Union[bytes, memoryview], what: str) -> None:
        """Write ``data`` at ``offset`` of the region (the caller checked it fits)."""
        data = memoryview(data).cast("B")
        start = self.start_of(offset, len(data), what)
        fd = self.open()
        try:
            _write_all(fd, data, start)
        except OSError as e:  # e.g. no space left: the client's object has holes and /dev/shm is full
            raise self.failed("writing", e) from None
        finally:
            os.close(fd)

    def failed(self, doing: str, error: OSError) -> InvalidInput:
        return InvalidInput(f"region '{self.name}' cannot be used: {doing} shared memory object '{self.key}' "
                            f"failed: {error.strerror}")


class _MappedRegion(_Region):
    """A region mapped into the server's memory at registration (``--shm_zero_copy``): reads are views of it,
    writes copies into it. The mapping is released when the last view of it is."""

    __slots__ = ("view",)

    def __init__(self, name: str, key: str, offset: int, byte_size: int, identity: Tuple[int, int], fd: int):
        super().__init__(name, key, offset, byte_size, identity)
        try:
            mapping = mmap.mmap(fd, offset + byte_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            raise InvalidInput(f"region '{name}': shared memory object '{key}' cannot be mapped: {e}") from None
        self.view = memoryview(mapping)[offset:]

    def read(self, offset: int, byte_size: int, what: str) -> memoryview:
        start = self.start_of(offset, byte_size, what) - self.offset
        return self.view[start:start + byte_size].toreadonly()

    def write(self, offset: int, data: Union[bytes, memoryview], what: str) -> None:
        data = memoryview(data).cast("B")
        start = self.start_of(offset, len(data), what) - self.offset
        self.view[start:start + len(data)] = data


class SharedMemoryRegistry:
    """The regions clients registered: names of parts of shared-memory objects, no open files."""

    def __init__(self, allowed: bool = False, max_regions: int = DEFAULT_MAX_REGIONS, zero_copy: bool = False):
        #: Whether clients may register regions at all (``--allow_client_shm``).
        self.allowed = allowed
        #: The most regions registered at once (``--max_shm_regions``; 0: no limit).
        self.max_regions = max_regions
        #: Whether regions are mapped at registration rather than copied through at each use (``--shm_zero_copy``).
        self.zero_copy = zero_copy
        self._regions: Dict[str, _Region] = {}

    def _check_allowed(self) -> None:
        if not self.allowed:
            raise SharedMemoryForbidden()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes at ``offset`` of the shared-memory object ``key`` under ``name``."""
        self._check_allowed()
        _check_register_args(name, key, offset, byte_size)
        if name in self._regions:
            raise InvalidInput(f"a system shared memory region named '{name}' is already registered")
        if self.max_regions and len(self._regions) >= self.max_regions:
            raise InvalidInput(f"system shared memory region '{name}' is not registered: {len(self._regions)} "
                               f"regions are, the most this server keeps (--max_shm_regions {self.max_regions}); "
                               "unregister some first")
        fd, info = _open_object(key)
        try:
            if offset + byte_size > info.st_size:
                raise InvalidInput(f"region '{name}': offset {offset} + byte_size {byte_size} is past the end of "
                                   f"shared memory object '{key}' ({info.st_size} bytes)")
            identity = (info.st_dev, info.st_ino)
            self._regions[name] = _MappedRegion(name, key, offset, byte_size, identity, fd) if self.zero_copy \
                else _Region(name, key, offset, byte_size, identity)
        finally:
            os.close(fd)

    def unregister(self, name: str = "") -> None:
        """Forget the region ``name`` (every region when ``name`` is empty); unknown names are ignored."""
        self._check_allowed()
        if name:
            self._regions.pop(name, None)
        else:
            self._regions.clear()

    def status(self, name: str = "") -> List[Dict[str, Union[str, int]]]:
        """The registered regions (just ``name`` when given): name, key, offset, byte_size."""
        self._check_allowed()
        if name and name not in self._regions:
            raise RegionNotFound(name)
        names = [name] if name else sorted(self._regions)
        return [{"name": n, "key": self._regions[n].key, "offset": self._regions[n].offset,
                 "byte_size": self._regions[n].byte_size} for n in names]

    def read_inputs(self, request: InferRequest) -> None:
        """Give every input that names a region a copy of its bytes there."""
        for tensor in request.inputs:
            if in_shared_memory(tensor):
                what = f"input '{tensor.name}'"
                region, offset, byte_size = self._place(tensor.parameters or {}, what)
                expected = expected_nbytes(tensor.datatype, tensor.shape)
                if expected >= 0 and byte_size != expected:
                    raise InvalidInput(f"input '{tensor.name}': {BYTE_SIZE} {byte_size} does not match "
                                       f"shape {tensor.shape} of {tensor.datatype} ({expected} bytes)")
                # read-only, like a binary input in a request body
                tensor._raw_data = region.read(offset, byte_size, what)

    def write_outputs(self, request: InferRequest, response: InferResponse) -> None:
        """Write each output the request wants in a region there; the response then names the region."""
        for wanted in request.request_outputs or ():
            if not in_shared_memory(wanted):
                continue
            params = wanted.parameters or {}
            tensor = response.get_output_by_name(wanted.name)
            if tensor is None:
                raise InvalidInput(f"Unexpected inference output '{wanted.name}' for model '{response.model_name}'")
            data = tensor.raw_bytes()
            what = f"output '{wanted.name}'"
            region, offset, byte_size = self._place(params, what)
            if len(data) > byte_size:
                raise InvalidInput(f"output '{wanted.name}' needs {len(data)} bytes but its region holds "
                                   f"{byte_size} ({BYTE_SIZE})")
            region.write(offset, data, what)
            placed = {REGION: params[REGION], BYTE_SIZE: len(data)}
            if params.get(OFFSET):
                placed[OFFSET] = params[OFFSET]
            response.outputs[response.outputs.index(tensor)] = InferOutput(
                tensor.name, tensor.shape, tensor.datatype, parameters=placed)

    def _place(self, params: Dict, what: str) -> Tuple[_Region, int, int]:
        """The region a tensor's parameters name, with their offset and byte size (checked to be integers)."""
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
        region.start_of(offset, size, what)
        return region, offset, size


def uses_shared_memory(request: InferRequest) -> bool:
    """Whether an input or a requested output of ``request`` names a shared-memory region."""
    return any(map(in_shared_memory, request.inputs)) or any(map(in_shared_memory, request.request_outputs or ()))


def _check_register_args(name: str, key: str, offset: int, byte_size: int) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidInput("a shared memory region needs a name")
    check_key(key)
    for field, value in (("offset", offset), ("byte_size", byte_size)):
        if type(value) is not int or value < 0:
            raise InvalidInput(f"shared memory region '{name}': {field} must be a non-negative integer, got {value!r}")
    if byte_size == 0:
        raise InvalidInput(f"shared memory region '{name}': byte_size must be greater than 0")


# --- copies through the file descriptor -------------------------------------------------------------------------
def _read_all(fd: int, target: memoryview, position: int) -> int:
    """Read into ``target`` from ``position`` until it is full or the object ends; the bytes read."""
    done = 0
    while done < len(target):
        got = os.preadv(fd, [target[done:]], position + done)
        if got == 0:
            break
        done += got
    return done


def _write_all(fd: int, data: memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` (a file may take a large write in several)."""
    done = 0
    while done < len(data):
        done += os.pwritev(fd, [data[done:]], position + done)


def _read_into(fd: int, target: memoryview, position: int) -> int:
    """``_read_all``, a large target in parts read side by side; the bytes read before the first short part."""
    parts = min(_READ_PARTS, len(target) // _READ_PART_BYTES)
    if parts < 2:
        return _read_all(fd, target, position)
    step = -(-len(target) // parts)
    pieces = [target[start:start + step] for start in range(0, len(target), step)]
    others = [_readers().submit(_read_all, fd, piece, position + step * (i + 1)) for i, piece in enumerate(pieces[1:])]
    try:
        counts = [_read_all(fd, pieces[0], position)]
    finally:
        wait(others)  # every part is done with the descriptor before the caller closes it
    counts += [each.result() for each in others]
    done = 0
    for piece, count in zip(pieces, counts, strict=True):
        done += count
        if count < len(piece):
            break
    return done


_pool: Optional[Tuple[int, ThreadPoolExecutor]] = None


def _readers() -> ThreadPoolExecutor:
    """The threads that read parts of large inputs, made in this process (a worker forked after the parent
    made some would inherit a pool without its threads)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(_READ_PARTS - 1, thread_name_prefix="kserve-shm-read"))
    return _pool[1]
