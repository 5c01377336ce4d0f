"""How much memory a model takes: what it says (``memory_bytes()``), else what the process grew by while it
loaded.

The growth is the resident set size (RSS) after the load minus before it. Models that load at the same
time (``--model_load_threads`` above 1) each count the others' growth too; a model that frees memory
while loading counts as 0. Where ``/proc`` is missing (not Linux), RSS reads 0: sizes then come from
``memory_bytes()`` alone.

An unloaded model's memory is freed in the middle of the C heap, where the allocator keeps it; after unloads,
:class:`HeapTrim` hands those pages back to the system (glibc's ``malloc_trim``), so the RSS follows the models
loaded rather than every load and eviction since the start.
"""
import asyncio
import ctypes
import os
from typing import Any, Callable, Optional

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM = "/proc/self/statm"


def rss_bytes() -> int:
    """The process's resident set size in bytes (``/proc/self/statm``: one small read), 0 where unknown."""
    try:
        fd = os.open(_STATM, os.O_RDONLY)
    except OSError:
        return 0
    try:
        fields = os.read(fd, 128).split()
    finally:
        os.close(fd)
    return int(fields[1]) * _PAGE_SIZE if len(fields) > 1 else 0


def model_size(model: Any, rss_before: int, rss_after: int) -> int:
    """A loaded model's size in bytes: its ``memory_bytes()`` when it has one that answers a non-negative
    number, else the RSS growth during its load; never negative."""
    method = getattr(model, "memory_bytes", None)
    if callable(method):
        try:
            size = method()
        except Exception:  # the model's own estimate failed: what the process grew by still says something
            size = None
        if type(size) in (int, float) and size >= 0:
            return int(size)
    return max(0, rss_after - rss_before)


def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None (another C library, or no C library to load)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


#: The longest a trim waits after an unload: at most one trim per this many seconds while models churn.
TRIM_DELAY_SECONDS = 1.0


class HeapTrim:
    """After models are unloaded, returns the C heap's free pages to the system once, ``TRIM_DELAY_SECONDS``
    later (one trim for a burst of evictions), on a thread of ``submit`` (a trim takes about a millisecond)."""

    def __init__(self, submit: Callable[..., Any]):
        self._submit, self._trim = submit, _malloc_trim()
        self._pending: Optional[asyncio.TimerHandle] = None

    def soon(self) -> None:
        """Trim the heap in a moment (on the running loop; nothing outside one, or without glibc)."""
        if self._trim is None or self._pending is not None:
            return
        try:
            self._pending = asyncio.get_running_loop().call_later(TRIM_DELAY_SECONDS, self._run)
        except RuntimeError:
            pass

    def _run(self) -> None:
        self._pending = None
        try:
            self._submit(self._trim, 0)
        except RuntimeError:  # the threads were shut down: the server stops
            pass

    def cancel(self) -> None:
        """Forget a trim not yet started (the server stops)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
