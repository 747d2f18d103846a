"""The decisions a decision point gave, reused (SPEC §16): true and false alike, never an error, for
the table's `cache_seconds`, at most 10,000 in all (the least recently used go first), keyed by
(issuer, subject, requirement, request digest) so never shared across callers. Time is the clock
the owner passes (`time.monotonic` by default; a fake one in tests).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

MAX_DECISIONS = 10_000
T = TypeVar("T")


class DecisionCache(Generic[T]):
    """Decisions by key, each until its own expiry."""

    def __init__(self, bound: int = MAX_DECISIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: LRUCache[Hashable, tuple[float, T]] = LRUCache(maxsize=bound)
        self._lock = threading.Lock()
        self.clock = clock

    def get(self, key: Hashable) -> T | None:
        """The decision kept for `key`, None when there is none or it expired (then dropped)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if self.clock() >= entry[0]:
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: Hashable, decision: T, seconds: float) -> None:
        """Keep `decision` for `seconds` (0: not kept)."""
        if seconds <= 0:
            return
        with self._lock:
            self._entries[key] = (self.clock() + seconds, decision)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
