"""The 2025-11-25 sessions of the HTTP listener: each bound to the principal that opened it (anyone
else is told it does not exist), ended by DELETE or after `idle_seconds` with no request in flight,
at most `limit` open at once (the MCP SDK's session manager's rules, kept), and at most `per_principal`
of one principal (SPEC §10: no caller locks out another); likewise its long-lived streams.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from ...owner import Owner, PrincipalKey, principal_key
from ..clients import Client, Connection
from ..errors import OverCap
from .sse import Polled, Stream

IDLE_SECONDS = 30 * 60
MAX_SESSIONS = 10_000
SESSIONS_PER_PRINCIPAL = 64
STREAMS_PER_PRINCIPAL = 16


# What a refused caller reads: the listener is full (503), or it holds its own bound (429).
TOO_MANY_SESSIONS = (503, "Too many open sessions")
TOO_MANY_OF_YOURS = (429, "Too many open sessions for this caller: end one (DELETE) first")
TOO_MANY_STREAMS = (429, "Too many open streams for this caller: close one first")


@dataclass(eq=False)
class HttpSession:
    id: str
    owner: Owner | None
    client: Client
    stream: Stream | None = None  # its GET stream, while one is open
    in_flight: int = 0  # requests being served (an open GET stream counts)
    last_active: float = field(default_factory=lambda: time.monotonic())  # (a clock tests set)
    ended: bool = False
    polled: Polled = field(default_factory=Polled)  # its streams closed for polling (SEP-1699)
    # Its requests being served (the connection core the stdio listener shares).
    connection: Connection = field(init=False)

    def __post_init__(self) -> None:
        self.connection = Connection(self.client)

    def begin(self) -> None:
        self.in_flight += 1

    def done(self) -> None:
        self.in_flight -= 1
        self.last_active = time.monotonic()


class Sessions:
    """The open sessions of one listener, and its principals' long-lived streams."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, limit: int = MAX_SESSIONS,
                 per_principal: int = SESSIONS_PER_PRINCIPAL,
                 streams_per_principal: int = STREAMS_PER_PRINCIPAL,
                 poll_seconds: float | None = None) -> None:
        self.idle_seconds = idle_seconds
        self.poll_seconds = poll_seconds  # a call's stream closed for polling after it (SEP-1699)
        self.limit = limit
        self.per_principal = per_principal
        self.streams_per_principal = streams_per_principal
        self._open: dict[str, HttpSession] = {}
        # Each principal's open sessions, oldest first; and its open streams (GET, listen).
        self._of: dict[PrincipalKey, dict[str, HttpSession]] = {}
        self._streams: dict[PrincipalKey, int] = {}

    def get(self, session_id: str) -> HttpSession | None:
        return self._open.get(session_id)

    def __len__(self) -> int:
        return len(self._open)

    def open(self, owner: Owner | None) -> HttpSession:
        """A new session for `owner`. A principal at its bound loses its own least recently used
        idle session; with none idle it is refused (OverCap 429), and so is anyone while `limit`
        sessions are open (503). Another principal's sessions are never touched."""
        key = principal_key(owner)
        mine = self._of.get(key)
        if mine is not None and len(mine) >= self.per_principal:
            idle = [s for s in mine.values() if s.in_flight == 0]
            if not idle:
                raise OverCap(*TOO_MANY_OF_YOURS)
            self.end(min(idle, key=lambda s: s.last_active))
        if len(self._open) >= self.limit:
            raise OverCap(*TOO_MANY_SESSIONS)
        session = HttpSession(uuid.uuid4().hex, owner, Client(None, http=True))
        self._open[session.id] = session
        self._of.setdefault(key, {})[session.id] = session
        return session

    def end(self, session: HttpSession) -> None:
        """Forget the session (its id answers 404 from now on) and let go of what it held."""
        self._open.pop(session.id, None)
        key = principal_key(session.owner)
        mine = self._of.get(key)
        if mine is not None:
            mine.pop(session.id, None)
            if not mine:
                del self._of[key]
        if session.ended:
            return
        session.ended = True
        if session.stream is not None:
            session.stream.close()
        session.connection.close()  # what it has running is cancelled, as when stdin closes

    def hold_stream(self, owner: Owner | None) -> None:
        """One more long-lived stream (a session's GET stream, a `subscriptions/listen` request)
        of `owner`'s principal; OverCap 429 at its bound. `release_stream` when it ends."""
        key = principal_key(owner)
        held = self._streams.get(key, 0)
        if held >= self.streams_per_principal:
            raise OverCap(*TOO_MANY_STREAMS)
        self._streams[key] = held + 1

    def release_stream(self, owner: Owner | None) -> None:
        key = principal_key(owner)
        left = self._streams.get(key, 1) - 1
        if left > 0:
            self._streams[key] = left
        else:
            self._streams.pop(key, None)

    async def expire(self) -> None:
        """Run until cancelled: end every session idle for `idle_seconds`."""
        interval = min(60.0, self.idle_seconds / 4)
        while True:
            await asyncio.sleep(interval)
            cutoff = time.monotonic() - self.idle_seconds
            for session in [s for s in self._open.values()
                            if s.in_flight == 0 and s.last_active < cutoff]:
                self.end(session)

    def close(self) -> None:
        for session in list(self._open.values()):
            self.end(session)
