"""Whether a request's body arrived with its headers, so the body timeout's timer can be skipped.

Reaches into Tornado: ``IOStream._read_buffer_size``, the bytes read from the socket and not yet
consumed.

Why: ``--body_timeout_seconds`` arms a timer for every body Tornado reads, a cost on every request;
a body already in the read buffer cannot time out, and most small inference bodies come in the same
packet as their headers.

Plain path (``KSERVE_SDK_INTERNALS=off``): never known, so every body keeps the timeout.
"""
from . import ENABLED


def body_already_buffered(connection, length: int) -> bool:
    """Whether the ``length`` bytes of body are already read into ``connection``'s stream buffer
    (``connection``: Tornado's HTTP1Connection of the request). False when unknown."""
    if not ENABLED:
        return False
    return getattr(getattr(connection, "stream", None), "_read_buffer_size", 0) >= length
