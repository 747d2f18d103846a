"""Where connected accounts keep things: single-use tickets (connect links, `state` values, sign-in
flows), each until its deadline, and sealed tokens per (caller, server). The protocols, and their
in-process implementation; `stores_redis.py` shares them between replicas.

Values are opaque bytes (sealed by the caller of the store). Memory is bounded: past the bound the
least recently used go first. Tickets may also be put for an owner (`put_for`: a caller's pending
links and flows), who keeps at most `limit` of them: the oldest beyond it are deleted, so no one
caller fills the store for everyone (SPEC §14).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from cachetools import LRUCache

MAX_TICKETS = 100_000
MAX_OWNERS = 100_000


class Tickets(Protocol):
    """Short-lived records read once: `take` returns a value at most once, whoever asks."""

    async def put(self, key: str, value: bytes, ttl: float) -> None: ...

    async def get(self, key: str) -> bytes | None: ...

    async def take(self, key: str) -> bytes | None: ...

    async def delete(self, key: str) -> None: ...

    async def put_for(self, owner: str, key: str, value: bytes, ttl: float, limit: int) -> None:
        """`put`, as one of `owner`'s tickets: of those still there, the oldest beyond `limit`
        are deleted."""
        ...


class Vault(Protocol):
    """Sealed values per owner (a caller's digest) and name (a server key)."""

    async def save(self, owner: str, name: str, value: bytes) -> None: ...

    async def load(self, owner: str, name: str) -> bytes | None: ...

    async def remove(self, owner: str, name: str) -> bool: ...

    async def all(self, owner: str) -> dict[str, bytes]: ...


class MemoryTickets:
    """Tickets in this process, each until its deadline (monotonic clock)."""

    def __init__(self, max_entries: int = MAX_TICKETS, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: LRUCache[str, tuple[bytes, float]] = LRUCache(maxsize=max_entries)
        # An owner's tickets (`put_for`), oldest first, each with its deadline.
        self._owned: LRUCache[str, OrderedDict[str, float]] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()
        self._clock = clock

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        with self._lock:
            self._entries[key] = (value, self._clock() + ttl)

    async def put_for(self, owner: str, key: str, value: bytes, ttl: float, limit: int) -> None:
        now = self._clock()
        with self._lock:
            self._entries[key] = (value, now + ttl)
            keys = self._owned.get(owner)
            if keys is None:
                keys = self._owned[owner] = OrderedDict()
            keys[key] = now + ttl
            keys.move_to_end(key)
            for gone in [k for k, deadline in keys.items() if deadline <= now or k not in self._entries]:
                del keys[gone]  # used, expired or pushed out: no longer the owner's
            while len(keys) > limit:
                self._entries.pop(keys.popitem(last=False)[0], None)

    async def get(self, key: str) -> bytes | None:
        return self._read(key, False)

    async def take(self, key: str) -> bytes | None:
        return self._read(key, True)

    async def delete(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def _read(self, key: str, remove: bool) -> bytes | None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expired = entry[1] <= now
            if expired or remove:
                del self._entries[key]
            return None if expired else entry[0]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class MemoryVault:
    """Sealed values in this process, for at most `max_owners` owners."""

    def __init__(self, max_owners: int = MAX_OWNERS) -> None:
        self._owners: LRUCache[str, dict[str, bytes]] = LRUCache(maxsize=max_owners)
        self._lock = threading.Lock()

    async def save(self, owner: str, name: str, value: bytes) -> None:
        with self._lock:
            values = self._owners.get(owner)
            if values is None:
                values = self._owners[owner] = {}
            values[name] = value

    async def load(self, owner: str, name: str) -> bytes | None:
        with self._lock:
            values = self._owners.get(owner)
            return None if values is None else values.get(name)

    async def remove(self, owner: str, name: str) -> bool:
        with self._lock:
            values = self._owners.get(owner)
            if values is None or name not in values:
                return False
            del values[name]
            if not values:
                del self._owners[owner]
            return True

    async def all(self, owner: str) -> dict[str, bytes]:
        with self._lock:
            return dict(self._owners.get(owner) or {})
