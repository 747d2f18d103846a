"""`subscriptions/listen` for the gateway's 2026-07-28 clients: each listen request is a stream that
is acknowledged first, then carries the change notifications it asked for (list changes, updates of
the resources it names), each tagged with the request's id, until the client goes. What a server
sends one caller reaches that caller's streams alone (`publish` with an owner).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any

from .clients import Call
from .jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, RpcError

log = logging.getLogger("mcp_preconditions.gateway")

SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
MAX_STREAMS = 1024  # listen streams open at once; more are refused before their acknowledgement
# The flag a listen request sets for each list-change notification it wants.
_FLAGS = {"notifications/tools/list_changed": "toolsListChanged",
          "notifications/prompts/list_changed": "promptsListChanged",
          "notifications/resources/list_changed": "resourcesListChanged"}


class Listeners:
    """The open listen streams, and the notifications each one asked for."""

    def __init__(self) -> None:
        self._streams: dict[int, tuple[Call, dict[str, Any], frozenset[str], Hashable | None]] = {}

    async def serve(self, call: Call, owner: Hashable | None = None) -> None:
        """Acknowledge the listen request `call` (of `owner`'s: a caller), then deliver what it
        asked for until it is cancelled (the client closed the stream)."""
        if call.id is None:
            raise RpcError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= MAX_STREAMS:
            raise RpcError(INTERNAL_ERROR, "Subscription limit reached")
        asked = (call.params or {}).get("notifications")
        asked = asked if isinstance(asked, dict) else {}
        honored: dict[str, Any] = {flag: True for flag in _FLAGS.values() if asked.get(flag)}
        uris = [u for u in asked.get("resourceSubscriptions") or () if isinstance(u, str)]
        if uris:
            honored["resourceSubscriptions"] = uris
        meta = {SUBSCRIPTION_ID_META_KEY: call.id}
        key = id(call)
        self._streams[key] = (call, honored, frozenset(uris), owner)
        try:
            call.notify("notifications/subscriptions/acknowledged",
                        {"_meta": meta, "notifications": honored})
            await asyncio.Event().wait()  # until cancelled: a listen stream never ends by itself
        finally:
            del self._streams[key]

    def publish(self, method: str, params: dict[str, Any], owner: Hashable | None = None) -> None:
        """A change the servers reported: to every stream that asked for it (of `owner`'s alone,
        when it came on a caller's session)."""
        flag = _FLAGS.get(method)
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        if flag is None and uri is None:
            return
        for call, honored, uris, whose in list(self._streams.values()):
            if owner is not None and whose != owner:
                continue
            if (flag is not None and honored.get(flag)) or (uri is not None and uri in uris):
                meta = {SUBSCRIPTION_ID_META_KEY: call.id}
                call.notify(method, {"uri": uri, "_meta": meta} if uri is not None else {"_meta": meta})
