"""The `pdp:` decision cache against a tiny reference model (SPEC §16): a call's decision point is
asked exactly when no decision for (issuer, subject, requirement, request) younger than
`cache_seconds` is kept; true and false are kept, errors never; a kept decision is the one the PDP
gave for that very request, never another caller's. And the LRU bound of DecisionCache.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import Credentials, Guard, LiveSources, Principal, Status, parse_policy
from mcp_preconditions.pdp.cache import DecisionCache
from mcp_preconditions.pdp.live import PdpLive
from tests.fixtures.clock import FakeClock
from tests.fixtures.fake_pdp import FakePdp

TTL = 30.0
POLICY = f"""
[pdp.corp]
url = "https://pdp.example.com"
cache_seconds = {TTL}
[tools.t]
requirements = ["pdp:corp"]
"""
CALLERS = ("alice", "bob")


def decide(item: dict[str, Any]) -> dict[str, Any]:
    """Alice may use any argument but 2; Bob only 1."""
    sub, n = item["subject"]["id"], item["resource"]["properties"]["arguments"]["n"]
    return {"decision": n != 2 if sub == "alice" else n == 1}


calls = st.tuples(st.sampled_from(CALLERS), st.integers(0, 3), st.booleans(),
                  st.sampled_from([0.0, 1.0, 29.0, 31.0]))


@settings(max_examples=60, deadline=None)
@given(st.lists(calls, max_size=25))
def test_the_cache_matches_the_reference(steps: list[tuple[str, int, bool, float]]) -> None:
    asyncio.run(_run(steps))


async def _run(steps: list[tuple[str, int, bool, float]]) -> None:
    clock = FakeClock()
    pdp = FakePdp(decide=decide)
    guard = Guard(parse_policy(POLICY.encode(), "p.toml"), {}, entry_points=False,
                  live=LiveSources(pdp=PdpLive(transport=pdp.transport(), clock=clock)))
    kept: dict[tuple[str, int], tuple[float, bool]] = {}  # the reference: (caller, n) -> kept
    for sub, n, failing, wait in steps:
        clock.advance(wait)
        pdp.mode = "status" if failing else "ok"
        before = len(pdp.asked)
        entry = kept.get((sub, n))
        fresh = entry is not None and clock() < entry[0]
        principal = Principal.from_claims({"sub": sub, "iss": "https://idp"})
        decision = await guard.check("t", Credentials(principal=principal), {"n": n})
        asked = len(pdp.asked) - before
        assert asked == (0 if fresh else 1)
        if fresh:
            assert entry is not None
            assert decision.allowed is entry[1]
        elif failing:
            assert decision.outcomes[0].status is Status.ERROR
        else:
            truth = decide({"subject": {"id": sub}, "resource": {"properties": {"arguments":
                                                                                {"n": n}}}})
            assert decision.allowed is truth["decision"]
            kept[(sub, n)] = (clock() + TTL, truth["decision"])


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans()), max_size=40))
def test_the_bound_drops_the_least_recently_used(ops: list[tuple[str, bool]]) -> None:
    cache: DecisionCache[str] = DecisionCache(bound=3, clock=FakeClock())
    order: list[str] = []  # the reference: least recently used first
    for key, put in ops:
        if put:
            cache.put(key, key.upper(), 10)
            order = [k for k in order if k != key] + [key]
            order = order[-3:]
        else:
            found = cache.get(key)
            assert found == (key.upper() if key in order else None)
            if key in order:
                order = [k for k in order if k != key] + [key]
        assert len(cache) == len(order)
