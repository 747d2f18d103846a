"""The listening socket of an HTTP-serving subcommand (`serve`, `gateway`), bound before anything is
announced, so early clients queue instead of failing."""

from __future__ import annotations

import socket

from ..errors import PreconditionsError


def listening_socket(host: str, port: int, option: str) -> socket.socket:
    """A socket listening on host:port; a failure is one line naming `option` (`--listen`)."""
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and without
    # it every response waited for the client's delayed ACK (GET /healthz p50 44 ms -> 3 ms).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PreconditionsError(f"{option}: cannot listen on {host}:{port}: "
                                 f"{exc.strerror or exc}") from None
    return sock
