"""The quota stores against a tiny reference model: a token bucket in exact fractions (`calls`
tokens, one back every `interval`, never more than `calls`). Random programs of clock steps, takes,
looks, two-bucket takes (both or neither) and bursts of concurrent takes at one instant run against
the memory store (threads) and the Redis store (a real redis-server, its clock injected), and
against the Guard (a call denied for its role never asks the store, let alone takes a unit).

The Redis store's test is interop, marked, with why: Redis is the component under test (the bucket's
Lua script and its clock), which no in-process stand-in would check; the others are the default
tier's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import Guard, Identity, LiveSources, Principal, parse_policy
from mcp_preconditions.resolvers import MemoryQuotaStore
from mcp_preconditions.resolvers.quota_redis import RedisQuotaStore
from mcp_preconditions.resolvers.quota_store import Bucket, Key, Rate, Waits
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.redis import RedisServer

MS = 1_000_000


class Reference:
    """One bucket, obviously: tokens refill continuously at 1 per `interval`, up to `calls`."""

    def __init__(self, calls: int, interval: int) -> None:
        self.calls, self.interval = calls, interval
        self.tokens, self.at = Fraction(calls), 0

    def _refill(self, now: int) -> None:
        self.tokens = min(Fraction(self.calls), self.tokens + Fraction(now - self.at, self.interval))
        self.at = now

    def wait(self, now: int) -> int:
        self._refill(now)
        return 0 if self.tokens >= 1 else int((1 - self.tokens) * self.interval)

    def take(self) -> None:
        self.tokens -= 1


def take_all(refs: Sequence[Reference], now: int) -> list[int]:
    """The reference's atomic take of several buckets: one token from each, or none."""
    waits = [r.wait(now) for r in refs]
    if not any(waits):
        for r in refs:
            r.take()
    return waits


RATES = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 6).map(lambda k: k * MS)),
                 min_size=3, max_size=3)
STEP = st.one_of(
    st.tuples(st.just("tick"), st.integers(0, 8).map(lambda k: k * MS // 4)),
    st.tuples(st.just("take"), st.integers(0, 2), st.integers(1, 6)),  # bucket, concurrent takers
    st.tuples(st.just("peek"), st.integers(0, 2)),
    st.tuples(st.just("both"), st.integers(0, 2), st.integers(0, 2)),
)
PROGRAMS = st.lists(STEP, min_size=1, max_size=30)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


Take = Callable[[list[Bucket]], Awaitable[Waits]]


async def check(program: list[tuple[Any, ...]], rates: list[tuple[int, int]], clock: Clock,
                take: Take, peek: Take, concurrently: bool = True) -> None:
    """Run `program` on a store (`take`, `peek`) and on the reference; every answer must agree.
    A burst is `n` takes at one instant, all in flight at once: the store must give exactly as many
    units as the reference has, and the refused ones the same wait."""
    prefix = uuid.uuid4().hex
    buckets: list[Bucket] = [((f"{prefix}{i}", "global"), Rate.every(c, t))
                             for i, (c, t) in enumerate(rates)]
    refs = [Reference(c, t) for c, t in rates]
    for step in program:
        if step[0] == "tick":
            clock.now += step[1]
        elif step[0] == "take":
            _, i, n = step
            answers = await asyncio.gather(*(take([buckets[i]]) for _ in range(n)))
            expected = sorted(take_all([refs[i]], clock.now)[0] for _ in range(n))
            assert sorted(w[0] for w in answers) == expected, step
        elif step[0] == "peek":
            assert await peek([buckets[step[1]]]) == [refs[step[1]].wait(clock.now)], step
        else:
            pair = sorted({step[1], step[2]})
            assert await take([buckets[i] for i in pair]) == take_all([refs[i] for i in pair],
                                                                      clock.now), step


def on_threads(call: Callable[[list[Bucket]], Waits]) -> Take:
    """A sync store's call on a worker thread, so that a burst's takes really overlap."""
    async def threaded(buckets: list[Bucket]) -> Waits:
        return await asyncio.to_thread(call, buckets)
    return threaded


@settings(max_examples=200, deadline=None)
@given(PROGRAMS, RATES, st.booleans())
def test_the_memory_store_is_the_reference_bucket(program: list[tuple[Any, ...]],
                                                 rates: list[tuple[int, int]], one: bool) -> None:
    """With `one`, a single bucket is taken by `take_one` (the guard's path for one memory quota)."""
    clock = Clock()
    store = MemoryQuotaStore(clock=clock)

    def take(buckets: list[Bucket]) -> Waits:
        return [store.take_one(*buckets[0])] if one and len(buckets) == 1 else store.take(buckets)
    asyncio.run(check(program, rates, clock, on_threads(take), on_threads(store.peek)))


@pytest.mark.interop
@settings(max_examples=60, deadline=None)
@given(PROGRAMS, RATES)
def test_the_redis_store_is_the_reference_bucket(redis_server: RedisServer,
                                                program: list[tuple[Any, ...]],
                                                rates: list[tuple[int, int]]) -> None:
    clock = Clock()

    async def run() -> None:
        # What is checked is the bucket, not Redis's speed: generous timeouts, so a loaded machine
        # never turns an answer into a (fail-closed) timeout here.
        connection = RedisStateSource(redis_server.url, connect_timeout=10, read_timeout=10)
        store = RedisQuotaStore(connection, "props:", clock=clock)
        try:
            await check(program, rates, clock, store.take, store.peek)
        finally:
            await connection.aclose()

    asyncio.run(run())


CALLERS = st.lists(st.tuples(st.sampled_from(["alice", "bob"]), st.booleans(),
                             st.integers(0, 4).map(lambda k: k * 250 * MS)), max_size=25)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), CALLERS)
def test_the_guard_takes_only_for_calls_every_other_requirement_allows(
        calls: int, program: list[tuple[str, bool, int]]) -> None:
    clock = Clock()
    policy = (f"[quotas.q]\ncalls = {calls}\nper_seconds = {calls}\n[tools.t]\n"
              'requirements = ["auth:claim:role:ops", "quota:q"]\n')
    store = Asked(clock=clock)
    guard = Guard(parse_policy(policy.encode(), "q.toml"), {}, entry_points=False,
                  live=LiveSources(quota_memory=store))
    refs = {who: Reference(calls, 1000 * MS) for who in ("alice", "bob")}
    for who, has_role, tick in program:
        clock.now += tick
        claims = {"sub": who, "role": "ops" if has_role else "guest"}
        store.asked = 0
        decision = guard.decide("t", Identity(principal=Principal.from_claims(claims)))
        room = refs[who].wait(clock.now) == 0
        assert decision.allowed == (has_role and room)
        assert store.asked == (1 if has_role else 0)  # a call refused for its role never asks
        if decision.allowed:
            refs[who].take()
        elif has_role:
            assert decision.unmet == ("quota:q",)
            assert decision.retry_after_seconds is not None and decision.retry_after_seconds > 0
        else:  # not asked: reported neither satisfied nor used up
            assert decision.unmet == ("auth:claim:role:ops",)
            assert decision.outcome("quota:q") is None


class Asked(MemoryQuotaStore):
    """The memory store, counting the questions it is asked."""

    asked = 0

    def take(self, buckets: Sequence[Bucket], take: bool = True) -> Waits:
        self.asked += 1
        return super().take(buckets, take)

    def take_one(self, key: Key, rate: Rate) -> int:
        self.asked += 1
        return super().take_one(key, rate)
