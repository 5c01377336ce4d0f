"""Which loaded models to unload so one more fits: least recently used first, never one that is busy or pinned.

:class:`LoadedSet` keeps the loaded models (by key: ``(name, version)``) in the order they were last used,
each with its size, whether it is pinned and how many calls it has in flight. It decides nothing by itself
and loads nothing: :meth:`LoadedSet.plan_room` names the models to evict before a load, or raises
:class:`NoRoom` when nothing can go. The caller then answers the request 503 (``Retry-After``) with that
reason rather than loading past its budget: the busy models free up when their calls end, so a retry soon
succeeds, while loading anyway would break the budget the flags promise.

It is not thread-safe: use it from one thread (the event loop). The hit path (:meth:`LoadedSet.begin`,
:meth:`LoadedSet.end`, :meth:`LoadedSet.touch`) moves one key to the end of an ordered dict and allocates
nothing.
"""
from collections import OrderedDict
from http import HTTPStatus
from typing import Hashable, Iterator, List


class NoRoom(RuntimeError):
    """A model cannot be loaded within ``--max_loaded_models`` / ``--max_model_memory_mb``: every loaded
    model is busy (calls in flight) or pinned, or the model alone is larger than the budget (HTTP 503 with
    ``Retry-After``, gRPC UNAVAILABLE)."""

    http_status = HTTPStatus.SERVICE_UNAVAILABLE
    grpc_code = "UNAVAILABLE"
    retry_after = 1

    def __init__(self, reason: str):
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class _Slot:
    """One loaded model's bookkeeping."""

    __slots__ = ("size", "pinned", "in_flight")

    def __init__(self, size: int, pinned: bool):
        self.size = size
        self.pinned = pinned
        self.in_flight = 0


class LoadedSet:
    """The loaded models, least recently used first.

    A load in progress counts too: ``add`` its key with its size estimate and ``begin`` it before the load
    starts (so concurrent plans see it and never evict it), ``resize`` it and ``end`` it after.
    """

    def __init__(self) -> None:
        self._slots: OrderedDict[Hashable, _Slot] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slots

    def __iter__(self) -> Iterator[Hashable]:
        """The keys, least recently used first."""
        return iter(list(self._slots))

    @property
    def total_bytes(self) -> int:
        """The sum of the loaded models' sizes."""
        return self._bytes

    def add(self, key: Hashable, size: int = 0, pinned: bool = False) -> None:
        """A model now loaded (or loading), as the most recently used; adding a key again updates its size
        and pin and keeps its calls in flight."""
        slot = self._slots.get(key)
        if slot is None:
            self._slots[key] = _Slot(size, pinned)
        else:
            self._bytes -= slot.size
            slot.size, slot.pinned = size, pinned
            self._slots.move_to_end(key)
        self._bytes += size

    def remove(self, key: Hashable) -> None:
        """A model unloaded (nothing happens for a key not in the set)."""
        slot = self._slots.pop(key, None)
        if slot is not None:
            self._bytes -= slot.size

    def resize(self, key: Hashable, size: int) -> None:
        """A model's size, once known (after its load)."""
        slot = self._slots[key]
        self._bytes += size - slot.size
        slot.size = size

    def touch(self, key: Hashable) -> None:
        """The model was just used."""
        self._slots.move_to_end(key)

    def begin(self, key: Hashable) -> None:
        """A call of the model starts: it is used now, and busy until :meth:`end`."""
        self._slots[key].in_flight += 1
        self._slots.move_to_end(key)

    def end(self, key: Hashable) -> None:
        """A call of the model ended (nothing happens for a key no longer in the set)."""
        slot = self._slots.get(key)
        if slot is not None and slot.in_flight > 0:
            slot.in_flight -= 1

    def busy(self, key: Hashable) -> bool:
        """Whether the model has calls in flight."""
        slot = self._slots.get(key)
        return slot is not None and slot.in_flight > 0

    def plan_room(self, max_models: int, max_bytes: int, incoming_bytes_estimate: int = 0,
                  incoming: str = "the model") -> List[Hashable]:
        """The models to unload, least recently used first, so that one more model (of about
        ``incoming_bytes_estimate`` bytes) fits within ``max_models`` models and ``max_bytes`` bytes (0: no
        limit). Busy and pinned models are never chosen. Raises :class:`NoRoom` naming ``incoming`` when
        it cannot fit even so."""
        estimate = max(0, incoming_bytes_estimate)
        if max_bytes and estimate > max_bytes:
            raise NoRoom(f"no room for {incoming}: it takes about {_mb(estimate)} MB, more than the whole "
                         f"--max_model_memory_mb {_mb(max_bytes)}")
        count, total = len(self._slots), self._bytes
        victims: List[Hashable] = []
        for key, slot in self._slots.items():
            if _fits(count, total, estimate, max_models, max_bytes):
                return victims
            if not (slot.pinned or slot.in_flight):
                victims.append(key)
                count -= 1
                total -= slot.size
        if _fits(count, total, estimate, max_models, max_bytes):
            return victims
        held = sum(1 for slot in self._slots.values() if slot.pinned or slot.in_flight)
        limits = [f"--max_loaded_models {max_models}"] if max_models else []
        limits += [f"--max_model_memory_mb {_mb(max_bytes)}"] if max_bytes else []
        raise NoRoom(f"no room for {incoming}: {held} loaded model{'' if held == 1 else 's'} busy or pinned "
                     f"({', '.join(limits)}); retry later")


def _fits(count: int, total: int, estimate: int, max_models: int, max_bytes: int) -> bool:
    return (not max_models or count < max_models) and (not max_bytes or total + estimate <= max_bytes)


def _mb(size: int) -> str:
    return f"{size / 2**20:.4g}"
