"""The listening sockets of HTTP-serving subcommands (`serve`, `gateway`): an `http://HOST:PORT`
option read, and the socket bound before anything is announced, so early clients queue instead of
failing."""

from __future__ import annotations

import re
import socket

from ..errors import InputError, PreconditionsError

_HTTP_LISTEN = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):([0-9]+)")


def http_listen(value: str, option: str) -> tuple[str, int]:
    """(host, port) of an `http://HOST:PORT` option value (an IPv6 host in brackets); raises
    InputError naming `option` for anything else."""
    match = _HTTP_LISTEN.fullmatch(value)
    if match is None:
        raise InputError(f"{option}: expected http://HOST:PORT, got {value!r}")
    port = int(match.group(2))
    if port > 65535:
        raise InputError(f"{option}: port out of range (0-65535): {port}")
    return match.group(1).strip("[]"), port


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
