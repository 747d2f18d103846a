"""The clock seams of the code that expires or settles, driven by a fake clock (tests/fixtures/
clock.py) instead of waiting: the state resolver's TTL cache, and the policy reloader's settle time
(a file changed less than `settle` seconds ago is left for the next poll)."""

from __future__ import annotations

import os
from pathlib import Path

from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.guard import Guard
from mcp_preconditions.outcomes import Outcome
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from mcp_preconditions.resolvers.base import CallContext
from mcp_preconditions.resolvers.state import StateResolver
from tests.fixtures.clock import FakeClock


async def test_a_live_state_value_is_cached_for_its_ttl_by_the_resolvers_timer() -> None:
    clock = FakeClock()
    answers = iter([True, False])
    resolver = StateResolver({}, {"open": lambda: next(answers)}, ttl_seconds=5.0, timer=clock)
    context = CallContext(tool="t", identity=ANONYMOUS_IDENTITY, arguments={})

    async def decide() -> str:
        outcome = resolver.resolve("state:open", context)
        done = outcome if isinstance(outcome, Outcome) else await outcome
        return f"{done.status.value}: {done.reason}"

    assert await decide() == "satisfied: state 'open' is true (callable)"
    clock.advance(4.9)
    assert await decide() == "satisfied: state 'open' is true (callable, cached)"
    clock.advance(0.2)  # past the TTL: asked again
    assert await decide() == "unsatisfied: state 'open' is not true (callable)"


def test_a_policy_changed_within_the_settle_time_waits_for_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[tools.a]\nrequirements = ["auth:claim:role:admin"]\n', encoding="utf-8")
    guard = Guard(load_policy(path))
    clock = FakeClock(now=path.stat().st_ctime)
    reloader = PolicyReloader(guard, path, settle=1.0, clock=clock)
    path.write_text('[tools.a]\nrequirements = ["auth:claim:role:observer"]\n', encoding="utf-8")
    clock.now = path.stat().st_ctime + 0.5  # written half a settle time ago
    assert reloader.reload(settle=reloader.settle) is None
    assert list(guard.requirements_for("a")) == ["auth:claim:role:admin"]
    clock.advance(0.6)  # settled
    change = reloader.reload(settle=reloader.settle)
    assert change is not None and change.new_revision == guard.revision
    assert list(guard.requirements_for("a")) == ["auth:claim:role:observer"]
    assert os.stat(path).st_ctime < clock.now
