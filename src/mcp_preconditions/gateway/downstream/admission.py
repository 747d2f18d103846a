"""Who may hold a connection to the gateway's HTTP listener, and for how long (SPEC §10, §14): at
most `connections` connections, plus HEALTH_RESERVE that may ask only for a health check; a
connection waiting for a request (just accepted, or kept alive after an answer) is closed unless
that request's headers are in within 5 s, its body within `header_seconds` more. A connection is
*fresh* until its first request's headers are in. One address holds at most `waiting_per_address`
fresh connections that have waited a second or more (a newcomer ends the longest-waiting one), and
never more than half the cap of fresh ones; at the cap a newcomer ends the connection that has
waited longest (a second or more: fresh first, then kept-alive) instead of being refused.
Deadlines are kept by `sweep`, on `clock`.

Why it is built this way: half-open connections (a client that connects and sends nothing, or half
a request) cost an attacker nothing. Refusing new connections at the cap, as the listener once did,
let 100 of them, reopened as they timed out, hold every slot (issue 39). One address cannot reach
the cap with fresh connections, so callers from elsewhere always get in; a connection serving a
request is never ended, nor a caller's kept-alive connections for its address's bound. The second
of grace is for proxies: every connection of a load balancer in front comes from one address, and a
burst of them, each with its request already sent, may be accepted before any is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from ...telemetry.metrics import RefusalReason
from .sessions import MAX_SESSIONS, SESSIONS_PER_PRINCIPAL, STREAMS_PER_PRINCIPAL

# Connections beyond the cap that may still ask for a health check (a load balancer's probe, an
# operator's curl); beyond these, a connection is refused as it is accepted (no fd held for long).
HEALTH_RESERVE = 8
WAITING_SECONDS = 5.0  # SPEC §14: a client that has sent no complete request within 5 s is closed
SWEEP_SECONDS = 0.5  # how often deadlines are looked at: one is kept to within this much
GRACE_SECONDS = 1.0  # a fresh connection younger than this is not ended to make room for another
Admitted = Literal["in", "reserve", "refused"]


@dataclass(frozen=True)
class Limits:
    """What HTTP clients may hold: a connection waiting for a request has its headers within
    `waiting_seconds` (at most `header_seconds`), then its body within `header_seconds`; at most
    `connections` connections, and as many requests under way, at once (beyond that
    HEALTH_RESERVE more connections may ask `/healthz` or `/readyz`, and anything else gets 503
    and is closed); one address holds at most `waiting_per_address` connections that have not
    had a request yet and have waited GRACE_SECONDS, and at most half of `connections` such
    fresh ones; at most `sessions` 2025-11-25 sessions, and per principal at most
    `sessions_per_principal` of them and `streams_per_principal` long-lived streams (GET,
    `subscriptions/listen`); a 2025-11-25 call's stream is closed for polling after `poll_seconds`
    without its answer (None: never, unless its server closes its own; SEP-1699)."""

    header_seconds: float = 10.0
    connections: int = 1000
    sessions: int = MAX_SESSIONS
    sessions_per_principal: int = SESSIONS_PER_PRINCIPAL
    streams_per_principal: int = STREAMS_PER_PRINCIPAL
    waiting_seconds: float = WAITING_SECONDS
    waiting_per_address: int = 32
    poll_seconds: float | None = None


DEFAULT_LIMITS = Limits()


class Member(Protocol):
    """A connection, as admission sees it: the address it came from, and how to end it."""

    address: str | None

    def expire(self) -> None:
        """Close the connection now (a deadline passed, or a newcomer needs its slot)."""


class Admission:
    """The listener's connections and their deadlines. A connection is admitted (`admit`), then
    alternates between waiting for a request (`waiting`) and serving one (`busy`, `done`), the
    body of the one it serves perhaps still to come (`body_pending`); `gone` when it closed. A
    connection is *fresh* until its first request's headers are in: the per-address bound counts
    fresh connections only, so a caller's kept-alive connections never give way to half-open ones
    from its own address."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS,
                 refused: Callable[[RefusalReason], None] = lambda _reason: None,
                 clock: Callable[[], float] = time.monotonic, reserve: int = HEALTH_RESERVE) -> None:
        self.limits = limits
        self.refused = refused
        self.clock = clock
        self.reserve_size = reserve
        self.head_seconds = min(limits.waiting_seconds, limits.header_seconds)
        self.ceiling = max(limits.waiting_per_address, limits.connections // 2)  # fresh, per address
        self.admitted: set[Member] = set()
        self.reserve: set[Member] = set()
        self.under_way = 0  # requests being served, every connection's
        self._busy: set[Member] = set()
        self._served: set[Member] = set()  # connections that have had a request (not fresh)
        # Since when each connection has waited; insertion order is that order (re-inserted when
        # it waits again), so the first entries are the oldest: a sweep stops at the first in time.
        self._waiting: dict[Member, float] = {}
        self._fresh_at: dict[str | None, dict[Member, None]] = {}  # by address, oldest first
        self._bodies: dict[Member, float] = {}

    def admit(self, member: Member) -> Admitted:
        """Whether `member`, just accepted, is in, in the health-check reserve, or refused (then
        counted as `over_cap`; the caller answers 503 and closes it). Room is made first (module
        docstring): its address's longest-waiting fresh connections end while that address is at
        its bound, and at the cap the connection of all that has waited longest."""
        now = self.clock()
        here = self._fresh_at.get(member.address)
        while here and (len(here) >= self.ceiling or (
                len(here) >= self.limits.waiting_per_address
                and now - self._waiting[next(iter(here))] >= GRACE_SECONDS)):
            self._evict(next(iter(here)))
        if len(self.admitted) >= self.limits.connections:
            oldest = self._longest_waiting(now)
            if oldest is not None:
                self._evict(oldest)
        if len(self.admitted) < self.limits.connections:
            self.admitted.add(member)
            admitted: Admitted = "in"
        elif len(self.reserve) < self.reserve_size:
            self.reserve.add(member)
            admitted = "reserve"
        else:
            self.refused("over_cap")
            return "refused"
        self.waiting(member)
        return admitted

    def _longest_waiting(self, now: float) -> Member | None:
        """The admitted connection to end for a newcomer at the cap: the one that has waited
        longest, fresh before kept-alive, and only one that has waited GRACE_SECONDS."""
        holders, served = self.admitted, self._served
        for fresh in (True, False):
            for member, since in self._waiting.items():
                if now - since < GRACE_SECONDS:
                    break  # (oldest first: the rest are younger still)
                if member in holders and (member not in served) is fresh:
                    return member
        return None

    def gated(self, member: Member) -> bool:
        """Whether the request `member` starts may only be a health check: it is in the reserve,
        or the cap of requests is under way."""
        return member in self.reserve or self.under_way >= self.limits.connections

    def waiting(self, member: Member) -> None:
        """`member` waits for a request from now: its headers are due within `head_seconds`."""
        self._not_waiting(member)
        self._waiting[member] = self.clock()
        if member not in self._served:
            self._fresh_at.setdefault(member.address, {})[member] = None

    def busy(self, member: Member) -> None:
        """A request's headers are in: it is served from now (no deadline while it is)."""
        self._not_waiting(member)
        self._served.add(member)
        if member not in self._busy:
            self._busy.add(member)
            self.under_way += 1

    def body_pending(self, member: Member) -> None:
        """The request served has more body to come: it is due within `header_seconds`."""
        self._bodies[member] = self.clock()

    def body_done(self, member: Member) -> None:
        self._bodies.pop(member, None)

    def done(self, member: Member) -> None:
        """The request served on `member` has its answer."""
        self._bodies.pop(member, None)
        if member in self._busy:
            self._busy.discard(member)
            self.under_way -= 1

    def gone(self, member: Member) -> None:
        """`member` closed (or is closing): it holds nothing any more. Idempotent."""
        self.done(member)
        self._not_waiting(member)
        self._served.discard(member)
        self.admitted.discard(member)
        self.reserve.discard(member)

    def sweep(self) -> None:
        """End every connection past its deadline: waiting for headers longer than
        `head_seconds`, or for a body longer than `header_seconds`."""
        now = self.clock()
        for deadlines, seconds in ((self._waiting, self.head_seconds),
                                   (self._bodies, self.limits.header_seconds)):
            while deadlines:
                member, since = next(iter(deadlines.items()))
                if now - since < seconds:
                    break
                self._evict(member)

    async def keep_time(self) -> None:
        """Sweep every SWEEP_SECONDS, until cancelled (a task of the listener's)."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.sweep()

    def _not_waiting(self, member: Member) -> None:
        if self._waiting.pop(member, None) is not None and member not in self._served:
            here = self._fresh_at[member.address]
            del here[member]
            if not here:
                del self._fresh_at[member.address]

    def _evict(self, member: Member) -> None:
        self.gone(member)
        member.expire()


__all__ = ["DEFAULT_LIMITS", "GRACE_SECONDS", "HEALTH_RESERVE", "Admission", "Admitted", "Limits", "Member"]
