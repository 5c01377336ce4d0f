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
