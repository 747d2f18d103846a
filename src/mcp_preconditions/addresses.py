"""The `http://HOST:PORT` form that every listener option (`--listen`, `--metrics-listen`) and a
gateway.toml's `listen` take: one reading of it, whatever names the value in its error.
"""

from __future__ import annotations

import re

_HTTP_ADDRESS = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):([0-9]+)")


def http_address(value: str, expected: str = "'http://HOST:PORT'") -> tuple[str, int]:
    """(host, port) of `http://HOST:PORT` (an IPv6 host in brackets); ValueError saying what was
    `expected` or that the port is out of range."""
    match = _HTTP_ADDRESS.fullmatch(value)
    if match is None:
        raise ValueError(f"expected {expected}, got {value!r}")
    host, port = match.group(1).strip("[]"), int(match.group(2))
    if port > 65535:
        raise ValueError(f"port out of range (0-65535): {port}")
    return host, port
