"""Resource subscriptions held at one server for the gateway's clients: one subscription there per
URI, whoever holds it (2025-11-25 `resources/subscribe`, or a 2026-07-28 listen stream naming the
URI), released when the last client lets go, and made again when the upstream reconnects.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from .upstream.session import Upstream

log = logging.getLogger("mcp_preconditions.gateway")

ACK_SECONDS = 5.0  # how long a listen stream upstream may take to be acknowledged


class Subscriptions:
    """Which clients hold which resource URIs, and the upstream's side of each."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._holders: dict[str, set[int]] = {}  # URI -> the clients (or listen streams) holding it
        self._streams: dict[str, anyio.CancelScope] = {}  # URI -> its listen stream upstream

    @property
    def modern(self) -> bool:
        """Whether the server speaks 2026-07-28 (subscriptions ride listen streams there)."""
        return self._upstream.modern

    def held_by_others(self, uri: str, key: int) -> bool:
        return bool(self._holders.get(uri, set()) - {key})

    def note(self, uri: str, key: int, held: bool) -> None:
        """Record a hold (or its release) that the caller took care of upstream."""
        holders = self._holders.setdefault(uri, set())
        if held:
            holders.add(key)
        else:
            holders.discard(key)
            if not holders:
                del self._holders[uri]

    async def hold(self, uri: str, key: int) -> None:
        """Subscribe upstream, if no one holds `uri` yet; MCPError or an upstream error when the
        upstream refuses."""
        if uri not in self._holders or (self._upstream.modern and uri not in self._streams):
            await self._subscribe(uri)
        self.note(uri, key, True)

    async def release(self, uri: str, key: int) -> None:
        """Let go of `uri`; the upstream is told when no one holds it any more."""
        self.note(uri, key, False)
        if uri not in self._holders:
            await self._unsubscribe(uri)

    async def release_all(self, key: int) -> None:
        """A client went away: everything it held is released."""
        for uri in [u for u, holders in self._holders.items() if key in holders]:
            try:
                await self.release(uri, key)
            except Exception as exc:  # the upstream keeps sending updates nobody gets: harmless
                log.warning("upstream %s: unsubscribing %s failed: %s", self._upstream.label, uri, exc)

    async def renew(self) -> None:
        """A new upstream session: subscribe again to everything held (the old session's
        subscriptions went with it)."""
        self._streams.clear()
        for uri in list(self._holders):
            try:
                await self._subscribe(uri)
            except Exception as exc:
                log.warning("upstream %s: resubscribing %s failed: %s", self._upstream.label, uri, exc)

    # -- the upstream's side ---------------------------------------------------------------------
    async def _subscribe(self, uri: str) -> None:
        if not self._upstream.modern:
            await self._upstream.request("resources/subscribe", {"uri": uri}, timeout=ACK_SECONDS)
            return
        acked = anyio.Event()
        failure: list[BaseException] = []
        scope = anyio.CancelScope()
        self._streams[uri] = scope
        self._upstream.spawn(lambda: self._listen(uri, scope, acked, failure))
        with anyio.fail_after(ACK_SECONDS):
            await acked.wait()
        if failure:
            raise failure[0]

    async def _listen(self, uri: str, scope: anyio.CancelScope, acked: anyio.Event,
                      failure: list[BaseException]) -> None:
        """A listen stream naming `uri`: its updates reach the gateway's clients through the
        upstream's notification hook, like any notification."""
        with scope:
            try:
                await self._upstream.listen({"resourceSubscriptions": [uri]}, acked.set)
            except Exception as exc:
                failure.append(exc)
                log.warning("upstream %s: listening for %s: %s", self._upstream.label, uri, exc)
            finally:
                acked.set()
                if self._streams.get(uri) is scope:
                    del self._streams[uri]

    async def _unsubscribe(self, uri: str) -> Any:
        scope = self._streams.pop(uri, None)
        if scope is not None:
            scope.cancel()
        elif not self._upstream.modern:
            await self._upstream.request("resources/unsubscribe", {"uri": uri}, timeout=ACK_SECONDS)
