"""Single flight: concurrent callers of one key share one run of the work (an exchange, a refresh),
and a caller that gives up does not cancel it for the others. Flights belong to the event loop that
started them; a failure is shared by the callers of that flight and not remembered after it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Flights(Generic[T]):
    """The flights in progress, by key."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Task[T]] = {}
        self._lock = threading.Lock()

    async def once(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """`work()`'s result, run once for concurrent callers of `key`: (result, True) for the
        caller that ran it, (result, False) for those that joined."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._flights.get(key)
            led = task is None or task.get_loop() is not loop
            if led:
                task = loop.create_task(_run(work))
                self._flights[key] = task
        assert task is not None
        if led:
            task.add_done_callback(lambda done: self._landed(key, done))
        return await asyncio.shield(task), led

    def _landed(self, key: Hashable, task: asyncio.Task[T]) -> None:
        with self._lock:
            if self._flights.get(key) is task:
                del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved, so a flight nobody waits for any more is not reported

    def __len__(self) -> int:
        with self._lock:
            return len(self._flights)


async def _run(work: Callable[[], Awaitable[T]]) -> T:
    return await work()
