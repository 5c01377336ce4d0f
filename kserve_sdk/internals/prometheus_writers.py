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


#: A tally adds what it counted to its histogram after this many observations (and when flushed).
TALLY_FLUSH_EVERY = 256


def tally(writer):
    """A tally of ``writer`` (a histogram's direct writer or child): observations counted in local buckets
    and added to the histogram every :data:`TALLY_FLUSH_EVERY` observations and at ``flush()``. For values
    that come many per loop round, such as the gaps between a stream's chunks."""
    return SlotTally(writer) if isinstance(writer, SlotHistogram) else ReplayTally(writer)


class SlotTally:
    """A tally of a :class:`SlotHistogram`: an observation is a bisect and two local additions."""

    __slots__ = ("_histogram", "_bounds", "_counts", "_total", "_left")

    def __init__(self, histogram: SlotHistogram):
        self._histogram, self._bounds = histogram, histogram._bounds
        self._counts, self._total, self._left = [0] * len(histogram._buckets), 0.0, TALLY_FLUSH_EVERY

    def observe(self, amount: float) -> None:
        """Count ``amount``, as ``SlotHistogram.observe`` would."""
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._total += amount
        self._left -= 1
        if not self._left:
            self.flush()

    def flush(self) -> None:
        """Add what was counted since the last flush to the histogram."""
        counts, buckets = self._counts, self._histogram._buckets
        for i, n in enumerate(counts):
            if n:
                buckets[i][0] += n
                counts[i] = 0
        self._histogram._sum[0] += self._total
        self._total, self._left = 0.0, TALLY_FLUSH_EVERY


class ReplayTally:
    """A tally of a histogram child of prometheus-client's own (the plain path): observations kept and
    replayed through its ``observe``."""

    __slots__ = ("_child", "_amounts")

    def __init__(self, child):
        self._child, self._amounts = child, []

    def observe(self, amount: float) -> None:
        """Keep ``amount`` for the next flush."""
        self._amounts.append(amount)
        if len(self._amounts) >= TALLY_FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Observe what was kept."""
        for amount in self._amounts:
            self._child.observe(amount)
        self._amounts.clear()
