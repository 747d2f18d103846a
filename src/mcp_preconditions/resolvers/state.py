"""`state:KEY`: satisfied iff the state provider reports KEY as `true` now.

Sources are tried in order: static policy values, Python callables (by key), then a shared backend
(Redis) that knows every key. Live results are cached for the policy's TTL (0 disables); failures are
never cached, and a failure or timeout is an `error` outcome.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from cachetools import TTLCache

from ..outcomes import Outcome
from ..requirements import body_of
from .base import CallContext

StateCallable = Callable[[], bool | Awaitable[bool]]


class StateSource(Protocol):
    """A live state backend shared by replicas. `get` returns True only for a true value; it
    raises when the backend is down or slow (the guard turns that into an `error` outcome)."""

    name: str

    async def get(self, key: str) -> bool: ...


class StateResolver:
    namespace = "state"
    forms = ("state:KEY",)

    def __init__(self, values: Mapping[str, bool], callables: Mapping[str, StateCallable] | None = None,
                 source: StateSource | None = None, ttl_seconds: float = 1.0,
                 call_timeout: float = 0.5, max_entries: int = 4096,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.values = dict(values)
        self.callables = dict(callables or {})
        self.source = source
        self.call_timeout = call_timeout
        self._cache: TTLCache[str, bool] | None = (
            TTLCache(maxsize=max_entries, ttl=ttl_seconds, timer=timer) if ttl_seconds > 0 else None)
        self._lock = threading.Lock()

    def validate(self, requirement: str) -> str | None:
        return None if body_of(requirement) else "state: needs a key (state:KEY)"

    def static_outcome(self, requirement: str) -> Outcome | None:
        key = body_of(requirement)
        if key in self.values:
            return self._outcome(requirement, key, self.values[key], "policy")
        if key not in self.callables and self.source is None:
            return Outcome.unsatisfied(requirement, f"state '{key}' is not known to any state source")
        return None

    @staticmethod
    def _outcome(requirement: str, key: str, value: bool, origin: str) -> Outcome:
        if value is True:
            return Outcome.satisfied(requirement, f"state '{key}' is true ({origin})")
        return Outcome.unsatisfied(requirement, f"state '{key}' is not true ({origin})")

    def resolve(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        static = self.static_outcome(requirement)
        if static is not None:
            return static
        key = body_of(requirement)
        origin = "callable" if key in self.callables else (self.source.name if self.source else "?")
        if self._cache is not None:
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None:
                return self._outcome(requirement, key, cached, f"{origin}, cached")
        return self._live(requirement, key, origin)

    async def _live(self, requirement: str, key: str, origin: str) -> Outcome:
        value = await self._fetch(key)
        if not isinstance(value, bool):
            return Outcome.error(requirement, f"state source {origin} returned "
                                              f"{type(value).__name__}, not a boolean")
        if self._cache is not None:
            with self._lock:
                self._cache[key] = value
        return self._outcome(requirement, key, value, origin)

    async def _fetch(self, key: str) -> Any:
        fn = self.callables.get(key)
        if fn is None:
            assert self.source is not None
            return await self.source.get(key)
        if inspect.iscoroutinefunction(fn):
            return await fn()
        # A plain callable may block (I/O): run it off the event loop so the lookup timeout holds.
        result = await asyncio.to_thread(fn)
        if inspect.isawaitable(result):
            result = await result
        return result

    def clear_cache(self) -> None:
        if self._cache is not None:
            with self._lock:
                self._cache.clear()
