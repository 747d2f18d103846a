"""`feature:KEY` (SPEC §4): satisfied only by a flag that is boolean `true`; static policy flags win
over a live flag source; missing or non-boolean is unsatisfied, a source failure is `error`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_preconditions import ANONYMOUS, Guard, LiveSources, Outcome, Status, parse_policy
from mcp_preconditions.resolvers.base import CallContext

FLAGS = """
[features.flags]
"launch_window.open" = true
"telemetry.v2" = false
"""


class Flags:
    """An in-memory flag source: values by key, or an exception to raise."""

    name = "memory"

    def __init__(self, values: dict[str, Any], delay: float = 0.0) -> None:
        self.values = values
        self.delay = delay
        self.calls: list[tuple[str, str]] = []

    async def evaluate(self, key: str, context: CallContext) -> Any:
        self.calls.append((key, context.tool))
        if self.delay:
            await asyncio.sleep(self.delay)  # a source slow by design
        value = self.values.get(key)
        if isinstance(value, Exception):
            raise value
        return value


async def outcome(requirement: str, policy: str = FLAGS, flags: Flags | None = None) -> Outcome:
    g = Guard(parse_policy(policy.encode(), "p.toml"), {"t": [requirement]},
              live=LiveSources(flags=flags), entry_points=False)
    decision = await g.check("t", ANONYMOUS)
    assert decision.allowed is (decision.outcomes[0].status is Status.SATISFIED)
    return decision.outcomes[0]


async def test_a_true_flag_is_satisfied() -> None:
    assert await outcome("feature:launch_window.open") == Outcome.satisfied(
        "feature:launch_window.open", "flag 'launch_window.open' is true (policy)")


@pytest.mark.parametrize(("key", "reason"), [
    ("telemetry.v2", "flag 'telemetry.v2' is false (policy)"),
    ("missing", "flag 'missing' is not defined (policy)"),
    ("Launch_window.open", "flag 'Launch_window.open' is not defined (policy)"),
    ("launch_window.open ", "flag 'launch_window.open ' is not defined (policy)"),
    ("launch_windоw.open", "flag 'launch_windоw.open' is not defined (policy)"),
])
async def test_false_non_boolean_and_missing_flags_are_unsatisfied(key: str, reason: str) -> None:
    assert await outcome(f"feature:{key}") == Outcome.unsatisfied(f"feature:{key}", reason)


async def test_a_live_source_decides_keys_the_policy_does_not_set() -> None:
    flags = Flags({"beta": True, "off": False, "odd": "yes"})
    assert await outcome("feature:beta", flags=flags) == Outcome.satisfied(
        "feature:beta", "flag 'beta' is true (memory)")
    assert await outcome("feature:off", flags=flags) == Outcome.unsatisfied(
        "feature:off", "flag 'off' is false (memory)")
    assert await outcome("feature:odd", flags=flags) == Outcome.unsatisfied(
        "feature:odd", "flag 'odd' is not a boolean (memory: str)")
    assert await outcome("feature:gone", flags=flags) == Outcome.unsatisfied(
        "feature:gone", "flag 'gone' is not defined (memory)")
    assert flags.calls == [("beta", "t"), ("off", "t"), ("odd", "t"), ("gone", "t")]


async def test_static_flags_win_over_the_live_source() -> None:
    flags = Flags({"telemetry.v2": True})
    assert not (await outcome("feature:telemetry.v2", flags=flags)).ok
    assert flags.calls == []


async def test_a_failing_source_is_an_error() -> None:
    flags = Flags({"beta": ConnectionError("flagd unreachable")})
    assert await outcome("feature:beta", flags=flags) == Outcome.error(
        "feature:beta", "resolver 'feature' raised ConnectionError: flagd unreachable")


async def test_a_slow_source_times_out_as_an_error() -> None:
    policy = "[guard]\nlookup_timeout_seconds = 0.05\n"
    assert await outcome("feature:beta", policy, Flags({"beta": True}, delay=5)) == Outcome.error(
        "feature:beta", "resolver 'feature' timed out after 0.05 s")
