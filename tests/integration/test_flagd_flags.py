"""`feature:KEY` through OpenFeature with the real flagd provider in file mode.

Covers the evaluation context (subject, selected claims, tool), missing / disabled / non-boolean
flags, file edits picked up while running, a broken file failing closed, and global-state isolation.

In-process: the provider reads its file in this process; a test that edits it waits until the guard's
answer changes (the provider's own watcher notices the file), within WAIT_SECONDS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openfeature import api
from openfeature.provider.in_memory_provider import InMemoryFlag, InMemoryProvider
from openfeature.provider.no_op_provider import NoOpProvider

from mcp_preconditions import (
    Decision,
    Guard,
    Identity,
    PolicyError,
    PolicySource,
    Principal,
    Status,
    load_policy,
)
from mcp_preconditions.resolvers.feature_openfeature import OpenFeatureFlagSource
from tests.fixtures.flagd import FlagFile, boolean_flag, eventually_async, string_flag
from tests.fixtures.inprocess import WAIT_SECONDS

pytestmark = pytest.mark.integration
ALICE = Identity(principal=Principal.from_claims({"sub": "alice", "role": "commander",
                                                 "team": ["ops", "flight"], "secret": "x"}))
BOB = Identity(principal=Principal.from_claims({"sub": "bob", "role": "intern"}))


def write_policy(folder: Path, flags_path: str = "flags.json", extra: str = "",
                 claims: str = '["role", "team"]') -> PolicySource:
    policy = folder / "live.toml"
    policy.write_text(f"""
