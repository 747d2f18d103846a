"""The 2025-11-25 sessions of the HTTP listener: each bound to the principal that opened it (anyone
else is told it does not exist), ended by DELETE or after `idle_seconds` with no request in flight,
and at most `limit` open at once (the MCP SDK's session manager's rules, kept).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from .clients import Client
from .connection import Connection
from .sse import Stream

IDLE_SECONDS = 30 * 60
MAX_SESSIONS = 10_000
# Who a session belongs to: (client id, issuer, subject) of the verified caller; None without [auth].
Owner = tuple[str, str | None, str | None]


@dataclass(eq=False)
class HttpSession:
    id: str
    owner: Owner | None
    client: Client
    stream: Stream | None = None  # its GET stream, while one is open
    in_flight: int = 0  # requests being served (an open GET stream counts)
    last_active: float = field(default_factory=time.monotonic)
    ended: bool = False
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
    """The open sessions of one listener."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, limit: int = MAX_SESSIONS) -> None:
        self.idle_seconds = idle_seconds
        self.limit = limit
        self._open: dict[str, HttpSession] = {}

    def get(self, session_id: str) -> HttpSession | None:
        return self._open.get(session_id)

    def __len__(self) -> int:
        return len(self._open)

    def open(self, owner: Owner | None) -> HttpSession | None:
        """A new session for `owner`, or None while `limit` sessions are open."""
        if len(self._open) >= self.limit:
            return None
        session = HttpSession(uuid.uuid4().hex, owner, Client(None, http=True))
        self._open[session.id] = session
        return session

    def end(self, session: HttpSession) -> None:
        """Forget the session (its id answers 404 from now on) and let go of what it held."""
        self._open.pop(session.id, None)
        if session.ended:
            return
        session.ended = True
        if session.stream is not None:
            session.stream.close()
        session.connection.close()  # what it has running is cancelled, as when stdin closes

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
