"""Fail closed, always (SPEC §3): a resolver that raises, times out or returns garbage, an authenticator
that raises, and a namespace without a resolver each end as a non-satisfied outcome and a denial.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from mcp_preconditions import (
    ANONYMOUS,
    CallContext,
    Credentials,
    Guard,
    Identity,
    Outcome,
    Principal,
    Status,
    parse_policy,
)
from mcp_preconditions.auth import PassThroughAuthenticator


class Faulty:
    """A custom `zz:` resolver whose behaviour each test chooses."""

    namespace = "zz"

    def __init__(self, behaviour: Any) -> None:
        self.behaviour = behaviour

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Any:
        return self.behaviour(requirement)


class AsyncFaulty(Faulty):
    async def resolve(self, requirement: str, context: CallContext) -> Any:
        result = self.behaviour(requirement)
        return await result if asyncio.iscoroutine(result) else result


def make_guard(resolver: Any, policy: str = "", tools: dict[str, Any] | None = None) -> Guard:
    return Guard(parse_policy(policy.encode(), "p.toml"), tools or {"t": ["zz:a", "env:x"]},
                 resolvers=[resolver], entry_points=False)


async def decide(resolver: Any, policy: str = "environment = [\"x\"]\n") -> Outcome:
    d = await make_guard(resolver, policy).check("t", ANONYMOUS)
    assert not d.allowed
    assert d.outcome("env:x") == Outcome.satisfied("env:x", "environment label 'x' is set")
    found = d.outcome("zz:a")
    assert found is not None and found.status is not Status.SATISFIED
    return found


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def boom(requirement: str) -> Any:
    raise RuntimeError("boom")


@pytest.mark.parametrize("kind", [Faulty, AsyncFaulty])
async def test_a_resolver_that_raises(kind: type[Faulty]) -> None:
    assert await decide(kind(boom)) == Outcome.error("zz:a", "resolver 'zz' raised RuntimeError: boom")


async def test_an_exception_without_a_message_and_a_long_one() -> None:
    def bare(requirement: str) -> Any:
        raise KeyError

    assert (await decide(Faulty(bare))).reason == "resolver 'zz' raised KeyError"

    def long(requirement: str) -> Any:
        raise ValueError("x" * 1000)

    reason = (await decide(Faulty(long))).reason
    assert len(reason) == len("resolver 'zz' raised ") + 300
    assert reason.endswith("x…")


async def test_a_resolver_that_times_out() -> None:
    async def slow(requirement: str) -> bool:
        await asyncio.sleep(10)  # a resolver slower than its timeout, by design
        return True

    policy = 'environment = ["x"]\n[guard]\nlookup_timeout_seconds = 0.05\n'
    assert await decide(AsyncFaulty(slow), policy) == Outcome.error("zz:a",
                                                                    "resolver 'zz' timed out after 0.05 s")


@pytest.mark.parametrize(("result", "reason"), [
    (None, "resolver 'zz' returned NoneType, not an Outcome or bool"),
    (1, "resolver 'zz' returned int, not an Outcome or bool"),
    (0, "resolver 'zz' returned int, not an Outcome or bool"),
    ("yes", "resolver 'zz' returned str, not an Outcome or bool"),
    ("satisfied", "resolver 'zz' returned str, not an Outcome or bool"),
    ([True], "resolver 'zz' returned list, not an Outcome or bool"),
    (Outcome.satisfied("zz:b"), "resolver 'zz' returned an outcome for 'zz:b'"),
    (Outcome.satisfied("env:x"), "resolver 'zz' returned an outcome for 'env:x'"),
])
@pytest.mark.parametrize("kind", [Faulty, AsyncFaulty])
async def test_a_resolver_that_returns_garbage(kind: type[Faulty], result: object, reason: str) -> None:
    assert await decide(kind(lambda r: result)) == Outcome.error("zz:a", reason)


async def test_an_outcome_whose_status_is_not_a_status() -> None:
    forged = Outcome("zz:a", "satisfied")  # type: ignore[arg-type]
    got = await decide(Faulty(lambda r: forged))
    assert got.status is Status.ERROR


async def test_a_coroutine_returned_by_a_sync_resolve_is_awaited_and_checked() -> None:
    async def late(requirement: str) -> object:
        return "yes"

    assert await decide(Faulty(late)) == Outcome.error(
        "zz:a", "resolver 'zz' returned str, not an Outcome or bool")


class StaticFaulty(Faulty):
    def __init__(self, static: Any) -> None:
        super().__init__(lambda r: True)
        self.static = static

    def static_outcome(self, requirement: str) -> Any:
        return self.static(requirement)


async def test_a_static_outcome_that_raises_or_lies() -> None:
    assert await decide(StaticFaulty(boom)) == Outcome.error("zz:a",
                                                             "resolver 'zz' raised RuntimeError: boom")
    assert (await decide(StaticFaulty(lambda r: "yes"))).status is Status.ERROR
    assert (await decide(StaticFaulty(lambda r: Outcome.satisfied("zz:other")))).status is Status.ERROR


# -- authentication failures --------------------------------------------------------------------
class RaisingAuthenticator:
    async def authenticate(self, credentials: Credentials) -> Identity:
        raise RuntimeError(f"cannot verify {credentials.token}")


async def test_an_authenticator_that_raises_denies_with_errors() -> None:
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2", "auth:scope:s", "capability:c"]},
              authenticator=RaisingAuthenticator(), entry_points=False)
    d = await g.check("t", Credentials(token="secret-token-value"))
    assert not d.allowed
    assert d.outcomes[:2] == (Outcome.error("auth:oauth2", "authentication failed: RuntimeError"),
                              Outcome.error("auth:scope:s", "authentication failed: RuntimeError"))
    assert d.outcomes[2].status is Status.UNSATISFIED
    assert "secret-token-value" not in repr(d)


async def test_a_grant_depending_on_a_failed_authentication_is_an_error() -> None:
    policy = b'[[capabilities.grants]]\ncapabilities = ["c"]\nwhen = ["auth:oauth2"]\n'
    g = Guard(parse_policy(policy, "p.toml"), {"t": ["capability:c"]},
              authenticator=RaisingAuthenticator(), entry_points=False)
    d = await g.check("t", Credentials(token="x"))
    assert not d.allowed and d.errors == ("capability:c",)


async def test_an_error_identity_is_never_a_principal() -> None:
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:claim:role:x"]}, entry_points=False)
    d = await g.check_identity("t", Identity(principal=None, failure="JWKS down", error=True))
    assert d.outcomes == (Outcome.error("auth:claim:role:x", "JWKS down"),)


# -- a guard that starts despite bad requirements (strict=False) --------------------------------
async def test_a_namespace_without_a_resolver_is_unsatisfied_at_call_time() -> None:
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["zz:a"], "u": ["nonamespace"], "v": ["env:"]},
              entry_points=False, strict=False)
    assert [f.severity for f in g.findings] == ["error", "error", "error"]
    assert (await g.check("t")).outcomes == (Outcome.unsatisfied("zz:a", "no resolver for namespace 'zz'"),)
    assert (await g.check("u")).outcomes == (Outcome.unsatisfied("nonamespace",
                                                                 "requirement has no namespace"),)
    assert (await g.check("v")).outcomes == (Outcome.unsatisfied("env:", "form rejected by resolver"),)


@pytest.mark.parametrize("raw", ["env:a", [1], [""], {"a": 1}])
async def test_malformed_requirements_deny_the_tool(raw: object) -> None:
    g = Guard(parse_policy(b'environment = ["a"]', "p.toml"), {"t": raw}, entry_points=False,
              strict=False)
    d = await g.check("t", Credentials(principal=Principal.from_claims({"sub": "a"})))
    assert not d.allowed
    assert d.outcome("(malformed requirements)") == Outcome.unsatisfied(
        "(malformed requirements)", "the tool's requirements are not a list of strings")


class SyncPathAuthenticator:
    """An authenticator with the optional synchronous fast path, whose behaviour each test picks;
    `authenticate` (the slow path) counts its calls."""

    def __init__(self, now: Any) -> None:
        self.now = now
        self.slow = 0

    def authenticate_now(self, credentials: Credentials) -> Any:
        return self.now(credentials)

    async def authenticate(self, credentials: Credentials) -> Identity:
        self.slow += 1
        return Identity(principal=Principal.from_claims({"sub": "slow", "role": "x"}))


def raise_runtime(credentials: Credentials) -> Any:
    raise RuntimeError(f"cannot verify {credentials.token}")


@pytest.mark.parametrize(("now", "reason"), [
    (raise_runtime, "authentication failed: RuntimeError"),
    (lambda c: "alice", "authentication failed: the authenticator returned str, not an Identity"),
])
async def test_a_failing_synchronous_authentication_denies_with_errors(now: Any, reason: str) -> None:
    auth = SyncPathAuthenticator(now)
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2", "auth:claim:role:x"]},
              authenticator=auth, entry_points=False)
    d = await g.check("t", Credentials(token="secret-token-value"))
    assert not d.allowed
    assert d.outcomes == (Outcome.error("auth:oauth2", reason),
                          Outcome.error("auth:claim:role:x", reason))
    assert auth.slow == 0
    assert "secret-token-value" not in repr(d)


async def test_the_synchronous_path_defers_to_authenticate_when_it_cannot_say() -> None:
    auth = SyncPathAuthenticator(lambda c: None)
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:claim:role:x"]}, authenticator=auth,
              entry_points=False)
    d = await g.check("t", Credentials(token="t"))
    assert d.allowed and d.subject == "slow"
    assert auth.slow == 1


class BansBob(PassThroughAuthenticator):
    """Overrides `authenticate` alone: its inherited `authenticate_now` must not answer for it."""

    async def authenticate(self, credentials: Credentials) -> Identity:
        principal = credentials.principal
        if principal is not None and principal.claims.get("sub") == "bob":
            return Identity(failure="bob is banned")
        return await super().authenticate(credentials)


async def test_an_authenticator_overriding_authenticate_alone_is_asked_through_it() -> None:
    bob = Credentials(principal=Principal.from_claims({"sub": "bob"}))
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2"]}, authenticator=BansBob(),
              entry_points=False)
    d = await g.check("t", bob)
    assert not d.allowed
    assert d.outcomes == (Outcome.unsatisfied("auth:oauth2", "bob is banned"),)
    assert await g.callable_tools(bob) == []


async def test_an_instance_level_authenticate_is_asked_through_it() -> None:
    auth = PassThroughAuthenticator()

    async def refuse(credentials: Credentials) -> Identity:
        return Identity(failure="closed today")

    auth.authenticate = refuse  # type: ignore[method-assign]
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2"]}, authenticator=auth,
              entry_points=False)
    d = await g.check("t", Credentials(principal=Principal.from_claims({"sub": "alice"})))
    assert d.outcomes == (Outcome.unsatisfied("auth:oauth2", "closed today"),)


async def test_a_subclass_overriding_both_keeps_the_synchronous_path() -> None:
    class Both(BansBob):
        # AuthenticateNow may answer None ("ask authenticate"); PassThroughAuthenticator never does
        def authenticate_now(self, credentials: Credentials) -> Identity | None:  # type: ignore[override]
            return None  # always "ask authenticate"

    auth = Both()
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2"]}, authenticator=auth,
              entry_points=False)
    assert g._state[2] is not None  # the guard uses it
    d = await g.check("t", Credentials(principal=Principal.from_claims({"sub": "bob"})))
    assert d.outcomes == (Outcome.unsatisfied("auth:oauth2", "bob is banned"),)


# -- issue 11, findings 5 and 6 -------------------------------------------------------------------
class CancellingSync(Faulty):
    """A sync resolver raising CancelledError of its own accord (a backend client giving up)."""

    def __init__(self) -> None:
        super().__init__(None)

    def resolve(self, requirement: str, context: CallContext) -> Any:
        raise asyncio.CancelledError


def test_a_sync_resolver_raising_cancelled_error_is_an_error_outcome_and_recorded() -> None:
    records: list[Any] = []

    class Recorder:
        def record(self, decision: Any) -> None:
            records.append(decision)

    guard = Guard(parse_policy(b'environment = ["x"]\n', "p.toml"), {"t": ["zz:a", "env:x"]},
                  resolvers=[CancellingSync()], entry_points=False, recorder=Recorder())
    for decision in (guard.decide("t", Identity(), record=True),
                     asyncio.run(guard.check("t", ANONYMOUS))):
        assert not decision.allowed
        assert decision.outcome("zz:a") == Outcome.error("zz:a", "resolver 'zz' raised CancelledError")
    assert len(records) == 2  # each call ended in a decision, and a record of it


async def test_an_answer_after_the_lookup_timeout_is_an_error_even_if_it_says_yes() -> None:
    class Stubborn(AsyncFaulty):
        """Swallows the timeout's cancellation and answers True, late."""

        def __init__(self) -> None:
            super().__init__(None)

        async def resolve(self, requirement: str, context: CallContext) -> Any:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(5)  # a resolver that hangs
            return True

    guard = make_guard(Stubborn(), 'environment = ["x"]\n[guard]\nlookup_timeout_seconds = 0.05\n')
    decision = await guard.check("t", ANONYMOUS)
    assert not decision.allowed
    assert decision.outcome("zz:a") == Outcome.error("zz:a", "resolver 'zz' timed out after 0.05 s")
