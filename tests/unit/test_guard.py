"""The guard (SPEC §3): the denial payload and text, confidential requirements withheld, one decision
record per decision (never a token), "which tools can this caller call", changes and reloads.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from mcp_preconditions import (
    ANONYMOUS,
    Credentials,
    Decision,
    Guard,
    Identity,
    LiveSources,
    Outcome,
    PolicyError,
    Principal,
    Refusal,
    Refused,
    RequirementError,
    parse_policy,
)

POLICY = """
environment = ["production"]
confidential = ["state:weather.clear", "feature:secret"]
[state.values]
"weather.clear" = false
[features.flags]
"secret" = true
[tools.launch]
requirements = ["state:weather.clear", "auth:oauth2"]
[tools.policy_only]
requirements = ["env:production"]
"""
TOOLS = {
    "launch": ["env:production", "auth:claim:role:pilot", "feature:secret"],
    "weather": [],
    "status": None,
    "deploy": ["env:production"],
    "whoami": ["auth:oauth2"],
}
RECORD_KEYS = {"time", "tool", "subject", "allowed", "unmet", "errors", "revision", "duration_us"}


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def make_guard(policy: str = POLICY, **kwargs: object) -> Guard:
    return Guard(parse_policy(policy.encode(), "p.toml"), TOOLS, entry_points=False, **kwargs)  # type: ignore[arg-type]


def who(**claims: object) -> Credentials:
    return Credentials(principal=Principal.from_claims(claims))


# -- the effective requirements -----------------------------------------------------------------
def test_requirements_are_the_union_of_code_and_policy_in_order() -> None:
    g = make_guard()
    assert g.requirements_for("launch") == ("env:production", "auth:claim:role:pilot", "feature:secret",
                                            "state:weather.clear", "auth:oauth2")
    assert g.requirements_for("policy_only") == ("env:production",)
    assert g.requirements_for("weather") == ()
    assert g.requirements_for("status") == ()
    assert g.requirements_for("nope") == ()
    assert g.tool_names() == list(TOOLS)


async def test_a_tool_with_no_requirements_is_allowed() -> None:
    g = make_guard()
    for name in ("weather", "status"):
        d = await g.check(name, ANONYMOUS)
        assert (d.allowed, d.outcomes, d.unmet, d.revision) == (True, (), (), g.revision)


async def test_a_policy_only_tool_is_guarded() -> None:
    assert (await make_guard().check("policy_only")).allowed
    assert not (await make_guard(POLICY.replace('["production"]', '["staging"]')).check("policy_only")
                ).allowed


# -- denial payload and text --------------------------------------------------------------------
async def test_the_denial_payload_withholds_confidential_requirements() -> None:
    d = await make_guard().check("launch", who(sub="bob", role="observer"))
    assert not d.allowed
    assert d.unmet == ("auth:claim:role:pilot", "state:weather.clear")
    assert d.denial_payload() == {"error": "unmet_requirements", "tool": "launch",
                                  "unmet": ["auth:claim:role:pilot"], "withheld": 1}
    assert d.denial_text() == ("Tool 'launch' was not run: unmet requirements: auth:claim:role:pilot "
                               "(+1 withheld).")
    assert "weather" not in d.denial_text()


async def test_a_satisfied_confidential_requirement_is_not_counted() -> None:
    d = await make_guard().check("launch", who(sub="p", role="pilot"))
    assert d.outcome("feature:secret") == Outcome.satisfied("feature:secret",
                                                            "flag 'secret' is true (policy)")
    assert d.withheld == 1  # only the unmet state:weather.clear


async def test_denial_text_when_everything_unmet_is_confidential() -> None:
    d = await make_guard().check("launch", who(sub="p", role="pilot"))
    assert d.denial_payload() == {"error": "unmet_requirements", "tool": "launch", "unmet": [],
                                  "withheld": 1}
    assert d.denial_text() == "Tool 'launch' was not run: unmet requirements (+1 withheld)."


def test_denial_text_without_confidential_requirements() -> None:
    d = Decision("t", False, (Outcome.unsatisfied("env:a", "no"), Outcome.error("state:b", "down")))
    assert d.denial_text() == "Tool 't' was not run: unmet requirements: env:a, state:b."
    assert d.denial_payload()["unmet"] == ["env:a", "state:b"]
    assert (d.unmet, d.errors, d.withheld) == (("env:a", "state:b"), ("state:b",), 0)


# -- decision records ---------------------------------------------------------------------------
def records(caplog: pytest.LogCaptureFixture, logger: str = "mcp_preconditions.decisions"
            ) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == logger]


async def test_one_json_record_per_decision(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")
    g = make_guard()
    await g.check("launch", who(sub="alice", role="observer"))
    await g.check("deploy", ANONYMOUS)
    await g.check("weather", ANONYMOUS)
    got = records(caplog)
    assert len(got) == 3
    assert set(got[0]) == RECORD_KEYS | {"context_id"}  # a denial's SEP-2643 context ID (SPEC §15)
    assert all(set(r) == RECORD_KEYS for r in got[1:])  # an allowed call draws none
    first = got[0]
    assert (first["tool"], first["subject"], first["allowed"], first["unmet"], first["errors"],
            first["revision"]) == ("launch", "alice", False, ["auth:claim:role:pilot", "state:weather.clear"],
                                   {}, g.revision)
    assert [(r["tool"], r["allowed"], r["unmet"]) for r in got[1:]] == [("deploy", True, []),
                                                                        ("weather", True, [])]


async def test_the_record_lists_errors_with_their_reasons(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")

    def down() -> bool:
        raise ConnectionError("redis down")

    g = Guard(parse_policy(b"", "p.toml"), {"t": ["state:k"]}, entry_points=False,
              live=LiveSources(state_callables={"k": down}))
    await g.check("t")
    assert records(caplog)[0]["errors"] == {"state:k": "resolver 'state' raised ConnectionError: redis down"}


async def test_the_policy_names_the_decision_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="audit.tools")
    g = make_guard(POLICY + '[decision_log]\nlogger = "audit.tools"\n')
    await g.check("deploy")
    assert [r["tool"] for r in records(caplog, "audit.tools")] == ["deploy"]


async def test_record_false_and_callable_tools_do_not_record(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")
    g = make_guard()
    await g.check("deploy", record=False)
    await g.callable_tools(ANONYMOUS)
    assert records(caplog) == []


async def test_a_token_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = "secret-token-value"
    g = make_guard()
    decisions = [await g.check(name, Credentials(token=token)) for name in (*TOOLS, "policy_only")]
    await g.callable_tools(Credentials(token=token))
    assert len(records(caplog)) == len(decisions)
    assert token not in caplog.text
    for d in decisions:
        assert token not in repr(d) and token not in json.dumps(d.denial_payload())
        assert token not in d.denial_text()


async def test_the_subject_of_a_static_only_tool_is_recorded(caplog: pytest.LogCaptureFixture) -> None:
    # "Every decision is recorded: time, tool, subject, ..." — also when no requirement needed the
    # caller's identity, as long as the caller is already known.
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")
    d = await make_guard().check("deploy", who(sub="alice"))
    assert d.subject == "alice"
    assert records(caplog)[0]["subject"] == "alice"


# -- which tools can this caller call? ----------------------------------------------------------
async def test_callable_tools() -> None:
    g = make_guard(POLICY.replace('"weather.clear" = false', '"weather.clear" = true'))
    assert await g.callable_tools(who(sub="p", role="pilot")) == [
        "launch", "weather", "status", "deploy", "whoami", "policy_only"]
    assert await g.callable_tools(ANONYMOUS) == ["weather", "status", "deploy", "policy_only"]
    assert await g.callable_tools(who(sub="x"), ["whoami", "launch", "unknown"]) == ["whoami", "unknown"]


# -- sync decisions and established identities --------------------------------------------------
def test_decide_without_an_event_loop() -> None:
    g = make_guard()
    alice = Identity(principal=Principal.from_claims({"sub": "alice"}))
    assert g.decide("whoami", alice).allowed
    assert not g.decide("whoami", Identity(failure="no access token")).allowed
    assert g.decide("weather", alice).allowed


async def test_check_identity() -> None:
    d = await make_guard().check_identity("whoami", Identity(principal=Principal.from_claims({"sub": "a"})))
    assert (d.allowed, d.subject) == (True, "a")


# -- changes: add_tool and reload ---------------------------------------------------------------
async def test_add_tool_validates_and_keeps_the_old_state_on_error() -> None:
    g = make_guard()
    g.add_tool("new", ["env:production"])
    assert g.requirements_for("new") == ("env:production",)
    with pytest.raises(RequirementError) as info:
        g.add_tool("bad", ["production"])
    assert info.value.messages == [
        "tool 'bad': requirement 'production' has no namespace (expected NAMESPACE:..., known "
        "namespaces: 'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state')"]
    assert "bad" not in g.tool_names()
    g.add_tool("new", ["env:staging"])
    assert g.requirements_for("new") == ("env:staging",)
    assert not (await g.check("new")).allowed


async def test_reload_swaps_the_snapshot() -> None:
    g = make_guard()
    old = g.revision
    g.reload(parse_policy(POLICY.replace('["production"]', '["staging"]').encode(), "p.toml"))
    assert g.revision != old
    d = await g.check("deploy")
    assert (d.allowed, d.revision) == (False, g.revision)


async def test_reload_of_a_broken_policy_keeps_the_old_snapshot() -> None:
    g = make_guard()
    old = g.snapshot
    broken = parse_policy((POLICY + '[tools.deploy2]\nrequirements = ["nonamespace"]\n').encode(), "p2.toml")
    with pytest.raises(RequirementError) as info:
        g.reload(broken)
    assert info.value.messages == [
        "p2.toml: tool 'deploy2': requirement 'nonamespace' has no namespace (expected NAMESPACE:..., "
        "known "
        "namespaces: 'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state')"]
    assert g.snapshot is old
    assert (await g.check("deploy")).allowed


def test_a_policy_file_that_does_not_parse_never_reaches_the_guard() -> None:
    with pytest.raises(PolicyError):
        parse_policy(b"environment = [", "p.toml")


# -- independent lookups run concurrently -------------------------------------------------------
class Rendezvous:
    """`zz:a` and `zz:b` each wait for the other to start: only concurrent lookups both finish."""

    namespace = "zz"

    def __init__(self) -> None:
        self.started = {"zz:a": asyncio.Event(), "zz:b": asyncio.Event()}

    def validate(self, requirement: str) -> str | None:
        return None if requirement in self.started else "only zz:a and zz:b"

    async def resolve(self, requirement: str, context: object) -> bool:
        self.started[requirement].set()
        other = "zz:b" if requirement == "zz:a" else "zz:a"
        await self.started[other].wait()
        return True


async def test_the_lookups_of_one_call_run_concurrently() -> None:
    g = Guard(parse_policy(b"[guard]\nlookup_timeout_seconds = 2\n", "p.toml"), {"t": ["zz:a", "zz:b"]},
              resolvers=[Rendezvous()], entry_points=False)
    d = await g.check("t")
    assert d.errors == ()
    assert d.allowed


async def test_the_conditions_of_grants_run_concurrently() -> None:
    policy = (b"[guard]\nlookup_timeout_seconds = 2\n"
              b'[[capabilities.grants]]\ncapabilities = ["c"]\nwhen = ["zz:a", "zz:b"]\n')
    g = Guard(parse_policy(policy, "p.toml"), {"t": ["capability:c"]}, resolvers=[Rendezvous()],
              entry_points=False)
    d = await g.check("t")
    assert d.errors == ()
    assert d.allowed


def test_check_now_answers_at_once_when_nothing_needs_awaiting() -> None:
    class Slow:
        async def authenticate(self, credentials: Credentials) -> Identity:
            await asyncio.sleep(0)
            return Identity(principal=Principal.from_claims({"sub": "s", "role": "pilot"}))

    guard = make_guard()
    now = guard.check_now("whoami", who(sub="alice"))
    assert isinstance(now, Decision) and now.allowed  # a host-verified caller: no await
    awaited = Guard(parse_policy(POLICY.encode(), "p.toml"), TOOLS, entry_points=False,
                    authenticator=Slow()).check_now("whoami", Credentials(token="t"))
    assert not isinstance(awaited, Decision)  # the authenticator must be awaited
    decision = asyncio.run(awaited)
    assert decision.allowed and decision.subject == "s"
    for tool in TOOLS:
        sync = guard.check_now(tool, who(sub="a", role="pilot"), record=False)
        assert isinstance(sync, Decision)
        assert sync.allowed == asyncio.run(guard.check(tool, who(sub="a", role="pilot"),
                                                       record=False)).allowed


# --- every decision names its caller, tools without requirements included (issue 22, item 9) -------
class CountingVerifier:
    """Verifies the token "t-alice" (as alice) and caches it; anything else is a bad token.
    `authenticate_now` answers only from the cache, like the guard's own verifier."""

    def __init__(self) -> None:
        self.verified: dict[str, Identity] = {}
        self.calls = 0

    async def authenticate(self, credentials: Credentials) -> Identity:
        self.calls += 1
        if credentials.token == "t-alice":
            self.verified["t-alice"] = Identity(principal=Principal.from_claims({"sub": "alice"}))
            return self.verified["t-alice"]
        return Identity(failure="bad token")

    def authenticate_now(self, credentials: Credentials) -> Identity | None:
        if credentials.principal is not None:
            return Identity(principal=credentials.principal)
        if credentials.token is None:
            return Identity(failure="no access token")
        return self.verified.get(credentials.token)