[features.openfeature]
path = "{flags_path}"
context_claims = {claims}
poll_interval_seconds = 0.05
{extra}
[tools.launch]
requirements = ["feature:launch_window.open"]
""")
    return load_policy(policy)


def guard_for(flag_file: FlagFile, tools: dict[str, Any] | None = None, extra: str = "") -> Guard:
    return Guard(write_policy(flag_file.path.parent, extra=extra), tools, entry_points=False)


async def outcome(guard: Guard, tool: str = "launch", who: Identity = ALICE) -> tuple[Status, str]:
    decision: Decision = await guard.check_identity(tool, who)
    return decision.outcomes[0].status, decision.outcomes[0].reason


async def becomes(guard: Guard, expected: tuple[Status, str]) -> None:
    """Until the guard's outcome is `expected` (the provider noticed the file), WAIT_SECONDS at
    most; the last outcome seen is what the assertion shows."""
    assert await eventually_async(lambda: outcome(guard), expected, WAIT_SECONDS) == expected


async def test_a_true_flag_satisfies_and_a_false_one_does_not(flag_file: FlagFile) -> None:
    flag_file.write({"launch_window.open": boolean_flag(True), "other": boolean_flag(False)})
    guard = guard_for(flag_file, {"other_tool": ["feature:other"]})
    assert await outcome(guard) == (Status.SATISFIED, "flag 'launch_window.open' is true (openfeature)")
    assert await outcome(guard, "other_tool") == (Status.UNSATISFIED, "flag 'other' is false (openfeature)")


async def test_missing_disabled_and_non_boolean_flags_are_unsatisfied(flag_file: FlagFile) -> None:
    flag_file.write({
        "off.switch": boolean_flag(True, state="DISABLED"),
        "colour": string_flag("blue"),
        "count": {"state": "ENABLED", "variants": {"n": 3}, "defaultVariant": "n"},
        "ratio": {"state": "ENABLED", "variants": {"r": 0.5}, "defaultVariant": "r"},
        "no.default": {"state": "ENABLED", "variants": {"on": True}, "defaultVariant": None},
    })
    tools = {name: [f"feature:{name}"] for name in ["nope", "off.switch", "colour", "count", "ratio",
                                                    "no.default"]}
    guard = guard_for(flag_file, tools)
    got = {name: await outcome(guard, name) for name in tools}
    assert got == {
        "nope": (Status.UNSATISFIED, "flag 'nope' is not defined (openfeature)"),
        "off.switch": (Status.UNSATISFIED, "flag 'off.switch' is not defined (openfeature)"),
        "colour": (Status.UNSATISFIED, "flag 'colour' is not a boolean (openfeature: str)"),
        "count": (Status.UNSATISFIED, "flag 'count' is not a boolean (openfeature: int)"),
        "ratio": (Status.UNSATISFIED, "flag 'ratio' is not a boolean (openfeature: float)"),
        "no.default": (Status.UNSATISFIED, "flag 'no.default' is not defined (openfeature)"),
    }


async def test_targeting_sees_subject_selected_claims_and_tool(flag_file: FlagFile) -> None:
    def rule(var: str, value: Any) -> dict[str, Any]:
        return {"if": [{"==": [{"var": var}, value]}, "on", "off"]}

    flag_file.write({
        "by.subject": boolean_flag(False, targeting=rule("targetingKey", "alice")),
        "by.claim": boolean_flag(False, targeting=rule("role", "commander")),
        "by.list.claim": boolean_flag(False, targeting={"if": [{"in": ["flight", {"var": "team"}]},
                                                              "on", "off"]}),
        "by.tool": boolean_flag(False, targeting=rule("tool", "launch_by_tool")),
        "leaks.unselected": boolean_flag(False, targeting=rule("secret", "x")),
    })
    tools = {"launch_by_tool": ["feature:by.tool"], "other_tool": ["feature:by.tool"],
             **{name: [f"feature:{name}"] for name in ["by.subject", "by.claim", "by.list.claim",
                                                       "leaks.unselected"]}}
    guard = guard_for(flag_file, tools)
    for tool in ["by.subject", "by.claim", "by.list.claim"]:
        assert (await outcome(guard, tool, ALICE))[0] is Status.SATISFIED, tool
        assert (await outcome(guard, tool, BOB))[0] is Status.UNSATISFIED, tool
    assert (await outcome(guard, "launch_by_tool", BOB))[0] is Status.SATISFIED
    assert (await outcome(guard, "other_tool", BOB))[0] is Status.UNSATISFIED
    # `secret` is not in context_claims: it never reaches the provider.
    assert (await outcome(guard, "leaks.unselected", ALICE))[0] is Status.UNSATISFIED


async def test_a_claim_named_tool_cannot_spoof_the_tool_name(flag_file: FlagFile) -> None:
    flag_file.write({"by.tool": boolean_flag(False, targeting={
        "if": [{"==": [{"var": "tool"}, "admin_tool"]}, "on", "off"]})})
    spoofer = Identity(principal=Principal.from_claims({"sub": "eve", "tool": "admin_tool"}))
    guard = Guard(write_policy(flag_file.path.parent, claims='["tool"]'),
                  {"plain": ["feature:by.tool"], "admin_tool": ["feature:by.tool"]},
                  entry_points=False)
    assert (await outcome(guard, "plain", spoofer))[0] is Status.UNSATISFIED
    assert (await outcome(guard, "admin_tool", spoofer))[0] is Status.SATISFIED


async def test_file_edits_are_picked_up_while_running(flag_file: FlagFile) -> None:
    flag_file.write({"launch_window.open": boolean_flag(False)})
    guard = guard_for(flag_file)
    assert (await outcome(guard))[0] is Status.UNSATISFIED
    flag_file.write({"launch_window.open": boolean_flag(True)})
    await becomes(guard, (Status.SATISFIED, "flag 'launch_window.open' is true (openfeature)"))
    flag_file.write({})
    await becomes(guard, (Status.UNSATISFIED, "flag 'launch_window.open' is not defined (openfeature)"))


async def test_a_broken_flag_file_fails_closed_then_recovers(flag_file: FlagFile) -> None:
    flag_file.write({"launch_window.open": boolean_flag(True)})
    guard = guard_for(flag_file)
    assert (await outcome(guard))[0] is Status.SATISFIED
    flag_file.write_text("{ this is not json")
    await becomes(guard, (Status.ERROR, "resolver 'feature' raised BackendError: flag provider is error"))
    assert not (await guard.check_identity("launch", ALICE)).allowed
    flag_file.write({"launch_window.open": boolean_flag(True)})
    await becomes(guard, (Status.SATISFIED, "flag 'launch_window.open' is true (openfeature)"))


def test_a_missing_flag_file_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        Guard(write_policy(tmp_path, "absent.json"), entry_points=False)
    assert caught.value.problems == [
        f"features.openfeature.path: flag file '{tmp_path / 'absent.json'}' does not exist"]
    assert str(caught.value).startswith(f"{tmp_path / 'live.toml'}: invalid policy (1 problem(s)):")


def test_an_unparsable_flag_file_refuses_to_start(flag_file: FlagFile) -> None:
    flag_file.write_text("[1, 2")
    with pytest.raises(PolicyError) as caught:
        guard_for(flag_file)
    assert caught.value.problems[0].startswith(
        f"features.openfeature.path: flag file '{flag_file.path}' is not usable: JSONDecodeError: ")


async def test_static_policy_flags_take_precedence(flag_file: FlagFile) -> None:
    flag_file.write({"launch_window.open": boolean_flag(True)})
    guard = guard_for(flag_file, extra='[features.flags]\n"launch_window.open" = false\n')
    assert await outcome(guard) == (Status.UNSATISFIED, "flag 'launch_window.open' is false (policy)")


async def test_global_openfeature_state_is_left_alone(flag_file: FlagFile, tmp_path: Path) -> None:
    app_flags = {"launch_window.open": InMemoryFlag("off", {"on": True, "off": False})}
    api.set_provider(InMemoryProvider(app_flags))  # the application's own default provider
    try:
        flag_file.write({"launch_window.open": boolean_flag(True)})
        other = FlagFile(tmp_path / "other" / "flags.json")
        other.path.parent.mkdir()
        other.write({"launch_window.open": boolean_flag(False)})
        first, second = guard_for(flag_file), Guard(write_policy(other.path.parent),
                                                    entry_points=False)
        assert (await outcome(first))[0] is Status.SATISFIED
        assert (await outcome(second))[0] is Status.UNSATISFIED
        assert api.get_client().get_boolean_value("launch_window.open", True) is False
    finally:
        api.set_provider(NoOpProvider())  # the application's default back to the SDK's own


def test_snapshots_of_one_flag_file_share_one_provider(flag_file: FlagFile) -> None:
    guard = guard_for(flag_file)
    before = guard.snapshot.registry.get("feature").source  # type: ignore[union-attr]
    guard.reload(write_policy(flag_file.path.parent, extra='[features.flags]\n"x" = true\n'))
    after = guard.snapshot.registry.get("feature").source  # type: ignore[union-attr]
    assert isinstance(before, OpenFeatureFlagSource) and isinstance(after, OpenFeatureFlagSource)
    assert before is not after
    assert before.client.provider is after.client.provider
