"""Exchanged credentials, kept per (hash of the subject token, server) until a deadline, at most
`max_entries` (least recently used first out), and obtained once for concurrent calls of one caller
(single flight): a burst of calls with one token costs one exchange.

The key holds the token's sha256, never the token. Failures are never kept: the next call asks again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable

from cachetools import LRUCache

from .credential import Credential
from .flight import Flights

Key = tuple[bytes, str]  # (sha256 of the subject token, server key)
DEFAULT_MAX_ENTRIES = 10_000


class ExchangeCache:
    """Credentials by key, each until its own deadline (wall clock, like `exp`). Thread safe."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._entries: LRUCache[Key, tuple[Credential, float]] = LRUCache(maxsize=max_entries)
        self._flights: Flights[Credential] = Flights()
        self._lock = threading.Lock()
        self._clock = clock

    def get(self, key: Key) -> Credential | None:
        with self._lock:
            try:
                credential, deadline = self._entries[key]
            except KeyError:
                return None
            if deadline <= self._clock():
                del self._entries[key]
                return None
            return credential

    def put(self, key: Key, credential: Credential, deadline: float) -> None:
        """Keep `credential` until `deadline`; one already past it is not kept."""
        if deadline <= self._clock():
            return
        with self._lock:
            self._entries[key] = (credential, deadline)

    def drop(self, key: Key, stale: Credential) -> None:
        """Forget the entry if it still holds `stale` (a server refused it); a newer one stays."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0].same(stale):
                del self._entries[key]

    async def once(self, key: Key, obtain: Callable[[], Awaitable[tuple[Credential, float]]]
                   ) -> tuple[Credential, bool]:
        """The credential `obtain` gets (and keeps until the deadline it gives), run once for
        concurrent callers of one key: (credential, True) for the call that ran it, (credential,
        False) for those that joined it."""
        async def fly() -> Credential:
            credential, deadline = await obtain()
            self.put(key, credential, deadline)
            return credential

        return await self._flights.once(key, fly)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def max_entries(self) -> int:
        return int(self._entries.maxsize)