def test_a_tool_without_requirements_records_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = CountingVerifier()
    seen: list[Decision] = []
    guard = Guard(parse_policy(b"", "p.toml"), {"open": []}, authenticator=verifier,
                  entry_points=False)
    monkeypatch.setattr(guard.recorder, "record", seen.append)
    bob = Credentials(principal=Principal.from_claims({"sub": "bob"}))

    first = guard.check_now("open", Credentials(token="t-alice"))  # not verified yet: awaited
    assert not isinstance(first, Decision)
    assert asyncio.run(first).subject == "alice"
    again = guard.check_now("open", Credentials(token="t-alice"))  # the cached answer, at once
    assert isinstance(again, Decision) and again.subject == "alice"
    assert asyncio.run(guard.check("open", Credentials(token="forged"))).subject is None
    assert guard.check_now("open", bob).subject == "bob"  # type: ignore[union-attr]
    assert guard.check_now("open", ANONYMOUS).subject is None  # type: ignore[union-attr]
    assert guard.decide("open", Identity(principal=bob.principal)).subject == "bob"
    assert asyncio.run(guard.check_identity("open", Identity(principal=bob.principal))).subject == "bob"
    assert [(d.subject, d.allowed, d.unmet) for d in seen] == [
        ("alice", True, ()), ("alice", True, ()), (None, True, ()), ("bob", True, ()),
        (None, True, ()), ("bob", True, ()), ("bob", True, ())]
    assert verifier.calls == 2  # alice once (cached after), the forged token once


