"""An answer written on a connection just before Tornado closes it for a read past its limit: the 431
of headers too large.

Reaches into Tornado: a stream's ``close_fd`` (the step of BaseIOStream, meant for subclasses, that closes
the socket once the stream has closed), replaced on the stream of each connection; the replacement reads
the stream's ``error``, ``socket`` and ``writing()``.

Why: when a request's headers pass ``max_header_size``, Tornado's header read fails with
``UnsatisfiableReadError`` and the stream closes at once: the client sees its connection end with no
status, and no Tornado hook runs before the socket is gone. The replacement sends the answer the server
gives it, ends the connection's sending side, and reads and drops what the client still sends for a
moment before it closes the socket (closed with unread data, the kernel would reset the connection and
the client could lose the answer).

Plain path (``KSERVE_SDK_INTERNALS=off``): Tornado's own close, with no status.
"""
import asyncio
import socket
from typing import Callable, Optional

from tornado.iostream import UnsatisfiableReadError

from . import ENABLED

#: How long a closed connection still reads (and drops) what its client sends, and how much at most.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 20


def answer_overflow(stream, answer: Callable[[], Optional[bytes]]) -> None:
    """When ``stream`` (a Tornado IOStream) closes because a read passed its limit and nothing is waiting to
    be written, send ``answer()`` (the bytes of a whole HTTP answer; None: send nothing) before it closes."""
    if not ENABLED:
        return
    close_fd = stream.close_fd

    def closing() -> None:
        if isinstance(stream.error, UnsatisfiableReadError) and not stream.writing():
            data = answer()
            if data is not None:
                sock, stream.socket = stream.socket, None  # as IOStream.close_fd leaves it
                _send_then_close(sock, data)
                return
        close_fd()

    stream.close_fd = closing


def _send_then_close(sock: socket.socket, data: bytes) -> None:
    """Send ``data``, end the sending side, then drop what the peer sends until it closes, LINGER_BYTES
    have come or LINGER_SECONDS have passed; then close."""
    try:
        sent = sock.send(data)
        if sent == len(data):
            sock.shutdown(socket.SHUT_WR)
    except OSError:  # the peer is gone, or a TLS socket cannot write now: just close
        sock.close()
        return
    loop = asyncio.get_running_loop()
    fd, dropped = sock.fileno(), [0]

    def close() -> None:
        timer.cancel()
        loop.remove_reader(fd)
        sock.close()

    def drop() -> None:
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        dropped[0] += len(chunk)
        if not chunk or dropped[0] >= LINGER_BYTES:
            close()

    timer = loop.call_later(LINGER_SECONDS, close)
    loop.add_reader(fd, drop)
