"""How the gateway opens a session with a server (2025-11-25 `initialize`), for its own session and
for each caller's (`caller_sessions.py`), and how a session ends: what it says it is, the version
it must agree to, and the requests that fail at once when the link is lost before they are answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import anyio
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ... import __version__
from ..errors import UpstreamProtocolError
from .http import HttpLink
from .peer import Peer
from .stdio import StdioLink

CLIENT_INFO = {"name": "mcp-preconditions-gateway", "version": __version__}
# What the gateway can answer for a server: it puts the request to the client whose call caused it.
CLIENT_CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}, "url": {}},
                       "roots": {"listChanged": True}}
Link = StdioLink | HttpLink


async def initialize(peer: Peer, link: Link, timeout: float | None) -> dict[str, Any]:
    """The 2025-11-25 handshake: `initialize` (its result), the version agreed (an HTTP link says
    it on every later request), `notifications/initialized`. RpcError or UpstreamRefused: the
    server refused it (it may speak 2026-07-28 only); UpstreamProtocolError: a version the
    gateway does not speak. The caller closes the link when it fails."""
    init = await handshake(peer, link, "initialize", {
        "protocolVersion": "2025-11-25", "capabilities": CLIENT_CAPABILITIES,
        "clientInfo": CLIENT_INFO}, timeout)
    version = init.get("protocolVersion")
    if version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise UpstreamProtocolError(f"unsupported protocol version from the server: {version!r}")
    if isinstance(link, HttpLink):
        link.protocol_version = version  # every later request says it, as a header
    await peer.notify("notifications/initialized", None)
    return init


async def handshake(peer: Peer, link: Link, method: str, params: dict[str, Any] | None,
                    timeout: float | None) -> dict[str, Any]:
    """A request of the handshake, before anything watches the link: a server that exits (or ends
    the session) before it answers fails it at once (UpstreamClosed), so it is started again
    after the backoff, not after the handshake timeout."""
    async def close_when_lost() -> None:
        await link.lost.wait()
        peer.close()
    watch = asyncio.get_running_loop().create_task(close_when_lost())
    try:
        return await peer.request(method, params, timeout=timeout)
    finally:
        watch.cancel()


async def closed(peer: Peer, link: Link) -> None:
    """A session is over: its waiting requests fail, the process is stopped (shielded: the
    gateway's own shutdown must not leave a server running)."""
    peer.close()
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await link.close()