def test_a_failing_fast_path_leaves_the_open_tool_allowed_and_unnamed() -> None:
    class Broken(CountingVerifier):
        def authenticate_now(self, credentials: Credentials) -> Identity | None:
            raise RuntimeError("cache down")

        async def authenticate(self, credentials: Credentials) -> Identity:
            raise RuntimeError("verifier down")

    guard = Guard(parse_policy(b"", "p.toml"), {"open": []}, authenticator=Broken(),
                  entry_points=False)
    decision = asyncio.run(guard.check("open", Credentials(token="t-alice")))
    assert (decision.allowed, decision.subject) == (True, None)


def test_a_call_decided_by_static_requirements_names_its_verified_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, item 2: `env:` decides the call whoever calls, and the record still names the
    caller whose token is verified (once, then from the cache), allowed or denied."""
    verifier = CountingVerifier()
    seen: list[Decision] = []
    guard = Guard(parse_policy(b'environment = ["staging"]\n', "p.toml"),
                  {"stage": ["env:staging"], "prod": ["env:production"]}, authenticator=verifier,
                  entry_points=False)
    monkeypatch.setattr(guard.recorder, "record", seen.append)
    first = guard.check_now("stage", Credentials(token="t-alice"))  # verified, to name its caller
    assert not isinstance(first, Decision)
    assert asyncio.run(first).subject == "alice"
    denied = guard.check_now("prod", Credentials(token="t-alice"))  # from the cache, at once
    assert isinstance(denied, Decision) and (denied.allowed, denied.subject) == (False, "alice")
    assert asyncio.run(guard.check("stage", Credentials(token="forged"))).subject is None
    assert [(d.tool, d.subject, d.allowed) for d in seen] == [
        ("stage", "alice", True), ("prod", "alice", False), ("stage", None, True)]
    assert verifier.calls == 2


def test_a_refusal_is_recorded_like_any_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Guard.refuse`: a call refused without being evaluated names its caller as `check` does (a
    token verified, then cached), the revision in force and the time it took; its outcome says
    why for the record, its denial says only what the caller may read."""
    verifier = CountingVerifier()
    seen: list[Decision] = []
    guard = Guard(parse_policy(b'confidential = ["env:x"]\n', "p.toml"), authenticator=verifier,
                  entry_points=False)
    monkeypatch.setattr(guard.recorder, "record", seen.append)
    alice = Credentials(token="t-alice")
    unusable = Refusal(Refused.UNUSABLE, "the server's policy is unusable")
    malformed = Refusal(Refused.MALFORMED, "its requirements cannot be read")
    refused = [asyncio.run(guard.refuse("a", alice, unusable)),
               asyncio.run(guard.refuse("b", alice, malformed, "tool 'b': _meta is garbage")),
               asyncio.run(guard.refuse("c", ANONYMOUS, Refusal(Refused.UNLISTED, "nobody lists it")))]
    assert seen == refused
    assert [(d.subject, d.allowed, d.unmet, d.errors, d.revision) for d in refused] == [
        ("alice", False, ("(policy unusable)",), ("(policy unusable)",), guard.revision),
        ("alice", False, ("(malformed requirements)",), (), guard.revision),
        (None, False, (), (), guard.revision)]
    assert refused[1].outcomes[0].reason == "tool 'b': _meta is garbage"
    assert all(d.duration_ns > 0 for d in refused)
    assert [d.denial_text() for d in refused] == [
        "the server's policy is unusable",
        "Tool 'b' was not run: unmet requirements: (malformed requirements).",
        "Tool 'c' was not run: nobody lists it."]
    assert refused[2].denial_payload() == {"error": "unlisted_tool", "tool": "c", "unmet": [],
                                           "withheld": 0}
    assert verifier.calls == 1
