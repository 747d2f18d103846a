"""The quota plan across two stores (memory taken first, an awaited store last, refunds when the
last refuses or fails), the GCRA rule itself, and what a quota denial tells clients: `_meta` marks
it transient, and `Knowledge` (hence the filtering client and both agent adapters) never learns it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

from mcp_preconditions import (
    Decision,
    Guard,
    Identity,
    Knowledge,
    LiveSources,
    Outcome,
    Principal,
    Status,
    parse_policy,
)
from mcp_preconditions.client import DENIAL_ERRORS_META_KEY, TRANSIENT_META_KEY
from mcp_preconditions.errors import BackendError
from mcp_preconditions.integrations._calls import denial_error, denial_meta, denial_result
from mcp_preconditions.resolvers import MemoryQuotaStore
from mcp_preconditions.resolvers.quota import CompiledQuota, QuotaResolver
from mcp_preconditions.resolvers.quota_store import Bucket, FixedQuotaStore, Rate, Waits, gcra

ALICE = Identity(principal=Principal.from_claims({"sub": "alice"}))


def ran(taken: tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]) -> tuple[Outcome, ...]:
    """`asyncio.run` of a plan's answer that an awaited store made a coroutine."""
    assert inspect.iscoroutine(taken)
    outcomes: tuple[Outcome, ...] = asyncio.run(taken)
    return outcomes


class Remote:
    """An awaited store (as Redis is) that answers with `waits`, or raises."""

    name = "remote"

    def __init__(self, waits: Waits | None = None) -> None:
        self.waits = waits
        self.taken: list[Sequence[Bucket]] = []

    async def take(self, buckets: Sequence[Bucket]) -> Waits:
        if self.waits is None:
            raise BackendError("remote down")
        self.taken.append(buckets)
        return list(self.waits)

    async def peek(self, buckets: Sequence[Bucket]) -> Waits:
        return await self.take(buckets)

    def refund(self, buckets: Sequence[Bucket]) -> None:
        raise AssertionError("an awaited store is never refunded")


def plan(memory: MemoryQuotaStore, remote: Remote) -> tuple[QuotaResolver, list[str]]:
    quotas = {"r": CompiledQuota("r", Rate.of(2, 60), "subject", remote, 60),
              "m": CompiledQuota("m", Rate.of(2, 60), "subject", memory, 60)}
    return QuotaResolver(quotas), ["quota:r", "quota:m"]


@pytest.mark.parametrize(("remote", "status"), [(Remote([5 * 10**9]), Status.UNSATISFIED),
                                                (Remote(None), None)])
def test_when_the_awaited_store_refuses_or_fails_the_memory_unit_goes_back(
        remote: Remote, status: Status | None) -> None:
    memory = MemoryQuotaStore(clock=lambda: 0)
    resolver, requirements = plan(memory, remote)
    quota_plan = resolver.plan(requirements)
    assert [g for g in quota_plan.groups] == [(1,), (0,)]  # memory first, the awaited store last
    taken = quota_plan.take(ALICE)
    assert not isinstance(taken, tuple)
    if status is None:
        with pytest.raises(BackendError):
            ran(taken)
    else:
        outcomes = ran(taken)
        assert [o.status for o in outcomes] == [status, Status.SATISFIED]
        assert outcomes[0].retry_after_seconds == 5.0
    bucket: Bucket = (("m", "subject", "", "alice"), Rate.of(2, 60))
    assert [memory.take([bucket]) for _ in range(3)] == [[0], [0], [30 * 10**9]]  # both units back


def test_when_memory_refuses_the_awaited_store_is_only_looked_at() -> None:
    memory = MemoryQuotaStore(clock=lambda: 0)
    remote = Remote([0])
    resolver, requirements = plan(memory, remote)
    bucket: Bucket = (("m", "subject", "", "alice"), Rate.of(2, 60))
    memory.take([bucket])
    memory.take([bucket])
    outcomes = ran(resolver.plan(requirements).take(ALICE))
    assert [o.status for o in outcomes] == [Status.SATISFIED, Status.UNSATISFIED]
    assert "no unit taken" in outcomes[0].reason


@pytest.mark.parametrize(("calls", "interval", "taken_at", "now", "expected"), [
    (3, 10, [0, 0, 0], 0, (10, 40)),       # empty: the next unit in one interval
    (3, 10, [0, 0, 0], 10, (0, 40)),       # ... which is then there
    (3, 10, [0], 1000, (0, 1010)),         # a bucket never holds more than `calls`
    (1, 10, [], 0, (0, 10)),
])
def test_gcra(calls: int, interval: int, taken_at: list[int], now: int,
              expected: tuple[int, int]) -> None:
    rate = Rate.every(calls, interval)
    tat = 0
    for at in taken_at:
        wait, tat = gcra(tat, at, rate)
        assert wait == 0
    assert gcra(tat, now, rate) == expected


def test_rates_round_the_interval_up_never_faster_than_written() -> None:
    assert Rate.of(3, 1).interval_ns == 333_333_334
    assert Rate.of(10, 0.1).interval_ns == 10_000_000
    assert Rate.of(3, 3600).tolerance_ns == 2 * 1200 * 10**9


