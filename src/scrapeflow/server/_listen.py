"""The service's listening socket, opened before the service starts (a taken port is refused at
once, and port 0 is known before the first request)."""

from __future__ import annotations

import socket

__all__ = ["tcp_listener"]


def tcp_listener(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (``port`` 0: a free one). Raises ``OSError``.

    It is made with ``IPPROTO_TCP``, not ``socket.create_server``'s protocol 0: asyncio turns on
    TCP_NODELAY only for connections whose socket says TCP, and without it every keep-alive
    answer waits about 40 ms (Nagle's algorithm against the client's delayed ACK).
    """
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        raise
    return listener
