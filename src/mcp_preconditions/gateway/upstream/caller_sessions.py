"""Each caller's own session with a 2025-11-25 server (SPEC §14: sessions follow identities). A server
binds a session to the identity that opened it, so a caller with a credential of their own gets a
session of their own: opened on first use with that credential, closed after IDLE_SECONDS idle, at
most MAX_SESSIONS per server (the least recently used idle one closed to make room). The gateway's
own session (its static headers) serves only its catalog and pings (`session.py`); everything else
for a caller goes on theirs, and what the server sends on it goes to them alone (`OwnerHooks`).

One caller's session is never used for another, and never closed while a request of its caller is
on it: a caller who cannot be given a session is refused, never anyone else. Sessions share one
pool of connections (a session is a header, not a connection), so a thousand callers cost a
thousand small objects, not a thousand sockets; one caller's requests hold at most half of it
(`Pool.share`), so another's are answered while theirs are held. A session the server ended (404
for its id: it ran nothing) is lost, and the next request opens a new one (the forwarding sends
the request once more). A session that holds its caller's subscriptions is kept (`keep`: never
swept or closed to make room), its GET stream open, on a pool of its own, for their updates.
A session is in use while its peer has a request pending (the peer tracks its requests anyway); its
idle time counts from the start of its last request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, NamedTuple, Protocol

import anyio

from ...credentials.credential import Credential
from ..errors import UpstreamUnavailable
from ..jsonrpc import RequestId
from .client import DEFAULT_BOUNDS, MAX_CONNECTIONS, Bounds, Pool
from .handshake import closed, initialize
from .http import HttpLink
from .peer import Dropped, OwnerHooks, Peer, ProgressHook

log = logging.getLogger("mcp_preconditions.gateway")

IDLE_SECONDS = 300.0
MAX_SESSIONS = 1000
SWEEP_SECONDS = 30.0


class Sender(Protocol):
    """Whom a request goes as (a call's `late.Outbound`): whose it is (issuer and subject: their
    session) and the headers it carries instead of the gateway's static headers."""

    @property
    def owner(self) -> Hashable: ...

    def headers(self) -> Mapping[str, str]: ...


class AsCaller(NamedTuple):
    """The simplest `Sender`: one caller with one credential, never renewed here."""

    owner: Hashable
    credential: Credential

    def headers(self) -> Mapping[str, str]:
        return self.credential.headers()


class _Session:
    """One caller's session. It is in use (`busy`) while its peer has a request of its caller
    pending: the peer's own bookkeeping, kept by the request itself, not a count kept around it.
    `used`: when its last request started."""

    __slots__ = ("link", "lost", "peer", "used")

    def __init__(self, peer: Peer, link: HttpLink, used: float) -> None:
        self.peer = peer
        self.link = link
        self.lost = link.lost  # (read on every request)
        self.used = used

    @property
    def busy(self) -> bool:
        return self.peer.busy

    @property
    def live(self) -> bool:
        return not self.lost.is_set() and not self.peer.closed


