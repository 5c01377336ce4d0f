"""Prometheus metric values kept in per-process memory-mapped files, one store per update.

Reaches into prometheus-client: it replaces ``prometheus_client.values.ValueClass`` (the module global
every metric reads when it makes a value), and writes the files of its multi-process mode in their
private layout (``mmap_dict``) under their private keys (``mmap_key``), for its
``MultiProcessCollector`` to read.

Why: prometheus-client's multi-process mode keeps every value in a file ``<kind>_<pid>.db`` of the
metrics directory, which a scrape of any worker reads. Its own value class takes a lock, asks for the
process id, looks the key up and packs two doubles on every update, and a request makes about ten
updates. :class:`SlotValue` writes the same files in the same layout, but each value keeps a view of
its own 16 bytes of the mapping (value, timestamp), found once when the value is made, so an update is
one addition under a lock. After a fork, the child's values move to files of its own pid. (Together
with :mod:`.prometheus_writers`: part of what metrics and statistics cost per request; the figures are in
docs/performance.md.)

Plain path (``KSERVE_SDK_INTERNALS=off``): :func:`install` does nothing and prometheus-client's own
``MultiProcessValue`` keeps the files.
"""
import hashlib
import json
import mmap
import os
import struct
import threading
import weakref
from typing import Dict, List, Optional

from . import ENABLED

_INITIAL_SIZE = 1 << 16
#: How much a file grows between two releases of its pages (:meth:`_ValueFile.release_pages`).
RELEASE_BYTES = 1 << 20
_INT = struct.Struct("i")
_lock = threading.Lock()  # one for all values: updates are a few instructions long


def _directory() -> str:
    return os.environ["PROMETHEUS_MULTIPROC_DIR"]


class _ValueFile:
    """One ``<kind>_<pid>.db``: a 4-byte count of the bytes used, 4 bytes of padding, then one entry per
    value: the key's length (4 bytes), the UTF-8 key padded with spaces to a multiple of 8 (counting the
    length), the value and a timestamp (two doubles). This is the layout prometheus-client reads."""

    def __init__(self, path: str):
        self._file = open(path, "a+b")
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            size = _INITIAL_SIZE
            self._file.truncate(size)
        self._size = size
        # A larger file gets a new, larger mapping; the old ones stay open because values keep views of
        # them, and every mapping of the file shows the same bytes.
        self._maps: List[mmap.mmap] = [mmap.mmap(self._file.fileno(), size)]
        # key digest -> where its doubles are; kept for every key ever written, so a value made again (a
        # repository model loaded again after its eviction) continues from its count
        self._positions: Dict[int, int] = {}
        used = _INT.unpack_from(self._maps[-1], 0)[0]
        if used == 0:
            used = 8
            self._maps[-1][0:4] = _INT.pack(used)
        else:
            self._read_positions(used)
        self._used = used
        self._released = used  # how far the file was used when its pages were last released

    def release_pages(self) -> None:
        """Drop this process's mappings of the file's pages (a value written later maps its page again): the
        values of series no longer used (a model repository's evicted models) stop counting in its memory.
        Done once the file has grown by RELEASE_BYTES since the last time, so live values seldom fault."""
        if self._used - self._released >= RELEASE_BYTES and hasattr(mmap, "MADV_DONTNEED"):
            for data in self._maps:
                data.madvise(mmap.MADV_DONTNEED)  # a shared file mapping: the bytes stay in the file
            self._released = self._used

    def _read_positions(self, used: int) -> None:
        data, pos = self._maps[-1], 8
        while pos < used:
            length = _INT.unpack_from(data, pos)[0]
            key = bytes(data[pos + 4:pos + 4 + length]).decode("utf-8")
            pos += 4 + length + (8 - (length + 4) % 8)
            self._positions[_digest(key)] = pos
            pos += 16

    def slot(self, key: str) -> memoryview:
        """The (value, timestamp) doubles of ``key`` as a writable view; the entry is added when new."""
        digest = _digest(key)
        pos = self._positions.get(digest)
        if pos is None:
            pos = self._positions[digest] = self._add(key)
        return memoryview(self._maps[-1])[pos:pos + 16].cast("d")

    def _add(self, key: str) -> int:
        encoded = key.encode("utf-8")
        padded = encoded + b" " * (8 - (len(encoded) + 4) % 8)
        entry = _INT.pack(len(encoded)) + padded + bytes(16)
        while self._used + len(entry) > self._size:
            self._size *= 2
            self._file.truncate(self._size)
            self._maps.append(mmap.mmap(self._file.fileno(), self._size))
        data = self._maps[-1]
        data[self._used:self._used + len(entry)] = entry
        self._used += len(entry)
        data[0:4] = _INT.pack(self._used)  # after the entry: a reader never sees a half-written one
        return self._used - 16


def _digest(key: str) -> int:
    """A key's 64-bit digest: what the positions are kept by (a key itself takes a few hundred bytes, and a
    file holds every key ever written in this process)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


_files: Dict[str, _ValueFile] = {}
# The values alive, to move to a forked child's files; a metric child removed (metrics.forget_model) lets
# its values go.
_values: "weakref.WeakSet[SlotValue]" = weakref.WeakSet()


def _file_of(kind: str) -> _ValueFile:
    file = _files.get(kind)
    if file is None:
        file = _files[kind] = _ValueFile(os.path.join(_directory(), f"{kind}_{os.getpid()}.db"))
    return file


class SlotValue:
    """A metric value for prometheus-client (its ``values.ValueClass``) in multi-process mode."""

    _multiprocess = True

    def __init__(self, typ: str, metric_name: str, name: str, labelnames, labelvalues, help_text: str,
                 multiprocess_mode: str = "", **kwargs):
        self._kind = f"gauge_{multiprocess_mode}" if typ == "gauge" else typ
        # the key prometheus-client writes and reads: labels in a fixed order
        labels = dict(zip(labelnames, labelvalues, strict=True))
        self._key = json.dumps([metric_name, name, labels, help_text], sort_keys=True)
        with _lock:
            self._slot = _file_of(self._kind).slot(self._key)
            _values.add(self)

    def inc(self, amount: float) -> None:
        """Add ``amount``."""
        with _lock:
            self._slot[0] += amount

    def set(self, value: float, timestamp: Optional[float] = None) -> None:
        """Set the value (and its timestamp)."""
        with _lock:
            self._slot[0] = value
            self._slot[1] = timestamp or 0.0

    def get(self) -> float:
        """The current value."""
        return self._slot[0]

    def set_exemplar(self, exemplar) -> None:
        """Exemplars are not kept in multi-process mode (as in prometheus-client)."""

    def get_exemplar(self) -> None:
        """Exemplars are not kept in multi-process mode."""
        return None


def release_pages() -> None:
    """Release the pages of this process's metrics files that have grown by RELEASE_BYTES since their last
    release (see :meth:`_ValueFile.release_pages`)."""
    with _lock:
        for file in _files.values():
            file.release_pages()


def _move_to_own_files() -> None:
    """In a forked child: leave the parent's files (their counts stay the parent's) for this pid's."""
    global _lock
    _lock = threading.Lock()
    _files.clear()
    for value in list(_values):
        value._slot = _file_of(value._kind).slot(value._key)


os.register_at_fork(after_in_child=_move_to_own_files)


def install() -> bool:
    """Make :class:`SlotValue` prometheus-client's value class; False (nothing done) with the tricks off.

    Call it before any metric exists: values of two classes would keep separate tables of the same files.
    """
    if not ENABLED:
        return False
    from prometheus_client import values

    values.ValueClass = SlotValue
    return True
