"""Identical `pdp:` requests in flight share one (SPEC §16): concurrent identical calls of one caller
make one request to the decision point and all get its decision; another caller's, or other
arguments, make their own. The cache's lifetime runs on the clock it is given."""

from __future__ import annotations

import anyio
import pytest

from mcp_preconditions import Credentials, Guard, LiveSources, Principal, parse_policy
from mcp_preconditions.outcomes import Decision
from mcp_preconditions.pdp.live import PdpLive
from tests.fixtures.clock import FakeClock
from tests.fixtures.fake_pdp import FakePdp

pytestmark = pytest.mark.anyio

POLICY = b"""
[pdp.corp]
url = "https://pdp.example.com"
subject_claims = ["roles"]
[tools.add]
requirements = ["pdp:corp"]
"""


def caller(sub: str) -> Credentials:
    return Credentials(principal=Principal.from_claims({"sub": sub, "roles": ["operator"]}))


def guard(pdp: FakePdp, clock: FakeClock | None = None) -> Guard:
    live = PdpLive(transport=pdp.transport(), clock=clock or FakeClock())
    return Guard(parse_policy(POLICY, "p.toml"), {}, live=LiveSources(pdp=live), entry_points=False)


async def _calls(g: Guard, pdp: FakePdp, calls: list[tuple[str, dict[str, int]]]) -> list[Decision]:
    found: list[Decision | None] = [None] * len(calls)

    async def one(i: int) -> None:
        sub, arguments = calls[i]
        found[i] = await g.check("add", caller(sub), arguments)

    async with anyio.create_task_group() as tasks:
        for i in range(len(calls)):
            tasks.start_soon(one, i)
        with anyio.fail_after(10):
            while len(pdp.asked) < len({(s, tuple(a.items())) for s, a in calls}):
                await pdp.arrived.wait()
                pdp.arrived = anyio.Event()
        await anyio.wait_all_tasks_blocked()
        pdp.release.set()
    return [d for d in found if d is not None]


async def test_identical_calls_in_flight_share_one_request() -> None:
    pdp = FakePdp(mode="hang")
    decisions = await _calls(guard(pdp), pdp, [("alice", {"a": 1})] * 5)
    assert [d.allowed for d in decisions] == [True] * 5
    assert len(pdp.asked) == 1


async def test_other_callers_and_other_arguments_are_asked_on_their_own() -> None:
    pdp = FakePdp(mode="hang")
    calls = [("alice", {"a": 1}), ("bob", {"a": 1}), ("alice", {"a": 2}), ("alice", {"a": 1})]
    decisions = await _calls(guard(pdp), pdp, calls)
    assert len(decisions) == 4
    assert sorted((b["evaluations"][0]["subject"]["id"],
                   b["evaluations"][0]["resource"]["properties"]["arguments"]["a"])
                  for b in pdp.asked) == [("alice", 1), ("alice", 2), ("bob", 1)]


async def test_a_decision_is_kept_for_cache_seconds_then_asked_again() -> None:
    pdp, clock = FakePdp(), FakeClock()
    g = guard(pdp, clock)
    await g.check("add", caller("alice"), {})
    clock.advance(29.9)
    await g.check("add", caller("alice"), {})
    assert len(pdp.asked) == 1
    clock.advance(0.1)
    await g.check("add", caller("alice"), {})
    assert len(pdp.asked) == 2


async def test_cache_seconds_0_asks_every_time() -> None:
    pdp = FakePdp()
    policy = POLICY.replace(b'subject_claims', b'cache_seconds = 0\nsubject_claims')
    g = Guard(parse_policy(policy, "p.toml"), {}, entry_points=False,
              live=LiveSources(pdp=PdpLive(transport=pdp.transport())))
    for _ in range(3):
        assert (await g.check("add", caller("alice"), {})).allowed
    assert len(pdp.asked) == 3
