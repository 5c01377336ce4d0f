"""Request metrics written straight into their memory-mapped slots, past prometheus-client's wrappers.

Reaches into a prometheus-client metric child: a Counter's or Gauge's ``_value``, a Histogram's
``_buckets`` (one value per bucket, non-cumulative), ``_sum`` and ``_upper_bounds``. When those values
are :class:`~.prometheus_values.SlotValue` s, the writers here add to the slots directly.

Why: ``labels()`` takes a lock and builds a key on every call, and ``observe()`` walks three layers; a
request records about ten values. Here a histogram observation is a bisect and two additions
(docs/performance.md, "Metric updates write straight into their memory-mapped slot").

Plain path (``KSERVE_SDK_INTERNALS=off``, or values of prometheus-client's own class): the child
itself, through its public ``inc`` / ``dec`` / ``observe``.
"""
from bisect import bisect_left
from itertools import pairwise

import numpy as np

from . import ENABLED
from .prometheus_values import SlotValue


def direct_writer(child):
    """A writer with the child's ``inc``/``dec`` (counter, gauge) or ``observe`` (histogram) that adds to
    its slots directly, or the child itself when its values are not slots (or the tricks are off).

    The writers skip prometheus-client's lock: they are used on the event loop's thread only (one loop
    per worker process)."""
    if not ENABLED:
        return child
    if isinstance(getattr(child, "_value", None), SlotValue):  # a Counter's or a Gauge's child
        return SlotCount(child._value)
    buckets, total = getattr(child, "_buckets", None), getattr(child, "_sum", None)
    if isinstance(total, SlotValue) and buckets is not None and all(isinstance(b, SlotValue) for b in buckets):
        return SlotHistogram(child._upper_bounds, buckets, total)
    return child  # values of another class (prometheus-client was imported first): its own API


class SlotCount:
    """``inc`` / ``dec`` of a counter's or gauge's value, one addition each."""

    __slots__ = ("_slot",)

    def __init__(self, value: SlotValue):
        self._slot = value._slot

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount``."""
        self._slot[0] += amount

    def dec(self, amount: float = 1.0) -> None:
        """Subtract ``amount``."""
        self._slot[0] -= amount


class SlotHistogram:
    """``observe`` of a histogram: one count in its bucket and the amount added to the sum."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, bounds, buckets, total: SlotValue):
        self._bounds = list(bounds)
        self._buckets = [bucket._slot for bucket in buckets]
        self._sum = total._slot

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose bound is at or above it, as prometheus-client does."""
        self._buckets[bisect_left(self._bounds, amount)][0] += 1
        self._sum[0] += amount


def gap_writer(writer):
    """The writer of ``writer``'s (a histogram's direct writer or child) observations of the gaps between
    consecutive times: ``observe_gaps(stamps)``, for values that come many per loop round, such as the
    gaps between a stream's chunks."""
    return SlotGaps(writer) if isinstance(writer, SlotHistogram) else ReplayGaps(writer)


class SlotGaps:
    """Gaps added to a :class:`SlotHistogram` in bulk: numpy buckets them all at once, with the bucket
    ``SlotHistogram.observe`` would pick for each (the first bound at or above it)."""

    __slots__ = ("_histogram", "_bounds")

    def __init__(self, histogram: SlotHistogram):
        self._histogram, self._bounds = histogram, np.asarray(histogram._bounds, dtype=float)

    def observe_gaps(self, stamps) -> None:
        """Observe each gap between consecutive times of ``stamps`` (a list of seconds, in order)."""
        if len(stamps) < 2:
            return
        gaps = np.diff(np.asarray(stamps, dtype=float))
        counts = np.bincount(np.searchsorted(self._bounds, gaps, side="left"), minlength=len(self._bounds))
        buckets = self._histogram._buckets
        for i in np.flatnonzero(counts).tolist():
            buckets[i][0] += int(counts[i])
        self._histogram._sum[0] += stamps[-1] - stamps[0]


class ReplayGaps:
    """Gaps observed one by one through the ``observe`` of a histogram child of prometheus-client's own
    (the plain path)."""

    __slots__ = ("_child",)

    def __init__(self, child):
        self._child = child

    def observe_gaps(self, stamps) -> None:
        """Observe each gap between consecutive times of ``stamps``."""
        observe = self._child.observe
        for before, after in pairwise(stamps):
            observe(after - before)
