"""Resource subscriptions held at one server for the gateway's clients: one subscription there per
URI and whose it is, whoever holds it (2025-11-25 `resources/subscribe`, or a 2026-07-28 listen
stream naming the URI), released when the last client lets go, and made again when the upstream
reconnects. On a server with credentials a subscription is its caller's (SPEC §14): made as them,
on their own session (kept open meanwhile, with its GET stream for the updates) or their own
listen stream, so the `notifications/resources/updated` it produces is theirs alone; the gateway's
own session holds those of the servers without credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import anyio

from .upstream.caller_sessions import Sender
from .upstream.session import Upstream

log = logging.getLogger("mcp_preconditions.gateway")

ACK_SECONDS = 5.0  # how long a listen stream upstream may take to be acknowledged

# Whose a subscription is: None, the gateway's own session's (a server without credentials);
# else the caller's owner key (`Sender.owner`).
Key = tuple[Hashable | None, str]


class Subscriptions:
    """Which clients hold which resource URIs (and as whom), and the upstream's side of each."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._holders: dict[Key, set[int]] = {}  # (whose, URI) -> the clients holding it
        self._streams: dict[Key, anyio.CancelScope] = {}  # (whose, URI) -> its listen stream
        self._callers: dict[Hashable, Sender] = {}  # a caller's latest credential, to renew

    @property
    def modern(self) -> bool:
        """Whether the server speaks 2026-07-28 (subscriptions ride listen streams there)."""
        return self._upstream.modern

    def held_by_others(self, uri: str, key: int, caller: Sender | None = None) -> bool:
        return bool(self._holders.get(_key(caller, uri), set()) - {key})

    def note(self, uri: str, key: int, held: bool, caller: Sender | None = None) -> None:
        """Record a hold (or its release) that the caller took care of upstream."""
        whose = _key(caller, uri)
        holders = self._holders.setdefault(whose, set())
        if held:
            holders.add(key)
            if caller is not None:
                self._callers[caller.owner] = caller
                self._upstream.keep(caller.owner, True)
        else:
            holders.discard(key)
            if not holders:
                del self._holders[whose]
                if caller is not None and not self._holds(caller.owner):
                    self._callers.pop(caller.owner, None)
                    self._upstream.keep(caller.owner, False)

    async def hold(self, uri: str, key: int, caller: Sender | None = None) -> None:
        """Subscribe upstream (as `caller`, on a server with credentials), if no one holds `uri`
        that way yet; MCPError or an upstream error when the upstream refuses."""
        whose = _key(caller, uri)
        if whose not in self._holders or (self._upstream.modern and whose not in self._streams):
            await self._subscribe(uri, caller)
        self.note(uri, key, True, caller)

    async def release(self, uri: str, key: int, caller: Sender | None = None) -> None:
        """Let go of `uri`; the upstream is told when no one holds it (that way) any more."""
        self.note(uri, key, False, caller)
        if _key(caller, uri) not in self._holders:
            await self._unsubscribe(uri, caller)

    async def release_all(self, key: int) -> None:
        """A client went away: everything it held is released."""
        for owner, uri in [w for w, holders in self._holders.items() if key in holders]:
            caller = self._callers.get(owner) if owner is not None else None
            try:
                await self.release(uri, key, caller)
            except Exception as exc:  # the upstream keeps sending updates nobody gets: harmless
                log.warning("upstream %s: unsubscribing %s failed: %s", self._upstream.label, uri, exc)

    async def renew(self) -> None:
        """A new upstream session: subscribe again to everything held (the old session's
        subscriptions, and its callers' sessions, went with it), each as whom it was held."""
        self._streams.clear()
        for owner, uri in list(self._holders):
            try:
                await self._subscribe(uri, self._callers.get(owner) if owner is not None else None)
            except Exception as exc:
                log.warning("upstream %s: resubscribing %s failed: %s", self._upstream.label, uri, exc)

    def _holds(self, owner: Hashable) -> bool:
        return any(whose == owner for whose, _ in self._holders)

    # -- the upstream's side ---------------------------------------------------------------------
    async def _subscribe(self, uri: str, caller: Sender | None) -> None:
        upstream = self._upstream
        if not upstream.modern:
            if caller is None:
                await upstream.request("resources/subscribe", {"uri": uri}, timeout=ACK_SECONDS)
            else:
                upstream.keep(caller.owner, True)
                await upstream.request_as(caller, "resources/subscribe", {"uri": uri},
                                          timeout=ACK_SECONDS)
            return
        acked = anyio.Event()
        failure: list[BaseException] = []
        scope = anyio.CancelScope()
        self._streams[_key(caller, uri)] = scope
        upstream.spawn(lambda: self._listen(uri, caller, scope, acked, failure))
        with anyio.fail_after(ACK_SECONDS):
            await acked.wait()
        if failure:
            raise failure[0]

    async def _listen(self, uri: str, caller: Sender | None, scope: anyio.CancelScope,
                      acked: anyio.Event, failure: list[BaseException]) -> None:
        """A listen stream naming `uri` (as `caller`): its updates reach the gateway's clients
        through the upstream's notification hooks (a caller's: theirs alone)."""
        whose = _key(caller, uri)
        with scope:
            try:
                await self._upstream.listen({"resourceSubscriptions": [uri]}, acked.set, caller)
            except Exception as exc:
                failure.append(exc)
                log.warning("upstream %s: listening for %s: %s", self._upstream.label, uri, exc)
            finally:
                acked.set()
                if self._streams.get(whose) is scope:
                    del self._streams[whose]

    async def _unsubscribe(self, uri: str, caller: Sender | None) -> Any:
        scope = self._streams.pop(_key(caller, uri), None)
        if scope is not None:
            scope.cancel()
        elif not self._upstream.modern:
            if caller is None:
                await self._upstream.request("resources/unsubscribe", {"uri": uri},
                                             timeout=ACK_SECONDS)
            else:
                await self._upstream.request_as(caller, "resources/unsubscribe", {"uri": uri},
                                                timeout=ACK_SECONDS)


def _key(caller: Sender | None, uri: str) -> Key:
    return (caller.owner if caller is not None else None, uri)
