"""The listening sockets of HTTP-serving subcommands (`serve`, `gateway`, `explore`): the
`http://HOST:PORT` form of their options read, and the socket bound before anything is
announced, so early clients queue instead of failing."""

from __future__ import annotations

import ipaddress
import socket

from .. import addresses
from ..errors import InputError, PreconditionsError


def http_address(value: str, option: str, expected: str = "'http://HOST:PORT'") -> tuple[str, int]:
    """(host, port) of `http://HOST:PORT` (an IPv6 host in brackets); InputError naming `option`
    and what it `expected`."""
    try:
        return addresses.http_address(value, expected)
    except ValueError as exc:
        raise InputError(f"{option}: {exc}") from None


def is_loopback(host: str) -> bool:
    """True for `localhost` and the loopback addresses (127.0.0.0/8, ::1): only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: whatever it resolves to, it is not known to stay here
        return False


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
