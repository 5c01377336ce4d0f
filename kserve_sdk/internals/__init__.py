"""The places where kserve_sdk reaches past a library's public API, one module per trick.

Each module says what it reaches into, why (the gain), and what the plain path is. Set
``KSERVE_SDK_INTERNALS=off`` in the environment to turn every trick off: each then takes its library's
public path, which behaves the same and is a little slower. The setting is read once, when kserve_sdk
is first imported, and worker processes inherit it. ``tests/test_internals.py`` fails, naming the
internal, when a pinned library no longer has what a trick uses.

- :mod:`.prometheus_values`: prometheus-client's ``values.ValueClass`` and its multi-process file layout
  (series of unloaded models compacted out of the files)
- :mod:`.prometheus_writers`: a metric child's ``_value``, ``_buckets``, ``_sum`` and ``_upper_bounds``
- :mod:`.prometheus_scrape`: the multi-process files' layout, read back, and prometheus-client's merge and text
  formats written again for ``/metrics`` (each entry parsed once, each sample's text kept)
- :mod:`.prometheus_children`: a labelled metric's ``_labelnames``, ``_metrics`` and ``_lock`` (dropping an
  evicted repository model's children, whose series are then let go)
- :mod:`.tornado_accept`: ``TCPServer._handle_connection`` (accepting for idle workers first)
- :mod:`.tornado_buffer`: ``IOStream._read_buffer_size`` (the body already arrived with the headers)
- :mod:`.tornado_headers`: ``RequestHandler._headers`` (the answer's headers, for the access log)
- :mod:`.tornado_sent`: ``IOStream._total_write_done_index`` (whether an unread answer moved, for the
  send timeout)
- :mod:`.tornado_overflow`: a stream's ``close_fd``, replaced per connection (the 431 of headers too large;
  the plain path closes with no answer, as Tornado does)
- :mod:`.log_records`: ``logging._startTime`` and ``LogRecord``'s fields (building a record by hand)

Not switchable, because no public path behaves the same: :mod:`.argparse_exact` (argparse's
``_get_option_tuples``, KServe's one-dash flags) and :mod:`.ray_private` (Ray's ``_global_node`` and
``auto_init_hook``, for stopping a local Ray cleanly).
"""
import os


def switched_on(value: str) -> bool:
    """Whether a value of ``KSERVE_SDK_INTERNALS`` leaves the tricks on: all but off, 0, false and no."""
    return value.strip().lower() not in ("off", "0", "false", "no")


#: False when ``KSERVE_SDK_INTERNALS`` is ``off`` (or ``0``, ``false``, ``no``): every trick takes the plain path.
ENABLED: bool = switched_on(os.environ.get("KSERVE_SDK_INTERNALS", "on"))
