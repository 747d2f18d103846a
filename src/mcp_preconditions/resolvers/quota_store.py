"""Quota buckets: the rate algorithm (GCRA, a token bucket kept as one number) and the in-process
stores. The Redis store (quota_redis.py) runs the same rule in one Lua script.

A bucket holds `calls` units and gets one back every `per_seconds / calls`, continuously, never more
than `calls`. GCRA stores a bucket as its "theoretical arrival time" (TAT): the instant it will be
full again. A unit is there iff `TAT - now <= (calls - 1) * interval`; taking one adds `interval`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from ..errors import BackendError

NS = 1_000_000_000
# A bucket's key, flat (it is hashed on every call): (quota name, "global"), (quota name,
# "unidentified"), or (quota name, by, issuer, subject or client id).
Key = tuple[str, ...]
# Per bucket, the nanoseconds until it has a unit (0: it has one now), in the buckets' order.
Waits = list[int]


@dataclass(frozen=True, slots=True)
class Rate:
    """`calls` units, one back every `interval_ns` (rounded up: never faster than the policy says)."""

    calls: int
    interval_ns: int
    tolerance_ns: int  # (calls - 1) * interval_ns: how far ahead of now a TAT may be and still serve

    @classmethod
    def of(cls, calls: int, per_seconds: float) -> Rate:
        # Decimal of the written number: 0.1 s is 100,000,000 ns, not one more for binary noise.
        interval = max(1, math.ceil(Decimal(repr(per_seconds)) * NS / calls))
        return cls(calls, interval, (calls - 1) * interval)

    @classmethod
    def every(cls, calls: int, interval_ns: int) -> Rate:
        return cls(calls, interval_ns, (calls - 1) * interval_ns)


# One caller's bucket of one quota: (its key, the quota's rate). A plain tuple: one is built per
# quota per call.
Bucket = tuple[Key, Rate]


def gcra(tat: int, now: int, rate: Rate) -> tuple[int, int]:
    """(wait, next TAT) of a bucket whose TAT is `tat`: wait is 0 when a unit is there now (and the
    next TAT is the bucket after taking it), else the nanoseconds until one is."""
    if tat < now:
        tat = now  # a bucket never holds more than `calls` units
    wait = tat - now - rate.tolerance_ns
    return (wait if wait > 0 else 0), tat + rate.interval_ns


class QuotaStore(Protocol):
    """Where buckets live. `take` takes one unit from every bucket, or from none when one of them is
    empty, atomically; `peek` answers the same and takes nothing. Both raise when the store is down
    or slow (the guard makes that `error`). `refund` gives back what a `take` took; it is called only
    on a store that answered `take` at once, when a store taken after it refused the call."""

    name: str

    def take(self, buckets: Sequence[Bucket]) -> Waits | Awaitable[Waits]: ...

    def peek(self, buckets: Sequence[Bucket]) -> Waits | Awaitable[Waits]: ...

    def refund(self, buckets: Sequence[Bucket]) -> None: ...


class MemoryQuotaStore:
    """Buckets in this process, under one lock (threads and event loops alike). A Guard keeps one
    across reloads (`LiveSources.quota_memory`), so a new policy revision does not refill anyone.

    Bounded: a full bucket needs no entry, so entries whose bucket is full again are dropped when
    the store reaches `max_buckets` (at most one sweep a second). If it is still full, a caller
    without an entry is refused with BackendError (an `error`): never forget a bucket in use."""

    name = "memory"

    def __init__(self, *, clock: Callable[[], int] = time.monotonic_ns,
                 max_buckets: int = 100_000) -> None:
        self._clock = clock
        self._max = max_buckets
        self._tats: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._swept_at: int | None = None

    def peek(self, buckets: Sequence[Bucket]) -> Waits:
        return self.take(buckets, False)

    def take_one(self, key: Key, rate: Rate) -> int:
        """`take([(key, rate)])[0]`: the usual call, one quota, without the lists (`gcra` inline:
        this is every metered call's path)."""
        now = self._clock()
        tats = self._tats
        with self._lock:
            tat = tats.get(key, now)
            if tat < now:
                tat = now
            wait = tat - now - rate.tolerance_ns
            if wait > 0:
                return wait
            if len(tats) >= self._max and key not in tats:
                self._make_room([(key, rate)], now)
            tats[key] = tat + rate.interval_ns
            return 0

    def take(self, buckets: Sequence[Bucket], take: bool = True) -> Waits:
        """The waits of `buckets`; a unit of each taken when all have one (and `take`)."""
        now = self._clock()
        tats = self._tats
        with self._lock:
            if len(buckets) == 1:  # the usual call: one quota
                key, rate = buckets[0]
                wait, following = gcra(tats.get(key, now), now, rate)
                if take and not wait:
                    if len(tats) >= self._max and key not in tats:
                        self._make_room(buckets, now)
                    tats[key] = following
                return [wait]
            answers = [gcra(tats.get(key, now), now, rate) for key, rate in buckets]
            waits = [wait for wait, _ in answers]
            if take and not any(waits):
                if len(tats) + len(buckets) > self._max:
                    self._make_room(buckets, now)
                for (key, _), (_, following) in zip(buckets, answers, strict=True):
                    tats[key] = following
            return waits

    def _make_room(self, buckets: Sequence[Bucket], now: int) -> None:
        new = sum(1 for (key, _) in buckets if key not in self._tats)
        if len(self._tats) + new <= self._max:
            return
        if self._swept_at is None or now - self._swept_at >= NS:
            self._swept_at = now
            for key in [k for k, tat in self._tats.items() if tat <= now]:
                del self._tats[key]
        if len(self._tats) + new > self._max:
            raise BackendError(f"the memory quota store holds its maximum of {self._max} buckets "
                               "that are in use")

    def refund(self, buckets: Sequence[Bucket]) -> None:
        with self._lock:
            for key, rate in buckets:
                tat = self._tats.get(key)
                if tat is not None:
                    self._tats[key] = tat - rate.interval_ns

    def __len__(self) -> int:
        return len(self._tats)


class FixedQuotaStore:
    """Answers as though `used[NAME]` units (0 when not given) had just been taken from every
    bucket of quota NAME, and takes nothing: for `check` (a fresh store) and policy test cases
    (`quota_used`), where every tool of a case sees the same count."""

    def __init__(self, used: Mapping[str, int] | None = None,
                 name: str = "a fresh memory store") -> None:
        self.used = dict(used or {})
        self.name = name

    def take(self, buckets: Sequence[Bucket]) -> Waits:
        return [gcra(self.used.get(key[0], 0) * rate.interval_ns, 0, rate)[0]
                for key, rate in buckets]

    peek = take

    def refund(self, buckets: Sequence[Bucket]) -> None:
        """Nothing was taken."""


def fresh_quota_store() -> FixedQuotaStore:
    """The store of `check` and the explorer: every bucket full, nothing kept, no live Redis."""
    return FixedQuotaStore(name="a fresh memory store: no earlier calls are counted and none is kept")
