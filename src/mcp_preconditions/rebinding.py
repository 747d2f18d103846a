"""DNS-rebinding protection for a listener on a loopback address: the Host and Origin a request may
carry, as the MCP SDK sets them up (`PATTERN:*` allows any port). A web page that rebinds its own
name to 127.0.0.1 sends that name as Host, so it reads nothing. The gateway's listener and every
`--metrics-listen` listener ask the same `Security`. A request with no Host at all cannot come from
a browser (it always sends one): where health checkers and scrapers ask (haproxy's `option
httpchk` sends HTTP/1.0 without Host), it may be answered (`hostless`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
Refusal = tuple[int, bytes]  # the HTTP status and the text a refused request reads


@dataclass(frozen=True)
class Security:
    """The Hosts and Origins a loopback listener answers."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...]

    @classmethod
    def for_host(cls, host: str) -> Security | None:
        """The check for a listener bound to `host`; None when it is not a loopback address (the
        network in front of it decides who reaches it)."""
        if host not in LOCAL_HOSTS:
            return None
        # `PATTERN:*` allows any port; the bare names are what a client sends for port 80.
        return cls(("127.0.0.1", "localhost", "[::1]", "127.0.0.1:*", "localhost:*", "[::1]:*"),
                   ("http://127.0.0.1", "http://localhost", "http://[::1]", "http://127.0.0.1:*",
                    "http://localhost:*", "http://[::1]:*"))

    def refuse(self, host: str | None, origin: str | None, *, hostless: bool = False
               ) -> Refusal | None:
        """How a request with this Host and Origin header is refused, or None. `hostless`: a
        request without a Host header is not refused for that."""
        if not (hostless and host is None) and not _allowed(host, self.hosts):
            return 421, b"Invalid Host header"
        if origin and not _allowed(origin, self.origins):
            return 403, b"Invalid Origin header"
        return None

    def refuse_headers(self, raw: list[tuple[bytes, bytes]], *, hostless: bool = False
                       ) -> Refusal | None:
        """`refuse` for raw (ASGI) headers: their first Host and Origin count."""
        host = origin = None
        for name, value in raw:
            if name == b"host" and host is None:
                host = value.decode("latin-1")
            elif name == b"origin" and origin is None:
                origin = value.decode("latin-1")
        return self.refuse(host, origin, hostless=hostless)


@functools.lru_cache(maxsize=256)  # a client sends the same Host (and Origin) every time
def _allowed(value: str | None, patterns: tuple[str, ...]) -> bool:
    if not value:
        return False
    return value in patterns or any(p.endswith(":*") and value.startswith(p[:-1]) for p in patterns)
