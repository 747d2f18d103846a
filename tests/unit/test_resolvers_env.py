"""`env:NAME` (SPEC §4): the policy's environment labels, replaced by an environment variable when set;
labels compare exactly.
"""

from __future__ import annotations

import pytest

from mcp_preconditions import ANONYMOUS, Decision, Guard, Outcome, parse_policy
from mcp_preconditions.resolvers.env import EnvResolver, environment_labels

POLICY = 'environment = ["production", "eu-west-1"]\n'


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def guard(policy: str = POLICY, requirements: tuple[str, ...] = ()) -> Guard:
    tools = {f"t{i}": [r] for i, r in enumerate(requirements)}
    return Guard(parse_policy(policy.encode(), "p.toml"), tools, entry_points=False)


async def outcome(g: Guard, requirement: str) -> Outcome:
    g.add_tool("probe", [requirement])
    decision: Decision = await g.check("probe", ANONYMOUS)
    found = decision.outcome(requirement)
    assert found is not None
    return found


async def test_a_policy_label_is_satisfied() -> None:
    g = guard()
    assert await outcome(g, "env:production") == Outcome.satisfied(
        "env:production", "environment label 'production' is set")
    assert (await outcome(g, "env:eu-west-1")).ok


@pytest.mark.parametrize("requirement", [
    "env:Production", "env:production ", "env:prоduction", "env:production\u200b", "env:staging",
    "env:PRODUCTION", "env:eu-west", "env:production,eu-west-1",
])
async def test_any_other_string_is_unsatisfied(requirement: str) -> None:
    label = requirement[len("env:"):]
    assert await outcome(guard(), requirement) == Outcome.unsatisfied(
        requirement, f"environment label '{label}' is not among this server's labels")


async def test_no_labels_satisfy_nothing() -> None:
    assert not (await outcome(guard(""), "env:production")).ok


async def test_the_environment_variable_replaces_the_policy_labels(monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "staging, us-east-1")
    g = guard()
    assert (await outcome(g, "env:staging")).ok
    assert (await outcome(g, "env:us-east-1")).ok  # list syntax: spaces around commas are not part
    assert not (await outcome(g, "env:production")).ok
    assert not (await outcome(g, "env:eu-west-1")).ok


async def test_an_empty_environment_variable_means_no_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "")
    assert not (await outcome(guard(), "env:production")).ok


async def test_the_policy_may_name_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "ignored")
    monkeypatch.setenv("DEPLOY_ENV", "canary")
    g = guard(POLICY + 'environment_variable = "DEPLOY_ENV"\n')
    assert (await outcome(g, "env:canary")).ok
    assert not (await outcome(g, "env:ignored")).ok
    assert not (await outcome(g, "env:production")).ok


async def test_the_variable_is_read_when_the_policy_is_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    g = guard(requirements=("env:production",))
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "staging")
    assert (await g.check("t0")).allowed  # the running snapshot keeps its labels
    g.reload(parse_policy(POLICY.encode(), "p.toml"))
    assert not (await g.check("t0")).allowed


def test_environment_labels_function() -> None:
    assert environment_labels(["a", "b"], None, {}) == frozenset({"a", "b"})
    assert environment_labels(["a"], "V", {"V": " x ,y,, "}) == frozenset({"x", "y"})
    assert environment_labels(["a"], "V", {"W": "x"}) == frozenset({"a"})


def test_the_resolver_is_static_and_exact() -> None:
    resolver = EnvResolver(["Production"])
    assert resolver.validate("env:x") is None
    assert resolver.validate("env:") == "env: needs a label name (env:NAME)"
    assert resolver.static_outcome("env:Production") == Outcome.satisfied(
        "env:Production", "environment label 'Production' is set")
    static = resolver.static_outcome("env:production")
    assert static is not None and not static.ok


async def test_an_env_only_tool_needs_no_caller() -> None:
    g = guard(requirements=("env:production",))
    decision = await g.check("t0", ANONYMOUS)
    assert decision.allowed
    assert decision.outcomes == (Outcome.satisfied("env:production",
                                                   "environment label 'production' is set"),)
