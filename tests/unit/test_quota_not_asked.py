"""A quota's store is asked only by a call every other requirement allows: a call refused for
another requirement (sync or awaited) and a listing never reach it, report no quota outcome (a
quota not checked is never `satisfied`), and count nothing in `quota_exhausted_total`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mcp_preconditions import (
    ANONYMOUS,
    CallContext,
    Credentials,
    Guard,
    Identity,
    LiveSources,
    Outcome,
    Principal,
    parse_policy,
)
from mcp_preconditions.resolvers import MemoryQuotaStore
from mcp_preconditions.resolvers.quota_store import Bucket, Waits
from mcp_preconditions.telemetry import Metrics

POLICY = b"""
[quotas.q]
calls = 2
per_seconds = 3600
[tools.launch]
requirements = ["auth:oauth2", "auth:claim:role:mc", "quota:q"]
[tools.slow]
requirements = ["quota:q", "slow:gate"]
[tools.only_quota]
requirements = ["quota:q"]
"""
ALICE = Identity(principal=Principal.from_claims({"sub": "alice", "role": "mc"}))
OBSERVER = Identity(principal=Principal.from_claims({"sub": "alice", "role": "observer"}))


class Counting:
    """A memory store that counts every question it is asked."""

    def __init__(self) -> None:
        self.name = "memory"
        self.store = MemoryQuotaStore(clock=lambda: 0)
        self.asked: list[str] = []

    def take(self, buckets: Sequence[Bucket]) -> Waits:
        self.asked.append("take")
        return self.store.take(buckets)

    def peek(self, buckets: Sequence[Bucket]) -> Waits:
        self.asked.append("peek")
        return self.store.peek(buckets)

    def refund(self, buckets: Sequence[Bucket]) -> None:
        self.store.refund(buckets)


class SlowGate:
    """`slow:gate`: an awaited resolver that says no unless the caller has the role."""

    namespace = "slow"

    def validate(self, requirement: str) -> str | None:
        return None if requirement == "slow:gate" else "only slow:gate"

    async def resolve(self, requirement: str, context: CallContext) -> Outcome:
        await asyncio.sleep(0)
        principal = context.identity.principal
        if principal is not None and principal.claims.get("role") == "mc":
            return Outcome.satisfied(requirement)
        return Outcome.unsatisfied(requirement, "closed")


def guard() -> tuple[Guard, Counting]:
    store = Counting()
    g = Guard(parse_policy(POLICY, "q.toml"), {}, resolvers=[SlowGate()], entry_points=False,
              live=LiveSources(quotas=store))
    return g, store


def test_a_call_refused_for_another_requirement_never_asks_the_store() -> None:
    g, store = guard()
    anonymous = asyncio.run(g.check("launch", ANONYMOUS))
    observer = g.decide("launch", OBSERVER)
    awaited = asyncio.run(g.check_identity("slow", OBSERVER))  # refused by an awaited lookup
    assert store.asked == []
    assert anonymous.unmet == ("auth:oauth2", "auth:claim:role:mc")
    assert observer.unmet == ("auth:claim:role:mc",) and awaited.unmet == ("slow:gate",)
    for denied in (anonymous, observer, awaited):
        assert not denied.allowed and denied.outcome("quota:q") is None
        assert denied.retry_after_seconds is None and denied.transient == frozenset()


def test_an_allowed_call_asks_once_and_reports_the_unit_it_took() -> None:
    g, store = guard()
    allowed = asyncio.run(g.check_identity("slow", ALICE))
    assert allowed.allowed and store.asked == ["take"]
    quota = allowed.outcome("quota:q")
    assert quota is not None and quota.ok and "takes one unit" in quota.reason
    assert [o.requirement for o in allowed.outcomes] == ["quota:q", "slow:gate"]  # the tool's order


def test_listing_never_asks_the_store_and_keeps_a_used_up_quota_listed() -> None:
    g, store = guard()
    assert [g.decide("only_quota", ALICE).allowed for _ in range(3)] == [True, True, False]
    store.asked.clear()
    alice, observer = Credentials(principal=ALICE.principal), Credentials(principal=OBSERVER.principal)
    names = ["launch", "slow", "only_quota"]
    assert asyncio.run(g.callable_tools(alice, names)) == names
    assert asyncio.run(g.callable_tools(observer, names)) == ["only_quota"]
    assert asyncio.run(g.callable_tools(ANONYMOUS, names)) == ["only_quota"]
    assert store.asked == []


def test_only_a_call_refused_by_its_quota_counts_as_exhausted() -> None:
    g, _ = guard()
    m = Metrics()
    m.declare("s", {name: g.requirements_for(name) for name in ("launch", "only_quota")})
    for _ in range(3):
        m.observe_decision("s", g.decide("launch", ALICE))  # allowed, allowed, used up
    for _ in range(5):  # used up as well, but refused for the role first: not counted
        m.observe_decision("s", g.decide("launch", OBSERVER))

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(f"mcp_preconditions_{name}", labels)

    assert value("quota_exhausted_total", quota="q") == 1
    assert value("unmet_total", requirement="quota:q") == 1
    assert value("unmet_total", requirement="auth:claim:role:mc") == 5
    assert value("decisions_total", server="s", tool="launch", result="denied") == 6