class CallerSessions:
    """The callers' sessions with one server, for as long as the gateway's own session lasts."""

    def __init__(self, url: str, label: str, hooks: OwnerHooks, bounds: Bounds = DEFAULT_BOUNDS,
                 *, limit: int = MAX_SESSIONS, idle: float = IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 connections: int = MAX_CONNECTIONS,
                 dropped: Callable[[Dropped], None] | None = None) -> None:
        self._url = url
        self._label = label
        self._hooks = hooks  # what the server sends on a caller's session: to that caller alone
        self._dropped = dropped
        # One sequence of request ids for every session on the shared connections: no two
        # callers' requests on one connection ever carry the same id.
        self._ids = itertools.count(1)
        self._bounds = bounds
        self._pool = Pool(url, bounds=bounds, limit=connections)
        self._streams = Pool(url, bounds=bounds, limit=limit)  # GET streams: one per session
        self._kept: set[Hashable] = set()  # callers whose sessions hold subscriptions
        self.limit = limit
        self.idle = idle
        self._clock = clock
        self._sessions: OrderedDict[Hashable, _Session] = OrderedDict()  # least recently used first
        self._opening: dict[Hashable, asyncio.Task[_Session]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def request(self, caller: Sender, method: str, params: Mapping[str, Any] | None, *,
                timeout: float, on_progress: ProgressHook | None = None,
                origin: object | None = None) -> Awaitable[dict[str, Any]]:
        """One request of `caller`'s on their own session (opened now if they have none), with
        their credential. UpstreamChallenged when the server refuses that credential (at the
        handshake or the request: either way nothing ran); UpstreamSessionGone when the server
        ended the session (404 for its id: nothing ran), which is then lost, so the next request
        opens a new one (the forwarding sends it once more: `Forward.send`). The session is in use
        while the request is pending on its peer (from before anything is sent until it ends).
        Not a coroutine of its own on a live session: the awaitable of the peer's request itself,
        so nothing here is kept around the request (every await of it passes one layer fewer).
        `origin`: whom it is made for (what the server asks on its stream goes to them)."""
        owner = caller.owner
        session = self._sessions.get(owner)  # `_session`'s first look, inline: every call
        if session is None or session.lost.is_set() or session.peer.closed:  # (`live`, inline)
            return self._first(caller, method, params, timeout, on_progress, origin)
        self._sessions.move_to_end(owner)
        session.used = self._clock()  # its last use: when this request starts
        return session.peer.request(method, params, timeout=timeout, on_progress=on_progress,
                                    headers=caller.headers(), origin=origin)

    async def _first(self, caller: Sender, method: str, params: Mapping[str, Any] | None,
                     timeout: float, on_progress: ProgressHook | None, origin: object | None
                     ) -> dict[str, Any]:
        """`request` with no live session at hand: one opened (or joined) first."""
        session = await self._session(caller, timeout)
        session.used = self._clock()
        return await session.peer.request(method, params, timeout=timeout,
                                          on_progress=on_progress,
                                          headers=caller.headers(), origin=origin)

    async def _session(self, caller: Sender, timeout: float) -> _Session:
        owner = caller.owner
        found = self._sessions.get(owner)
        if found is not None:
            if found.live:
                self._sessions.move_to_end(owner)
                return found
            self._forget(owner, found)
        opening = self._opening.get(owner)
        if opening is None:  # concurrent first calls of one caller share one handshake
            self._make_room()
            opening = asyncio.get_running_loop().create_task(self._open(caller, timeout))
            self._opening[owner] = opening
            opening.add_done_callback(lambda done: self._opened(owner, done))
        return await asyncio.shield(opening)

    def _opened(self, owner: Hashable, task: asyncio.Task[_Session]) -> None:
        if self._opening.get(owner) is task:
            del self._opening[owner]
        if not task.cancelled():
            task.exception()  # retrieved: its waiters have it, or nobody waits any more

    async def _open(self, caller: Sender, timeout: float) -> _Session:
        holder: list[Peer] = []

        def received(message: Any, via: RequestId | None = None) -> None:
            holder[0].received(message, via)
        link = HttpLink(self._url, caller.headers(), received, self._label,
                        self._bounds, pool=self._pool, owner=caller.owner, streams=self._streams)
        peer = Peer(link, self._label, _nobody, _nothing, owner=caller.owner, for_owner=self._hooks,
                    ids=self._ids)
        if self._dropped is not None:
            peer.dropped = link.dropped = self._dropped
        holder.append(peer)
        try:
            await initialize(peer, link, timeout)
        except BaseException:
            await closed(peer, link)
            raise
        session = _Session(peer, link, self._clock())
        self._sessions[caller.owner] = session
        if caller.owner in self._kept:
            link.listen()
        return session

    def keep(self, owner: Hashable, kept: bool) -> None:
        """`owner`'s session holds subscriptions (`kept`): it is kept open, never swept or closed
        to make room, and its GET stream (where the server sends their updates) is open; or no
        longer holds any."""
        if not kept:
            self._kept.discard(owner)
            return
        self._kept.add(owner)
        session = self._sessions.get(owner)
        if session is not None and session.live:
            session.link.listen()

    def _make_room(self) -> None:
        """Below the bound before one more is opened: the least recently used idle session
        closes; if every one is in use, this caller is refused (never another's closed)."""
        while len(self._sessions) + len(self._opening) >= self.limit:
            idle = next((o for o, s in self._sessions.items()
                         if not s.busy and o not in self._kept), None)
            if idle is None:
                raise UpstreamUnavailable(f"{self.limit} callers' sessions with it are in use")
            self._forget(idle, self._sessions[idle])

    def _forget(self, owner: Hashable, session: _Session) -> None:
        if self._sessions.get(owner) is session:
            del self._sessions[owner]
        task = asyncio.get_running_loop().create_task(closed(session.peer, session.link))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def sweep(self) -> int:
        """Close the sessions idle for `idle` seconds or more; how many."""
        now = self._clock()
        old = [(o, s) for o, s in self._sessions.items()
               if not s.busy and o not in self._kept and now - s.used >= self.idle]
        for owner, session in old:
            self._forget(owner, session)
        return len(old)

    async def run(self) -> None:
        """Sweep idle sessions until cancelled."""
        while True:
            await anyio.sleep(min(SWEEP_SECONDS, self.idle / 2))
            self.sweep()

    async def close(self) -> None:
        """The gateway's own session is over: every caller's session ends too (shielded)."""
        for task in self._opening.values():
            task.cancel()
        sessions = list(self._sessions.values())
        self._sessions.clear()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*(closed(s.peer, s.link) for s in sessions), *self._closing,
                                 return_exceptions=True)
        self._pool.close()
        self._streams.close()


async def _nobody(method: str, _params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(f"a caller's session sends {method} to its caller (OwnerHooks)")


def _nothing(_method: str, _params: dict[str, Any]) -> None:
    raise AssertionError("a caller's session notifies its caller (OwnerHooks)")