def test_a_fixed_store_answers_from_its_count_and_keeps_nothing() -> None:
    store = FixedQuotaStore({"q": 3})
    bucket: Bucket = (("q", "global"), Rate.of(3, 3600))
    assert store.take([bucket]) == [1200 * 10**9] == store.take([bucket])
    assert FixedQuotaStore().take([bucket]) == [0]


# --- what clients see -----------------------------------------------------------------------------
POLICY = b"""
[quotas.q]
calls = 1
per_seconds = 60
[tools.t]
requirements = ["env:prod", "quota:q"]
"""


def used_up(policy: bytes = POLICY) -> Guard:
    g = Guard(parse_policy(policy, "q.toml"), {},
              live=LiveSources(quota_memory=MemoryQuotaStore(clock=lambda: 0)), entry_points=False)
    g.decide("t", ALICE)
    return g


def test_the_denial_marks_a_used_up_quota_transient_and_knowledge_skips_it() -> None:
    g = used_up(POLICY.replace(b"[quotas", b'environment = ["prod"]\n[quotas'))
    decision = g.decide("t", ALICE)
    assert decision.unmet == ("quota:q",)
    assert denial_meta(decision) == {TRANSIENT_META_KEY: ["quota:q"]}
    result = denial_result(decision).model_dump(by_alias=True, mode="json")
    assert result["structuredContent"]["retry_after_seconds"] == 60.0
    assert result["content"][0]["text"].endswith("Retry after 60 s.")
    knowledge = Knowledge()
    assert knowledge.learn_denial(result["structuredContent"], meta=result["_meta"]) == ()
    error = denial_error(decision)
    assert error is not None
    assert knowledge.learn_denial(error.data) == ()
    assert knowledge.learned() == frozenset()


def test_a_denial_for_a_lasting_reason_names_only_it_and_is_learned() -> None:
    g = used_up(POLICY.replace(b"[quotas", b'environment = ["prod"]\n[quotas'))
    g.reload(parse_policy(POLICY, "q.toml"))  # env:prod no longer holds; the quota stays used up
    decision = g.decide("t", ALICE)
    assert decision.unmet == ("env:prod",)  # refused before the quota: it is not asked
    assert decision.outcome("quota:q") is None and decision.retry_after_seconds is None
    result = denial_result(decision).model_dump(by_alias=True, mode="json")
    knowledge = Knowledge()
    assert knowledge.learn_denial(result["structuredContent"], meta=result["_meta"]) == ("env:prod",)


def test_a_denial_naming_a_lasting_reason_and_a_quota_is_learned_but_never_its_quota() -> None:
    # Two unmet requirements, one a used-up quota (as a server whose quota sits in front of it, or
    # an older version of this one, may answer): the client learns the lasting one only.
    used = Outcome(requirement="quota:q", status=Status.UNSATISFIED, reason="used up",
                   transient=True, retry_after_seconds=60.0)
    decision = Decision("t", False, (Outcome.unsatisfied("env:prod", "no"), used))
    result = denial_result(decision).model_dump(by_alias=True, mode="json")
    knowledge = Knowledge()
    assert knowledge.learn_denial(result["structuredContent"], meta=result["_meta"]) == ("env:prod",)


def test_a_quota_store_error_is_listed_with_the_errors_and_as_transient() -> None:
    g = Guard(parse_policy(POLICY.replace(b"[quotas", b'environment = ["prod"]\n[quotas'), "q.toml"),
              {}, live=LiveSources(quotas=Remote(None)), entry_points=False)
    decision = g.decide("t", ALICE)
    assert not decision.allowed and decision.errors == ("quota:q",)
    assert decision.retry_after_seconds is None
    assert denial_meta(decision) == {DENIAL_ERRORS_META_KEY: ["quota:q"], TRANSIENT_META_KEY: ["quota:q"]}


class Deferred(Remote):
    """A store whose plain `take` returns an awaitable (so it is not known to be awaited until it
    answers) and that can give units back."""

    def __init__(self) -> None:
        super().__init__([0])
        self.refunded: list[Sequence[Bucket]] = []

    def take(self, buckets: Sequence[Bucket]) -> Any:
        return Remote.take(self, buckets)

    def refund(self, buckets: Sequence[Bucket]) -> None:
        self.refunded.append(buckets)


def test_a_store_that_answers_later_than_expected_is_still_both_or_neither() -> None:
    deferred, memory = Deferred(), MemoryQuotaStore(clock=lambda: 0)
    quotas = {"d": CompiledQuota("d", Rate.of(2, 60), "global", deferred, 60),
              "m": CompiledQuota("m", Rate.of(1, 60), "global", memory, 60)}
    quota_plan = QuotaResolver(quotas).plan(["quota:d", "quota:m"])
    first = ran(quota_plan.take(ALICE))
    assert [o.status for o in first] == [Status.SATISFIED, Status.SATISFIED]
    second = ran(quota_plan.take(ALICE))
    assert [o.status for o in second] == [Status.SATISFIED, Status.UNSATISFIED]
    assert len(deferred.taken) == 2 and len(deferred.refunded) == 1  # the second unit went back
