"""The credential stores against tiny reference models: random programs of puts, reads, single-use
takes, drops and clock steps run against MemoryTickets (connect links, states) and ExchangeCache
(exchanged tokens), each bounded (least recently used out) and with deadlines; tickets put for an
owner (a caller's pending links and flows: at most LIMIT each, the oldest dropped, issue 39.10;
the same model runs against Redis in tests/integration/test_credentials_redis_bounds.py); and
single flight, where any mix of concurrent callers and keys runs the work once per key and gives
each caller its key's answer.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from functools import partial
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from mcp_preconditions.credentials import Credential, ExchangeCache, MemoryTickets
from mcp_preconditions.credentials.flight import Flights

BOUND = 3
KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
STEPS = st.integers(min_value=0, max_value=40)


class Reference:
    """Entries with deadlines, least recently used first out past BOUND; a read of an expired
    entry removes it; `take` removes what it reads."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.now = 0

    def put(self, key: str, value: Any, deadline: int) -> None:
        self.entries[key] = (value, deadline)
        self.entries.move_to_end(key)
        while len(self.entries) > BOUND:
            self.entries.popitem(last=False)

    def read(self, key: str, remove: bool = False) -> Any:
        if key not in self.entries:
            return None
        value, deadline = self.entries[key]
        if deadline <= self.now or remove:
            del self.entries[key]
        else:
            self.entries.move_to_end(key)
        return None if deadline <= self.now else value


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


TICKET_OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.binary(min_size=1, max_size=3), st.integers(1, 60)),
    st.tuples(st.just("get"), KEYS), st.tuples(st.just("take"), KEYS),
    st.tuples(st.just("delete"), KEYS), st.tuples(st.just("wait"), STEPS)), max_size=60)


@given(TICKET_OPS)
def test_tickets_match_the_reference(ops: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        clock, ref = Clock(), Reference()
        tickets = MemoryTickets(BOUND, clock=clock)
        for op in ops:
            if op[0] == "put":
                await tickets.put(op[1], op[2], op[3])
                ref.put(op[1], op[2], ref.now + op[3])
            elif op[0] == "get":
                assert await tickets.get(op[1]) == ref.read(op[1])
            elif op[0] == "take":
                assert await tickets.take(op[1]) == ref.read(op[1], remove=True)
                assert await tickets.take(op[1]) is None  # single use: never twice
            elif op[0] == "delete":
                await tickets.delete(op[1])
                ref.entries.pop(op[1], None)
            else:
                clock.now += op[1]
                ref.now += op[1]
            assert len(tickets) == len(ref.entries) <= BOUND
    asyncio.run(run())


class Owned:
    """Tickets put for owners: each owner keeps at most LIMIT of those still there (neither taken
    nor expired), the oldest beyond it deleted."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, int]] = {}
        self.owners: dict[str, OrderedDict[str, int]] = {}
        self.now = 0

    def put_for(self, owner: str, key: str, value: bytes, ttl: int) -> None:
        self.entries[key] = (value, self.now + ttl)
        keys = self.owners.setdefault(owner, OrderedDict())
        keys[key] = self.now + ttl
        keys.move_to_end(key)
        for gone in [k for k, deadline in keys.items() if deadline <= self.now or k not in self.entries]:
            del keys[gone]
        while len(keys) > LIMIT:
            self.entries.pop(keys.popitem(last=False)[0], None)

    def read(self, key: str, remove: bool = False) -> bytes | None:
        found = self.entries.get(key)
        if found is None or found[1] <= self.now:
            self.entries.pop(key, None)
            return None
        if remove:
            del self.entries[key]
        return found[0]

    def live(self, owner: str) -> int:
        return sum(1 for k in self.owners.get(owner, {}) if self.read(k) is not None)


LIMIT = 3
OWNERS = st.sampled_from(["alice", "bob"])
OWNED_OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), OWNERS, KEYS, st.binary(min_size=1, max_size=3), st.integers(1, 60)),
    st.tuples(st.just("get"), OWNERS, KEYS), st.tuples(st.just("take"), OWNERS, KEYS),
    st.tuples(st.just("wait"), STEPS)), max_size=60)


@given(OWNED_OPS)
def test_tickets_put_for_an_owner_match_the_reference(ops: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        clock, ref = Clock(), Owned()
        tickets = MemoryTickets(1000, clock=clock)
        for op in ops:
            if op[0] == "wait":
                clock.now += op[1]
                ref.now += op[1]
                continue
            key = op[1] + op[2]  # an owner's own keys (a link's or state's id is random)
            if op[0] == "put":
                await tickets.put_for(op[1], key, op[3], op[4], LIMIT)
                ref.put_for(op[1], key, op[3], op[4])
            elif op[0] == "get":
                assert await tickets.get(key) == ref.read(key)
            else:
                assert await tickets.take(key) == ref.read(key, remove=True)
            for owner in ("alice", "bob"):
                assert ref.live(owner) <= LIMIT
    asyncio.run(run())


CACHE_OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.integers(-5, 60)), st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("drop"), KEYS, st.booleans()), st.tuples(st.just("wait"), STEPS)), max_size=60)


@given(CACHE_OPS)
@example([("put", "a", 1), ("put", "d", 1), ("put", "b", 1), ("get", "a"), ("drop", "d", False),
          ("put", "c", 1), ("get", "b")])  # a drop that leaves a newer entry does not touch it
def test_the_exchange_cache_matches_the_reference(ops: list[tuple[Any, ...]]) -> None:
    clock, ref = Clock(), Reference()
    cache = ExchangeCache(BOUND, clock=clock)
    made = 0
    for op in ops:
        key = (op[1].encode(), "server") if op[0] != "wait" else None
        if op[0] == "put":
            made += 1
            credential = Credential.bearer(f"t{made}", "token-exchange")
            cache.put(key, credential, ref.now + op[2])  # type: ignore[arg-type]
            if op[2] > 0:  # a deadline already past is not kept
                ref.put(op[1], credential, ref.now + op[2])
        elif op[0] == "get":
            assert cache.get(key) is ref.read(op[1])  # type: ignore[arg-type]
        elif op[0] == "drop":
            held = ref.entries.get(op[1])
            stale = held[0] if held is not None and op[2] else Credential.bearer("other", "x")
            cache.drop(key, stale)  # type: ignore[arg-type]
            if held is not None and stale is held[0]:  # a newer one stays where it was
                del ref.entries[op[1]]
        else:
            clock.now += op[1]
            ref.now += op[1]
        assert len(cache) == len(ref.entries) <= BOUND


@given(st.lists(KEYS, min_size=1, max_size=30), st.booleans())
def test_single_flight_runs_once_per_key_and_answers_each_caller(keys: list[str], fail: bool) -> None:
    async def run() -> None:
        flights: Flights[str] = Flights()
        runs: list[str] = []

        async def work(key: str) -> str:
            runs.append(key)
            await asyncio.sleep(0.001)
            if fail and key == keys[0]:
                raise LookupError(key)
            return key.upper()

        results = await asyncio.gather(*(flights.once(k, partial(work, k)) for k in keys),
                                       return_exceptions=True)
        assert sorted(runs) == sorted(set(keys))
        for key, result in zip(keys, results, strict=True):
            if fail and key == keys[0]:
                assert isinstance(result, LookupError)
            else:
                assert result[0] == key.upper()  # type: ignore[index]
        led = [r[1] for r in results if isinstance(r, tuple)]
        assert led.count(True) == len(set(keys) - ({keys[0]} if fail else set()))
        assert len(flights) == 0  # nothing kept once landed: a failure is asked again next time
    asyncio.run(run())
