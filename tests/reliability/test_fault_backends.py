"""The fault matrix, backend side: the real injection points fail instead of the resolvers. The
authenticator and a real JWKS endpoint (auth), live state sources, state callables and Redis
(state), flag sources (feature), grant conditions (capability) and the environment variable (env).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_preconditions import Credentials, Identity, LiveSources, Principal

from .cases import (
    ERROR,
    NOT_SATISFIED,
    POLICY,
    allowed_everywhere,
    guard,
    run_case,
    via_check,
    via_decide,
    via_identity,
)
from .faults import (
    AUDIENCE,
    FAULTS,
    HANG_SECONDS,
    ISSUER,
    FailingAuthenticator,
    FailingSource,
    HealthySource,
    black_hole,
    closed_port,
    jwks_server,
    token,
)

LIVE_TOOLS = {"feature": ["feature_live"], "state": ["state_live", "capability_live"]}


@pytest.fixture(autouse=True)
def no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELIABILITY_ENVIRONMENT", raising=False)


# -- state and feature: live sources; capability through a grant condition on live state ---------
def live(kind: str, source: Any) -> LiveSources:
    return LiveSources(state=source) if kind == "state" else LiveSources(flags=source)


async def test_the_control_allows_live_lookups_when_the_sources_are_healthy() -> None:
    await allowed_everywhere(guard(live=LiveSources(state=HealthySource(), flags=HealthySource())),
                             ["feature_live", "state_live", "capability_live"])


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", ["state", "feature"])
async def test_a_failing_live_source_denies(kind: str, fault: str) -> None:
    g = guard(live=live(kind, FailingSource(fault)))
    requirement = "state:live.key" if kind == "state" else "feature:live.flag"
    # A non-boolean flag is `unsatisfied` (SPEC §4); every other fault here is `error`.
    expect = NOT_SATISFIED if (kind, fault) == ("feature", "returns garbage") else ERROR
    assert await run_case("backend faults", g, LIVE_TOOLS[kind][:1], requirement, expect) == []


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_grant_whose_condition_fails_gives_no_capability(fault: str) -> None:
    g = guard(live=LiveSources(state=FailingSource(fault)))
    assert await run_case("backend faults", g, ["capability_live"], "capability:live.cap") == []


@pytest.mark.parametrize("garbage", ["true", 1, None, b"true", {"value": True}])
async def test_state_garbage_of_every_shape_is_an_error(garbage: Any) -> None:
    g = guard(live=LiveSources(state=FailingSource("returns garbage", garbage)))
    assert await run_case("backend faults", g, ["state_live"], "state:live.key") == []


def _raises() -> bool:
    raise RuntimeError("injected fault")


async def _hangs() -> bool:
    await asyncio.sleep(HANG_SECONDS)  # a backend that hangs
    return True


async def state_and_capability(g: Any) -> list[str]:
    """A state fault denies `state:live.key`, and the capability granted on it."""
    return (await run_case("backend faults", g, ["state_live"], "state:live.key") +
            await run_case("backend faults", g, ["capability_live"], "capability:live.cap"))


@pytest.mark.parametrize("call", [_raises, _hangs, lambda: "true", lambda: None],
                         ids=["raises", "times out", "returns 'true'", "returns None"])
async def test_a_failing_state_callable_denies(call: Any) -> None:
    assert await state_and_capability(guard(live=LiveSources(state_callables={"live.key": call}))) == []


async def test_redis_that_is_down_denies() -> None:
    policy = POLICY.replace("[guard]", f'[state.redis]\nurl = "redis://127.0.0.1:{closed_port()}/0"\n'
                                       "connect_timeout_seconds = 0.05\n\n[guard]")
    assert await state_and_capability(guard(policy)) == []


@pytest.mark.parametrize("garbage", [{"live.cap": True}, 1, ["LIVE.CAP"], "live.cap ", [["live.cap"]]])
async def test_a_garbage_capability_claim_grants_nothing(garbage: Any) -> None:
    policy = POLICY.replace("[guard]", '[capabilities]\nclaim = "capabilities"\n\n[guard]').replace(
        'when = ["state:live.key"]', 'when = ["env:nowhere"]')
    who = Principal.from_claims({"sub": "alice", "capabilities": garbage})
    g = guard(policy)

    async def check(g_: Any, tool: str) -> Any:
        return await g_.check(tool, Credentials(principal=who))
    check.__name__ = "via_check"
    assert await run_case("backend faults", g, ["capability_live"], "capability:live.cap",
                          NOT_SATISFIED, [check]) == []


# -- env: the label override variable set to garbage ------------------------------------------------
@pytest.mark.parametrize("value", ["", ",,,", "PRODUCTION", "production\u200b", "prоduction"])
async def test_garbage_environment_labels_deny(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("RELIABILITY_ENVIRONMENT", value)
    assert await run_case("backend faults", guard(), ["env", "launch_rocket"], "env:production",
                          NOT_SATISFIED) == []


# -- auth: the authenticator, and a real JWKS endpoint that fails -----------------------------------
async def via_token(g: Any, tool: str) -> Any:
    # Minted per call, not at import: the whole suite outlasts a token's ten minutes.
    return await g.check(tool, Credentials(token=token(sub="alice", role="mission_control")))


def auth_policy(jwks_uri: str, timeout: float = 10.0) -> str:
    # A first fetch pays for building the HTTP client (~0.3 s cold, several times that on a loaded
    # machine): only the black hole is short; the others answer, or refuse, at once.
    return POLICY.replace("[guard]", f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n'
                                     f'jwks_uri = "{jwks_uri}"\nalgorithms = ["RS256"]\n'
                                     f"fetch_timeout_seconds = {timeout}\n\n[guard]")


async def test_the_control_allows_a_verified_token() -> None:
    with jwks_server() as base:
        await allowed_everywhere(guard(auth_policy(f"{base}/jwks")), ["auth", "launch_rocket"],
                                 [via_token])


@pytest.mark.parametrize("where", ["times out", "backend down", "not json", "no keys"])
async def test_a_failing_jwks_endpoint_denies(where: str) -> None:
    with jwks_server() as base, black_hole() as hole:
        uri = {"times out": f"{hole}/jwks", "backend down": f"http://127.0.0.1:{closed_port()}/jwks",
               "not json": f"{base}/not-json", "no keys": f"{base}/no-keys"}[where]
        g = guard(auth_policy(uri, 0.3) if where == "times out" else auth_policy(uri))
        assert await run_case("backend faults", g, ["auth", "launch_rocket"], "auth:oauth2", ERROR,
                              [via_token]) == []


@pytest.mark.parametrize("result", [None, "alice", {"sub": "alice"}, Principal.from_claims({"sub": "a"})],
                         ids=["raises", "a string", "a dict", "a Principal, not an Identity"])
async def test_a_failing_authenticator_denies(result: Any) -> None:
    g = guard(authenticator=FailingAuthenticator(result))
    assert await run_case("backend faults", g, ["auth", "launch_rocket"], "auth:oauth2", ERROR,
                          [via_check, via_token]) == []


async def test_the_paths_that_skip_authentication_are_unaffected_by_it() -> None:
    # check_identity and decide take an established identity: the authenticator is not involved.
    g = guard(authenticator=FailingAuthenticator())
    for path in (via_identity, via_decide):
        assert (await path(g, "launch_rocket")).allowed
    assert not (await g.check_identity("auth", Identity())).allowed
