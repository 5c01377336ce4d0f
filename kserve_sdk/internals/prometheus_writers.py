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

from . import ENABLED
from .prometheus_values import SlotValue, hold


def direct_writer(child):
    """A writer with the child's ``inc``/``dec`` (counter, gauge) or ``observe`` (histogram) that adds to
    its slots directly, or the child itself when its values are not slots (or the tricks are off).

    The writers skip prometheus-client's lock: they are used on the event loop's thread only (one loop
    per worker process). They keep views of their values' slots, and are told when those move
    (prometheus_values.hold: a compacted file, a forked child)."""
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

    __slots__ = ("_slot", "_value", "__weakref__")

    def __init__(self, value: SlotValue):
        self._value = value
        self.repoint()
        hold(self, value)

    def repoint(self) -> None:
        """Take the value's slot again (it moved)."""
        self._slot = self._value._slot

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount``."""
        self._slot[0] += amount

    def dec(self, amount: float = 1.0) -> None:
        """Subtract ``amount``."""
        self._slot[0] -= amount


class SlotHistogram:
    """``observe`` of a histogram: one count in its bucket and the amount added to the sum."""

    __slots__ = ("_bounds", "_buckets", "_sum", "_values", "__weakref__")

    def __init__(self, bounds, buckets, total: SlotValue):
        self._bounds = list(bounds)
        self._values = (list(buckets), total)
        self.repoint()
        hold(self, total)

    def repoint(self) -> None:
        """Take the values' slots again (they moved)."""
        self._buckets = [bucket._slot for bucket in self._values[0]]
        self._sum = self._values[1]._slot

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose bound is at or above it, as prometheus-client does."""
        self._buckets[bisect_left(self._bounds, amount)][0] += 1
        self._sum[0] += amount


def gap_writer(writer, least: float):
    """The writer of gaps between a stream's chunks for ``writer`` (a histogram's direct writer or child,
    whose first bucket's bound is ``least``): ``observe(gap)`` for a gap above ``least``, and
    ``add_least(count, total)`` for ``count`` gaps at or under it, ``total`` seconds in all, which a
    stream counts itself (most gaps of a model that yields without waiting are that short)."""
    return SlotGaps(writer, least) if isinstance(writer, SlotHistogram) else ReplayGaps(writer, least)


class SlotGaps:
    """Gaps written into a :class:`SlotHistogram`'s slots: the short ones as one addition to the first
    bucket and one to the sum."""

    __slots__ = ("observe", "least", "_first", "_sum", "_values", "__weakref__")

    def __init__(self, histogram: SlotHistogram, least: float):
        self.observe, self.least = histogram.observe, least
        self._values = histogram._values[0][0], histogram._values[1]
        self.repoint()
        hold(self, histogram._values[1])

    def repoint(self) -> None:
        """Take the slots of the first bucket and the sum again (they moved)."""
        self._first, self._sum = self._values[0]._slot, self._values[1]._slot

    def add_least(self, count: int, total: float) -> None:
        """Count ``count`` gaps at or under ``least``, ``total`` seconds in all."""
        self._first[0] += count
        self._sum[0] += total


class ReplayGaps:
    """Gaps observed through a histogram child of prometheus-client's own (the plain path): the short
    ones each as their mean."""

    __slots__ = ("observe", "least")

    def __init__(self, child, least: float):
        self.observe, self.least = child.observe, least

    def add_least(self, count: int, total: float) -> None:
        """Count ``count`` gaps at or under ``least``, ``total`` seconds in all."""
        mean = total / count if count else 0.0
        for _ in range(count):
            self.observe(mean)
