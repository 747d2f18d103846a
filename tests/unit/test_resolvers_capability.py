"""`capability:NAME` (SPEC §4): policy grants with `when` conditions (several grants are OR, the
conditions of one grant are AND), a token claim listing capabilities, and grant cycles rejected.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import (
    ANONYMOUS,
    Credentials,
    Guard,
    LiveSources,
    Outcome,
    PolicyError,
    Principal,
    RequirementError,
    parse_policy,
)

GRANTS = """
environment = ["production"]
[state.values]
"weather.clear" = true
[features.flags]
"beta" = false
[[capabilities.grants]]
capabilities = ["rocket.launch", "rocket.abort"]
when = ["auth:claim:role:mission_control", "env:production"]
[[capabilities.grants]]
capabilities = ["rocket.launch"]
when = ["auth:claim:role:commander"]
[[capabilities.grants]]
capabilities = ["weather.read"]
[[capabilities.grants]]
capabilities = ["beta.use"]
when = ["feature:beta"]
[[capabilities.grants]]
capabilities = ["pad.enter"]
when = ["state:weather.clear", "auth:oauth2"]
"""


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def who(**claims: Any) -> Credentials:
    return Credentials(principal=Principal.from_claims(claims))


async def outcome(requirement: str, credentials: Credentials = ANONYMOUS, policy: str = GRANTS,
                  live: LiveSources | None = None) -> Outcome:
    g = Guard(parse_policy(policy.encode(), "p.toml"), {"t": [requirement]}, live=live,
              entry_points=False)
    decision = await g.check("t", credentials)
    assert decision.allowed is decision.outcomes[0].ok
    return decision.outcomes[0]


async def test_a_grant_applies_when_all_its_conditions_hold() -> None:
    assert await outcome("capability:rocket.abort", who(role="mission_control")) == Outcome.satisfied(
        "capability:rocket.abort", "grant #0 gives 'rocket.abort'")


async def test_one_failing_condition_withholds_the_grant() -> None:
    got = await outcome("capability:rocket.abort", who(role="observer"))
    assert got == Outcome.unsatisfied(
        "capability:rocket.abort", "capability 'rocket.abort' not granted: grant #0 needs "
        "auth:claim:role:mission_control (claim 'role' does not have 'mission_control')")


async def test_several_grants_are_alternatives() -> None:
    assert (await outcome("capability:rocket.launch", who(role="mission_control"))).ok
    assert await outcome("capability:rocket.launch", who(role="commander")) == Outcome.satisfied(
        "capability:rocket.launch", "grant #1 gives 'rocket.launch'")
    got = await outcome("capability:rocket.launch", who(role="observer"))
    assert got == Outcome.unsatisfied(
        "capability:rocket.launch", "capability 'rocket.launch' not granted: grant #0 needs "
        "auth:claim:role:mission_control (claim 'role' does not have 'mission_control'); grant #1 "
        "needs auth:claim:role:commander (claim 'role' does not have 'commander')")


async def test_a_grant_without_conditions_always_applies() -> None:
    assert await outcome("capability:weather.read") == Outcome.satisfied(
        "capability:weather.read", "grant #2 gives 'weather.read'")


async def test_conditions_in_other_namespaces() -> None:
    assert await outcome("capability:beta.use", who(sub="a")) == Outcome.unsatisfied(
        "capability:beta.use", "capability 'beta.use' not granted: grant #3 needs feature:beta "
        "(flag 'beta' is false (policy))")
    assert (await outcome("capability:pad.enter", who(sub="a"))).ok
    assert await outcome("capability:pad.enter") == Outcome.unsatisfied(
        "capability:pad.enter", "capability 'pad.enter' not granted: grant #4 needs auth:oauth2 "
        "(no access token)")


async def test_an_env_condition_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "Production")
    assert not (await outcome("capability:rocket.abort", who(role="mission_control"))).ok


async def test_no_grant_at_all() -> None:
    assert await outcome("capability:unknown", who(role="mission_control")) == Outcome.unsatisfied(
        "capability:unknown", "no grant gives capability 'unknown'")
    for near in ("capability:Rocket.launch", "capability:rocket.launch ", "capability:rоcket.launch"):
        assert not (await outcome(near, who(role="mission_control"))).ok


async def test_a_failing_condition_makes_the_capability_an_error() -> None:
    def broken() -> bool:
        raise ConnectionError("sensor offline")

    policy = '[[capabilities.grants]]\ncapabilities = ["pad.enter"]\nwhen = ["state:sensor"]\n'
    got = await outcome("capability:pad.enter", who(sub="a"), policy,
                        LiveSources(state_callables={"sensor": broken}))
    assert got == Outcome.error(
        "capability:pad.enter", "capability 'pad.enter' not granted: grant #0 needs state:sensor "
        "(resolver 'state' raised ConnectionError: sensor offline)")


async def test_an_error_in_one_grant_does_not_hide_another_that_applies() -> None:
    def broken() -> bool:
        raise ConnectionError("down")

    policy = ('[[capabilities.grants]]\ncapabilities = ["x"]\nwhen = ["state:sensor"]\n'
              '[[capabilities.grants]]\ncapabilities = ["x"]\nwhen = ["auth:oauth2"]\n')
    got = await outcome("capability:x", who(sub="a"), policy,
                        LiveSources(state_callables={"sensor": broken}))
    assert got == Outcome.satisfied("capability:x", "grant #1 gives 'x'")


# -- a token claim listing capabilities ---------------------------------------------------------
CLAIM = '[capabilities]\nclaim = "caps"\n'


@pytest.mark.parametrize("caps", ["rocket.launch", ["x", "rocket.launch"]])
async def test_a_claim_lists_capabilities_as_a_string_or_an_array(caps: object) -> None:
    assert await outcome("capability:rocket.launch", who(caps=caps), CLAIM) == Outcome.satisfied(
        "capability:rocket.launch", "token claim 'caps' lists 'rocket.launch'")


@pytest.mark.parametrize("caps", ["rocket.launch other", ["Rocket.launch"], [["rocket.launch"]],
                                  {"rocket.launch": True}, 1, True, None, "rocket.launch "])
async def test_a_claim_must_list_the_exact_name(caps: object) -> None:
    assert await outcome("capability:rocket.launch", who(caps=caps), CLAIM) == Outcome.unsatisfied(
        "capability:rocket.launch", "capability 'rocket.launch' not granted: token claim 'caps' does "
                                    "not list it")


async def test_the_claim_and_the_grants_combine() -> None:
    policy = GRANTS + CLAIM
    assert (await outcome("capability:rocket.launch", who(role="commander", caps=[]), policy)).ok
    assert (await outcome("capability:free", who(caps=["free"]), policy)).ok
    got = await outcome("capability:rocket.launch", who(role="x"), policy)
    assert got.reason.startswith("capability 'rocket.launch' not granted: token claim 'caps' does not "
                                 "list it; grant #0 needs ")


async def test_an_anonymous_caller_has_no_claim() -> None:
    assert not (await outcome("capability:rocket.launch", ANONYMOUS, CLAIM)).ok


# -- rejected at load / start-up ----------------------------------------------------------------
def test_grants_may_not_depend_on_capabilities() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(b'[[capabilities.grants]]\ncapabilities = ["a"]\nwhen = ["capability:b"]\n'
                     b'[[capabilities.grants]]\ncapabilities = ["b"]\nwhen = ["capability:a"]\n',
                     "p.toml")
    assert str(info.value) == (
        "p.toml: invalid policy (2 problem(s)):\n"
        "  capabilities.grants[0].when: grants may not depend on capabilities ('capability:b'): "
        "no cycles\n"
        "  capabilities.grants[1].when: grants may not depend on capabilities ('capability:a'): "
        "no cycles")


@pytest.mark.parametrize(("body", "problem"), [
    (b'capabilities = ["capability:a"]', "capabilities.grants[0].capabilities: list capability names "
                                         "without the 'capability:' prefix: 'capability:a'"),
    (b'capabilities = ["a"]\nwhen = ["oauth2"]', "capabilities.grants[0].when: condition 'oauth2' has "
                                                 "no namespace"),
    (b'capabilities = []', "capabilities.grants[0].capabilities: List should have at least 1 item "
                           "after validation, not 0"),
    (b'capabilities = ["a"]\nwhen = [""]', "capabilities.grants[0].when[0]: String should have at "
                                           "least 1 character"),
])
def test_malformed_grants(body: bytes, problem: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(b"[[capabilities.grants]]\n" + body + b"\n", "p.toml")
    assert info.value.problems == [problem]


@pytest.mark.parametrize(("condition", "problem"), [
    ("ticket:OPS-1", "unknown namespace 'ticket' (known namespaces: 'approval', 'auth', 'capability', 'env', "
                     "'feature', 'pdp', 'quota', 'state')"),
    ("env:", "env: needs a label name (env:NAME) (accepted forms: env:NAME)"),
])
def test_a_grant_condition_the_guard_cannot_decide_refuses_start_up(condition: str, problem: str
                                                                     ) -> None:
    policy = f'[[capabilities.grants]]\ncapabilities = ["a"]\nwhen = ["{condition}"]\n'
    with pytest.raises(RequirementError) as info:
        Guard(parse_policy(policy.encode(), "p.toml"), {}, entry_points=False)
    assert info.value.messages == [
        f"p.toml: tool '(policy capabilities.grants[0].when)': requirement '{condition}': {problem}"]
