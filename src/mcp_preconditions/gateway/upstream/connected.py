"""One connection to a server and what the server said about itself when it was made (`Connected`),
for the supervised session (`session.py`): the 2025-11-25 handshake asked for first and, when a
server refuses it or answers it as 2026-07-28, `server/discover` at 2026-07-28 on a new link
(`handshake.py` says what each carries). A link that fails either way is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION

from ..errors import ModernPeer, UpstreamRefused
from ..jsonrpc import RpcError
from .caller_sessions import CallerSessions
from .handshake import Link, closed, discover, initialize
from .http import HttpLink
from .peer import Peer

Open = Callable[[bool], Awaitable[tuple[Peer, Link]]]  # a new link and its peer (modern: 2026)


@dataclass
class Connected:
    """What the upstream said about itself when this connection was made."""

    peer: Peer
    link: Link
    protocol_version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any] | None
    instructions: str | None
    # A 2025-11-25 HTTP server's sessions of callers with credentials of their own (SPEC §14).
    callers: CallerSessions | None = None

    @property
    def lost(self) -> asyncio.Event:
        return self.link.lost


async def connect(open_link: Open, timeout: float | None,
                  callers: Callable[[HttpLink], CallerSessions]) -> Connected:
    """A new connection: the handshake, else `server/discover` (`callers`: the sessions of the
    callers with credentials of their own, for a 2025-11-25 HTTP server)."""
    peer, link = await open_link(False)
    try:
        init = await initialize(peer, link, timeout)
    except (RpcError, UpstreamRefused, ModernPeer):  # refused, or answered as 2026-07-28
        await closed(peer, link)
        return await _discover(open_link, timeout)
    except BaseException:  # a server that does not answer at all is not asked another way
        await closed(peer, link)
        raise
    return Connected(peer, link, init["protocolVersion"], _dict(init.get("capabilities")),
                     _dict(init.get("serverInfo")) or None, _text(init.get("instructions")),
                     callers(link) if isinstance(link, HttpLink) else None)


async def _discover(open_link: Open, timeout: float | None) -> Connected:
    """A server that refused the handshake, or answered it with 2026-07-28: 2026-07-28, where it
    describes itself on request."""
    peer, link = await open_link(True)
    try:
        found = await discover(peer, link, timeout)
    except BaseException:
        await closed(peer, link)
        raise
    meta = _dict(found.get("_meta"))
    return Connected(peer, link, LATEST_MODERN_VERSION, _dict(found.get("capabilities")),
                     _dict(meta.get(SERVER_INFO_META_KEY)) or None,
                     _text(found.get("instructions")))


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
