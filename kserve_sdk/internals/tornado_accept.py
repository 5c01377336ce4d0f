"""Accepting HTTP connections in a worker so that idle sibling workers get them first.

Reaches into Tornado: ``TCPServer._handle_connection(connection, address)``, the private step that
wraps an accepted socket in an IOStream (TLS included) and hands it to the server.

Why: Tornado's ``add_sockets`` accepts up to 128 connections per wake-up and every worker is woken for
each one, so a worker busy with model work takes connections an idle sibling could answer sooner. With
:func:`accept_balanced`, two workers on a CPU-bound model come closer to twice one worker's rate
(tests/test_scale.py checks it; the figures are in docs/performance.md).

Plain path (``KSERVE_SDK_INTERNALS=off``): the same balanced accept, but the socket becomes an
``IOStream`` / ``SSLIOStream`` here and goes to the server's public ``handle_stream``.
"""
import errno
import socket
import ssl
from typing import Any, Callable, Iterable

from ..logging import logger
from . import ENABLED


def accept_balanced(server, sockets: Iterable[socket.socket], busy: Callable[[], int]) -> None:
    """Accept connections on shared listening ``sockets`` for ``server`` (a Tornado TCPServer), giving
    idle sibling workers the first chance.

    A worker with ``busy()`` calls in flight waits a moment (1 ms per call, at most 10 ms) before it
    accepts, and takes one connection per wake-up; whoever is idle takes the rest.
    """
    from tornado.ioloop import IOLoop

    loop = IOLoop.current()
    hand_over = server._handle_connection if ENABLED else _public_hand_over(server)

    def accept(sock: socket.socket) -> None:
        try:
            connection, address = sock.accept()
        except (BlockingIOError, InterruptedError):
            return  # a sibling took it
        except OSError as e:
            if e.errno in (errno.ECONNABORTED, errno.EMFILE, errno.ENFILE):
                logger.warning("accept failed: %s", e)
                return
            raise
        hand_over(connection, address)

    def watch(sock: socket.socket) -> None:
        def on_readable(fd, events) -> None:
            load = busy()
            if load == 0:
                accept(sock)
                return
            loop.remove_handler(sock)  # level-triggered: pause until the delay is over

            def later() -> None:
                accept(sock)
                loop.add_handler(sock, on_readable, IOLoop.READ)

            loop.call_later(min(0.001 * load, 0.01), later)

        loop.add_handler(sock, on_readable, IOLoop.READ)

    for sock in sockets:
        watch(sock)


def _public_hand_over(server) -> Callable[[socket.socket, Any], None]:
    """An accepted socket as a stream for ``server.handle_stream``, through Tornado's public API only."""
    from tornado.iostream import IOStream, SSLIOStream
    from tornado.netutil import ssl_wrap_socket

    def hand_over(connection: socket.socket, address: Any) -> None:
        limits = {"max_buffer_size": server.max_buffer_size, "read_chunk_size": server.read_chunk_size}
        if server.ssl_options is None:
            stream = IOStream(connection, **limits)
        else:
            try:
                connection = ssl_wrap_socket(connection, server.ssl_options, server_side=True,
                                             do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as e:  # the client left at once (a port scan, say)
                logger.debug("connection dropped before TLS: %s", e)
                connection.close()
                return
            stream = SSLIOStream(connection, **limits)
        server.handle_stream(stream, address)

    return hand_over
