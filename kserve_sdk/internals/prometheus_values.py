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

prometheus-client never removes a series from its files. Here the series of a model no longer served go
(:func:`let_go`, for a model repository's evicted models): their values read 0 at once, and once a file holds
as many bytes of such series as of live ones, it is rewritten without them (:meth:`_ValueFile.compact`), so a
process that serves ever new model names keeps files, an index and scrapes the size of what it serves now. A
series made again starts from 0 (Prometheus takes the drop as a counter reset). The counters, histograms and
summaries of models are spread over :data:`SHARDS` files per kind (``<kind>_<shard>_<pid>.db``, which
prometheus-client reads as its own: it takes the kind from the name's first part; server/workers.py folds a
dead worker's shards too) so that one compaction moves few values. A new file, like a compacted one, is written
whole under another name and renamed into place: a scrape never reads a half-written file.

Plain path (``KSERVE_SDK_INTERNALS=off``): :func:`install` does nothing and prometheus-client's own
``MultiProcessValue`` keeps the files, with every series ever written.
"""
import hashlib
import json
import mmap
import os
import struct
import threading
import weakref
import zlib
from typing import Dict, Iterable, List, Optional, Set, Tuple

from . import ENABLED

_INITIAL_SIZE = 1 << 16
#: The least a file's entries of series let go must take before it is compacted (else: as much as those in use).
_LEAST_DEAD = 1 << 12
#: The files a kind of values (counter, histogram, summary) is spread over by their ``model_name`` label, so a
#: compaction rewrites a sixteenth of a server's model series and pauses its loop for a sixteenth as long.
#: Gauges stay in one file: prometheus-client reads a gauge file's pid from its name.
SHARDS = 16
_INT = struct.Struct("i")
_lock = threading.Lock()  # one for all values: updates are a few instructions long


def _directory() -> str:
    return os.environ["PROMETHEUS_MULTIPROC_DIR"]


def entry_size(encoded_length: int) -> int:
    """Bytes of an entry whose key is ``encoded_length`` bytes long: length, padded key, two doubles."""
    return 4 + encoded_length + (8 - (encoded_length + 4) % 8) + 16


def _new_header(used: int) -> bytes:
    """A file's first 8 bytes: the bytes used, and a new random generation in the padding."""
    return _INT.pack(used) + os.urandom(4)


def read_header(data) -> "tuple[int, bytes]":
    """The bytes used and the generation in a file's first 8 bytes."""
    return _INT.unpack_from(data, 0)[0], bytes(data[4:8])


class _ValueFile:
    """One ``<kind>_<pid>.db``: a 4-byte count of the bytes used, 4 bytes of padding, then one entry per
    value: the key's length (4 bytes), the UTF-8 key padded with spaces to a multiple of 8 (counting the
    length), the value and a timestamp (two doubles). This is the layout prometheus-client reads. The padding
    holds a random generation, new whenever the file is made or compacted, which prometheus-client ignores and
    :mod:`.prometheus_scrape` uses to tell a file from the one it replaced."""

    def __init__(self, kind: str, shard: int, path: str):
        self.kind, self.shard, self._path = kind, shard, path
        if not os.path.exists(path):
            _create(path)
        self._file = open(path, "r+b")
        self._size = max(os.fstat(self._file.fileno()).st_size, _INITIAL_SIZE)
        self._file.truncate(self._size)
        # A larger file gets a new, larger mapping; the old ones stay open because values keep views of
        # them, and every mapping of the file shows the same bytes.
        self._maps: List[mmap.mmap] = []
        self._doubles = self._map(self._file)
        #: The values whose entries are in this file, and the objects holding views of their slots
        #: (prometheus_writers' writers): pointed at a new mapping when the file is compacted.
        self.values: weakref.WeakSet[SlotValue] = weakref.WeakSet()
        self.holders: weakref.WeakSet = weakref.WeakSet()
        # key digest -> where its entry starts, for the series in use (a series let go leaves it)
        self._starts: Dict[int, int] = {}
        self._dead = 0  # bytes of the entries of series let go, which the next compaction drops
        used = _INT.unpack_from(self._maps[-1], 0)[0]
        if used == 0:
            used = 8
            self._maps[-1][0:4] = _INT.pack(used)
        else:
            self._read_starts(used)
        self._used = used

    def _map(self, file) -> memoryview:
        """Map the whole file; the mapping as doubles, which every value's view is cut from (entries are
        aligned to 8 bytes)."""
        self._maps.append(mmap.mmap(file.fileno(), self._size))
        return memoryview(self._maps[-1]).cast("d")

    def _read_starts(self, used: int) -> None:
        start = 8
        while start < used:
            key = key_at(self._maps[-1], start)
            self._starts[_digest(key)] = start
            start += entry_size(len(key))

    def slot(self, key: str) -> "tuple[int, memoryview]":
        """Where the entry of ``key`` starts, and a writable view of its (value, timestamp) doubles; the
        entry is added (at 0) when the key has none in use."""
        encoded = key.encode("utf-8")
        digest = _digest(encoded)
        start = self._starts.get(digest)
        if start is None:
            start = self._starts[digest] = self._add(encoded)
        return start, self._view(start + entry_size(len(encoded)) - 16)

    def _view(self, pos: int) -> memoryview:
        return self._doubles[pos >> 3:(pos >> 3) + 2]

    def _add(self, key: bytes) -> int:
        entry = _INT.pack(len(key)) + key + b" " * (8 - (len(key) + 4) % 8) + bytes(16)
        while self._used + len(entry) > self._size:
            self._size *= 2
            self._file.truncate(self._size)
            self._doubles = self._map(self._file)
        data, start = self._maps[-1], self._used
        data[start:start + len(entry)] = entry
        self._used += len(entry)
        data[0:4] = _INT.pack(self._used)  # after the entry: a reader never sees a half-written one
        return start

    def drop(self, start: int) -> None:
        """The series whose entry is at ``start`` is no longer in use: it reads 0 until the file is compacted,
        and a value made again for its key gets a new entry."""
        key = key_at(self._maps[-1], start)
        digest = _digest(key)
        if self._starts.get(digest) == start:
            del self._starts[digest]
            end = start + entry_size(len(key))
            self._maps[-1][end - 16:end] = _ZEROS
            self._dead += end - start

    def wasteful(self) -> bool:
        """Whether the entries of series let go take as many bytes as those in use (and at least
        ``_LEAST_DEAD``): rewriting the file then costs as much as the entries written since the last time."""
        return self._dead >= max(_LEAST_DEAD, self._used - 8 - self._dead)

    def compact(self) -> None:
        """Rewrite the file with the entries in use only (their values as they are now), under a temporary
        name renamed over the old one (a scrape reads either file whole), and point this file's values at the
        new mapping. With ``_lock`` held, on the thread that updates through holders (the event loop): no
        update is lost between the copy and the new views."""
        old = self._maps[-1]
        starts, runs, used = _plan(old, sorted(self._starts.values()))
        self._size = _INITIAL_SIZE
        while self._size < 2 * used:
            self._size *= 2
        temporary = self._path + ".compacting"  # not *.db: scrapes do not read it
        new_file = open(temporary, "w+b")
        new_file.truncate(self._size)
        self._maps = []
        self._doubles = self._map(new_file)
        self._maps[-1][8:used] = b"".join(old[begin:end] for begin, end in runs)
        self._maps[-1][0:8] = _new_header(used)
        os.replace(temporary, self._path)
        self._file.close()  # the old mappings stay valid while views of them live
        self._file, self._used, self._dead = new_file, used, 0
        self._starts = {digest: starts[start][0] for digest, start in self._starts.items()}
        doubles = self._doubles
        for value in list(self.values):
            place = starts.get(value._start)  # None: let go (by it, or by another value of its key)
            if place is None:
                value._start = -1
            else:
                value._start, value._slot = place[0], doubles[place[1]:place[1] + 2]
        for holder in list(self.holders):
            holder.repoint()


def _plan(data, starts: List[int]) -> "tuple[Dict[int, tuple[int, int]], List[List[int]], int]":
    """Where the entries at ``starts`` (ascending) of a file's mapping go when written one after another from
    byte 8: old start -> (new start, index of its first double); the runs of adjacent entries, copied at once
    ([begin, end]); and the bytes the new file uses."""
    placed: Dict[int, tuple[int, int]] = {}
    runs: List[List[int]] = []
    used = 8
    for start in starts:
        size = entry_size(_INT.unpack_from(data, start)[0])
        if runs and runs[-1][1] == start:
            runs[-1][1] = start + size
        else:
            runs.append([start, start + size])
        placed[start] = (used, (used + size - 16) >> 3)
        used += size
    return placed, runs, used


def _create(path: str) -> None:
    """A new, empty file at ``path``, made whole under a temporary name first: a scrape never reads it empty."""
    temporary = path + ".new"  # not *.db: scrapes do not read it
    with open(temporary, "w+b") as file:
        file.write(_new_header(8))  # the header alone
        file.truncate(_INITIAL_SIZE)
    os.replace(temporary, path)


def key_at(data, start: int) -> bytes:
    """The UTF-8 key of the entry at ``start`` of a mapping."""
    length = _INT.unpack_from(data, start)[0]
    return bytes(data[start + 4:start + 4 + length])


_ZEROS = bytes(16)


def _digest(key: bytes) -> int:
    """A UTF-8 key's 64-bit digest: what the entries are found by (a key itself takes a few hundred bytes)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


_files: Dict[Tuple[str, int], _ValueFile] = {}


def _file_of(kind: str, shard: int) -> _ValueFile:
    """This process's file of ``kind`` values, ``shard`` (0: the file prometheus-client itself would write)."""
    file = _files.get((kind, shard))
    if file is None:
        name = f"{kind}_{shard}_{os.getpid()}.db" if shard else f"{kind}_{os.getpid()}.db"
        file = _files[kind, shard] = _ValueFile(kind, shard, os.path.join(_directory(), name))
    return file


def _shard(kind: str, labels: Dict[str, str]) -> int:
    """Which file of its kind a value goes to: by its model's name (1 to SHARDS), or 0 (a gauge, or no model)."""
    model = labels.get("model_name")
    if model is None or kind.startswith("gauge"):
        return 0
    return 1 + zlib.crc32(model.encode("utf-8")) % SHARDS


class SlotValue:
    """A metric value for prometheus-client (its ``values.ValueClass``) in multi-process mode."""

    _multiprocess = True
    # A server keeps tens of these per model: no per-value dict, and the key is read back from the file.
    __slots__ = ("_file", "_start", "_slot", "__weakref__")

    def __init__(self, typ: str, metric_name: str, name: str, labelnames, labelvalues, help_text: str,
                 multiprocess_mode: str = "", **kwargs):
        kind = f"gauge_{multiprocess_mode}" if typ == "gauge" else typ
        # the key prometheus-client writes and reads: labels in a fixed order
        labels = dict(zip(labelnames, labelvalues, strict=True))
        key = json.dumps([metric_name, name, labels, help_text], sort_keys=True)
        with _lock:
            self._file = _file_of(kind, _shard(kind, labels))
            # where its entry starts in its file (-1 once let go), and a view of its doubles there
            self._start, self._slot = self._file.slot(key)
            self._file.values.add(self)

    @property
    def _key(self) -> str:
        """The key of its entry (while in use), as prometheus-client's ``mmap_key`` makes it (read from the file)."""
        return key_at(self._slot.obj, self._start).decode("utf-8")

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


def hold(holder, value: SlotValue) -> None:
    """Tell ``holder`` (an object with a ``repoint()`` method re-reading the slots of its values, all in
    ``value``'s file) whenever their slots move: after a compaction of the file, and in a forked child."""
    with _lock:
        value._file.holders.add(holder)


def let_go(children: Iterable[object]) -> None:
    """The series of these metric children (prometheus-client's, no longer used: a model repository's model
    unloaded) leave this process's files: they read 0 now and are gone from the next compaction, which runs
    once a file holds as many bytes of such series as of those in use. Values of other classes are left."""
    with _lock:
        touched: Set[_ValueFile] = set()
        for child in children:
            for value in _values_of(child):
                if value._start >= 0:
                    value._file.drop(value._start)
                    value._start = -1
                    touched.add(value._file)
        for file in touched:
            if file.wasteful():
                file.compact()


def _values_of(child: object) -> List[SlotValue]:
    """The SlotValues a metric child holds: a counter's or gauge's ``_value``, a histogram's ``_buckets`` and
    ``_sum``, a summary's ``_count`` and ``_sum`` (whatever attributes hold them)."""
    found: List[SlotValue] = []
    for attribute in vars(child).values() if hasattr(child, "__dict__") else ():
        if isinstance(attribute, SlotValue):
            found.append(attribute)
        elif isinstance(attribute, list):
            found.extend(item for item in attribute if isinstance(item, SlotValue))
    return found


def _move_to_own_files() -> None:
    """In a forked child: leave the parent's files (their counts stay the parent's) for this pid's."""
    global _lock
    _lock = threading.Lock()
    parents = list(_files.values())
    _files.clear()
    for parent in parents:
        file = _file_of(parent.kind, parent.shard)
        for value in list(parent.values):
            value._file = file
            if value._start >= 0:  # its key read from the parent's mapping, still mapped here
                value._start, value._slot = file.slot(value._key)
                file.values.add(value)
        for holder in list(parent.holders):
            file.holders.add(holder)
            holder.repoint()


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
