"""`Guard.update_tools`: many tools registered, replaced or forgotten in one swap, compiling only the
tools that changed (a gateway applies each upstream listing this way; SPEC §10: nothing recompiles
the whole policy once per tool)."""

from __future__ import annotations

import pytest

from mcp_preconditions import Guard
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS_IDENTITY

POLICY = parse_policy(b'environment = ["prod"]\n[tools.policy_only]\nrequirements = ["env:prod"]\n',
                      "p.toml")


def test_one_swap_registers_replaces_and_forgets() -> None:
    guard = Guard(POLICY, {"a": ["env:prod"], "b": ["env:test"]}, entry_points=False)
    guard.update_tools({"a": None, "b": ["env:prod"], "c": ["auth:oauth2"]})
    assert guard.requirements_for("a") == ()
    assert guard.requirements_for("b") == ("env:prod",)
    assert guard.requirements_for("c") == ("auth:oauth2",)
    assert guard.requirements_for("policy_only") == ("env:prod",)
    assert sorted(guard.tool_names()) == ["b", "c"]
    assert guard.decide("b", ANONYMOUS_IDENTITY).allowed


def test_unchanged_tools_and_the_resolvers_are_reused() -> None:
    tools = {f"t{i}": ["env:prod"] for i in range(50)}
    guard = Guard(POLICY, tools, entry_points=False)
    before = guard.snapshot
    guard.update_tools({"new": ["env:prod"]})
    after = guard.snapshot
    assert after is not before
    assert after.registry is before.registry  # no resolver (Redis client, flag provider) rebuilt
    assert all(after.tools[f"t{i}"] is before.tools[f"t{i}"] for i in range(50))
    assert after.tools["new"].requirements == ("env:prod",)


def test_a_reload_compiles_everything_afresh() -> None:
    guard = Guard(POLICY, {"a": ["env:prod"]}, entry_points=False)
    before = guard.snapshot
    guard.reload(parse_policy(b'environment = ["test"]\n', "p.toml"))
    assert guard.snapshot.registry is not before.registry
    assert not guard.decide("a", ANONYMOUS_IDENTITY).allowed


def test_an_invalid_requirement_changes_nothing() -> None:
    guard = Guard(POLICY, {"a": ["env:prod"]}, entry_points=False)
    before = guard.snapshot
    with pytest.raises(RequirementError, match="nosuch"):
        guard.update_tools({"a": None, "bad": ["nosuch:x"]})
    assert guard.snapshot is before
    assert guard.requirements_for("a") == ("env:prod",)


def test_findings_of_reused_tools_are_kept() -> None:
    guard = Guard(POLICY, {"spaced": ["env:prod "]}, entry_points=False, strict=False)
    warned = [f for f in guard.findings if f.tool == "spaced"]
    assert warned
    guard.update_tools({"other": ["env:prod"]})
    assert [f for f in guard.findings if f.tool == "spaced"] == warned
