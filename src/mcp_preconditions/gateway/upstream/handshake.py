"""How the gateway opens a session with a server, for its own session and for each caller's
(`caller_sessions.py`), and how a session ends: what it says it is, the version it must agree to,
and the requests that fail at once when the link is lost before they are answered.

The gateway opens with the 2025-11-25 `initialize`, carrying what every 2026-07-28 request carries
(SEP-2575: `_meta` with its version, capabilities and identity; over HTTP the `MCP-Protocol-Version`
and `Mcp-Method` headers), so a server of either year reads it as what it is: a 2025-11-25 server
answers it (a dual-era one negotiates down, as the SDK's does), a 2026-07-28 server refuses it
(-32022) or answers it with 2026-07-28, and is then asked `server/discover` at 2026-07-28.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import anyio
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION

from ... import __version__
from ..errors import ModernPeer, UpstreamProtocolError
from ..jsonrpc import UNSUPPORTED_PROTOCOL_VERSION, RpcError
from .http import HttpLink
from .peer import Peer
from .stdio import StdioLink

CLIENT_INFO = {"name": "mcp-preconditions-gateway", "version": __version__}
# What the gateway can answer for a server: it puts the request to the client whose call caused it.
CLIENT_CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}, "url": {}},
                       "roots": {"listChanged": True}}
HANDSHAKE_VERSION = "2025-11-25"
Link = StdioLink | HttpLink


async def initialize(peer: Peer, link: Link, timeout: float | None) -> dict[str, Any]:
    """The 2025-11-25 handshake: `initialize` (its result; its `_meta` says what a 2026-07-28
    request's does), the version agreed (an HTTP link says
    it on every later request), `notifications/initialized`. RpcError or UpstreamRefused: the
    server refused it (it may speak 2026-07-28 only); ModernPeer: it answered 2026-07-28;
    UpstreamProtocolError: a version the gateway does not speak. The caller closes the link when
    it fails."""
    init = await handshake(peer, link, "initialize", {
        "protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES,
        "clientInfo": CLIENT_INFO, "_meta": {PROTOCOL_VERSION_META_KEY: HANDSHAKE_VERSION,
                                             CLIENT_INFO_META_KEY: CLIENT_INFO,
                                             CLIENT_CAPABILITIES_META_KEY: CLIENT_CAPABILITIES}},
        timeout)
    version = init.get("protocolVersion")
    if version == LATEST_MODERN_VERSION:
        raise ModernPeer("the server answered initialize with 2026-07-28")
    if version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise UpstreamProtocolError(f"unsupported protocol version from the server: {version!r}")
    if isinstance(link, HttpLink):
        link.protocol_version = version  # every later request says it, as a header
    await peer.notify("notifications/initialized", None)
    return init


async def discover(peer: Peer, link: Link, timeout: float | None) -> dict[str, Any]:
    """`server/discover` at 2026-07-28 (the link's requests say it, header and `_meta`): its
    result, once it names 2026-07-28 among its versions. A -32022 (unsupported version) that names
    2026-07-28 is asked once more, as the SDK's client does; one that names no version the gateway
    speaks is UpstreamProtocolError. The caller closes the link when it fails."""
    for attempt in range(2):
        try:
            found = await handshake(peer, link, "server/discover", None, timeout)
        except RpcError as exc:
            supported = _supported(exc.data) if exc.code == UNSUPPORTED_PROTOCOL_VERSION else None
            if supported is None:
                raise
            if LATEST_MODERN_VERSION in supported and attempt == 0:
                continue
            raise UpstreamProtocolError("the server supports no protocol version the gateway "
                                        f"speaks: {', '.join(supported)[:200]}") from None
        versions = found.get("supportedVersions")
        if isinstance(versions, list) and LATEST_MODERN_VERSION in versions:
            return found
        break
    raise UpstreamProtocolError("the server supports no protocol version the gateway speaks")


def _supported(data: Any) -> list[str] | None:
    """An unsupported-version error's `data.supported`, when it is a list of strings."""
    supported = data.get("supported") if isinstance(data, dict) else None
    if isinstance(supported, list) and all(isinstance(v, str) for v in supported):
        return supported
    return None


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
