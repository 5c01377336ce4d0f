"""How much of its answers a connection has sent, to tell a client that reads slowly from one that does
not read at all.

Reaches into Tornado: ``IOStream._total_write_done_index``, the count of bytes the stream has written to
its socket so far.

Why: ``--send_timeout_seconds`` closes a connection whose answer has not moved for that long, as nginx's
``send_timeout`` does: the time counts between two writes the socket took, not for the whole answer.
Tornado's public API only says whether a stream is still writing (``writing()``), not whether it got
any further.

Plain path (``KSERVE_SDK_INTERNALS=off``): nothing is known of the progress, and the timeout counts from
when a stream was first seen writing: a client that reads, but so slowly that an answer does not go out
whole within the timeout, is cut off as well.
"""
from typing import Optional

from . import ENABLED


def bytes_sent(stream) -> Optional[int]:
    """The bytes ``stream`` (a Tornado IOStream) has written to its socket so far; None when unknown."""
    if not ENABLED:
        return None
    return getattr(stream, "_total_write_done_index", None)
