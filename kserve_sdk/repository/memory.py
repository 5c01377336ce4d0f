"""How much memory a model takes: what it says (``memory_bytes()``), else what the process grew by while it
loaded.

The growth is the resident set size (RSS) after the load minus before it. Models that load at the same
time (``--model_load_threads`` above 1) each count the others' growth too; a model that frees memory
while loading counts as 0. Where ``/proc`` is missing (not Linux), RSS reads 0: sizes then come from
``memory_bytes()`` alone.
"""
import os
from typing import Any

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
