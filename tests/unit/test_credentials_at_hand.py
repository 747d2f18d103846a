"""A credential at hand (a cache hit) decided at once: `obtain_now` gives what an awaited `obtain`
gives, and counts it alike; a miss, an expired entry, no caller or no token, or a failing look are
awaited (never an allow); the guard answers a cached caller without a coroutine, with the decision
and record an awaited one makes; a tool needing two servers' credentials, one cached and one not;
a caller's calls after the first answered by the stage's `quick` answer as `decide` would; and,
against a tiny reference model, which calls exchange and which are answered at once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions.credentials import (
    ConnectedAccounts,
    CredentialResolver,
    ExchangeCache,
    MemoryVault,
    TokenExchange,
    held_for,
)
from mcp_preconditions.credentials.credential import Credential
from mcp_preconditions.credentials.per_subject import SubjectSecrets
from mcp_preconditions.credentials.settings import PerSubjectSettings
from mcp_preconditions.credentials.stage import CredentialStage
from mcp_preconditions.decisions import decision_record
from mcp_preconditions.guard import Guard
from mcp_preconditions.late import LateCall, Sidecar
from mcp_preconditions.outcomes import Decision, Status
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS_IDENTITY, Credentials, Identity
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock, caller, exchanged
from tests.unit.test_credentials_accounts import oauth_settings
from tests.unit.test_credentials_exchange import settings as exchange_settings

REQ, WIKI = "credential:crm", "credential:wiki"
TOKEN = "caller-token-xyz"


def exchange(server: AuthServer, clock: Clock, key: str = "crm") -> TokenExchange:
    return TokenExchange(key, exchange_settings(audience=f"https://{key}.test"),
                         ExchangeCache(clock=clock), clock=clock, transport=server.transport())


class NeverAtHand(TokenExchange):
    """The same source with no credential at hand: every call awaited (the path before)."""

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        return None


class LookFails(TokenExchange):
    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        raise RuntimeError("the cache broke")


def counted(resolver: CredentialResolver) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    resolver.observe = lambda key, obtained: seen.append((key, obtained.result))
    return seen


async def test_at_hand_is_what_an_awaited_obtain_gives_and_is_counted_alike() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock)})
    seen = counted(resolver)
    assert resolver.obtain_now(REQ, caller(), TOKEN) is None  # nothing cached: to be awaited
    first = await resolver.obtain(REQ, caller(), TOKEN)
    now = resolver.obtain_now(REQ, caller(), TOKEN)
    awaited = await resolver.obtain(REQ, caller(), TOKEN)
    assert now is not None and now == awaited  # outcome, kind, cached
    assert now.outcome is awaited.outcome is resolver.hit(REQ)  # one object, every call
    assert now.credential is awaited.credential is first.credential
    assert (now.result, now.outcome.reason, now.outcome.transient) == (
        "cached", "a token-exchange credential for server 'crm' (cached)", True)
    assert seen == [("crm", "obtained"), ("crm", "cached"), ("crm", "cached")]
    assert len(server.requests) == 1


async def test_nothing_at_hand_is_awaited_and_never_allowed_at_once() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged(expires_in=600))), Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock)})
    seen = counted(resolver)
    await resolver.obtain(REQ, caller(), TOKEN)
    assert resolver.obtain_now(REQ, ANONYMOUS_IDENTITY, TOKEN) is None  # no verified caller
    assert resolver.obtain_now(REQ, caller(), None) is None  # no token to exchange
    assert resolver.obtain_now(REQ, caller(), "another-token") is None  # keyed per subject token
    clock.now += 570  # the exchanged token's expiry less 30 s
    assert resolver.obtain_now(REQ, caller(), TOKEN) is None
    failing = CredentialResolver({"crm": LookFails("crm", exchange_settings(), ExchangeCache(),
                                                   transport=server.transport())})
    assert failing.obtain_now(REQ, caller(), TOKEN) is None  # awaited, which then says why
    assert seen == [("crm", "obtained")]  # a look that found nothing is no attempt


async def test_per_subject_secrets_are_at_hand_and_oauth_connections_never() -> None:
    secrets = SubjectSecrets("crm", PerSubjectSettings(secrets="unused.json"),
                             {f"{ISSUER} alice": "Bearer alice-secret"})
    resolver = CredentialResolver({"crm": secrets})
    now = resolver.obtain_now(REQ, caller("alice"), None)
    assert now is not None and now == await resolver.obtain(REQ, caller("alice"), None)
    assert now.credential is not None and now.credential.headers() == {
        "Authorization": "Bearer alice-secret"}
    assert resolver.obtain_now(REQ, caller("bob"), None) is None
    assert (await resolver.obtain(REQ, caller("bob"), None)).outcome.status is Status.UNSATISFIED
    accounts = ConnectedAccounts("crm", oauth_settings(), MemoryVault())
    assert CredentialResolver({"crm": accounts}).obtain_now(REQ, caller("alice"), None) is None


def guard_with(resolver: CredentialResolver, tools: dict[str, list[str]]) -> tuple[Guard, list[Any]]:
    records: list[Any] = []

    class Recorder:
        def record(self, decision: Decision) -> None:
            records.append(json.loads(json.dumps(decision_record(decision))))
    guard = Guard(parse_policy(b"", "p.toml"), tools, resolvers=[resolver], entry_points=False,
                  recorder=Recorder())
    return guard, records


def credentials(token: str = TOKEN, subject: str = "alice") -> Credentials:
    """A verified caller whose token does not expire (the exchanged token's does)."""
    return Credentials(token=token, principal=caller(subject, expires_at=None).principal)


async def test_the_guard_answers_a_cached_caller_at_once_as_it_would_awaited() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    cache = ExchangeCache(clock=clock)
    fast = CredentialResolver({"crm": TokenExchange("crm", exchange_settings(), cache, clock=clock,
                                                    transport=server.transport())})
    slow = CredentialResolver({"crm": NeverAtHand("crm", exchange_settings(), cache, clock=clock,
                                                  transport=server.transport())})
    answers = []
    for resolver in (fast, slow, fast):  # the exchange; then the cache awaited, and at once
        guard, records = guard_with(resolver, {"read": [REQ]})
        sidecar = Sidecar()
        decided = guard.check_now("read", credentials(), sidecar=sidecar)
        at_once = isinstance(decided, Decision)
        decision = decided if isinstance(decided, Decision) else await decided
        found = held_for(sidecar, "crm")
        assert found is not None and found.credential is not None
        answers.append((at_once, decision, records[0]["credential"], found.credential.headers()))
    assert [a[0] for a in answers] == [False, False, True]
    assert len(server.requests) == 1
    (_, awaited, awaited_record, awaited_header), (_, now, record, header) = answers[1:]
    assert (now.allowed, now.outcomes, now.unmet) == (awaited.allowed, awaited.outcomes, awaited.unmet)
    assert record == awaited_record == {"kind": "token-exchange", "cached": True}
    assert header == awaited_header == {"Authorization": "Bearer upstream-token"}
    guard, _ = guard_with(fast, {"read": [REQ]})
    decided = guard.check_now("read", credentials("new-token"), sidecar=Sidecar())
    assert not isinstance(decided, Decision)  # another token: exchanged, awaited
    assert (await decided).allowed and len(server.requests) == 2


async def test_two_servers_one_cached_one_awaited_each_counted_once_in_order() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged(form["audience"]))), Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock),
                                   "wiki": exchange(server, clock, "wiki")})
    seen = counted(resolver)
    guard, records = guard_with(resolver, {"crm_only": [REQ], "both": [REQ, WIKI]})
    assert (await guard.check("crm_only", credentials(), sidecar=Sidecar())).allowed
    sidecar = Sidecar()
    decided = guard.check_now("both", credentials(), sidecar=sidecar)
    assert not isinstance(decided, Decision)  # the wiki's credential is to be exchanged
    decision = await decided
    assert decision.allowed and [o.requirement for o in decision.outcomes] == [REQ, WIKI]
    assert [o.reason.endswith("(cached)") for o in decision.outcomes] == [True, False]
    assert seen == [("crm", "obtained"), ("crm", "cached"), ("wiki", "obtained")]
    assert {k: v.outbound.headers() for k, v in sidecar.held.items() if v.outbound is not None} == {
        REQ: {"Authorization": "Bearer https://crm.test"},
        WIKI: {"Authorization": "Bearer https://wiki.test"}}
    assert isinstance(guard.check_now("both", credentials(), sidecar=Sidecar()), Decision)
    assert len(server.requests) == 2 and records[-1]["credential"]["cached"] is True


# -- against a reference model: per (token) a deadline; a call exchanges iff none is live ----------
STEP = st.tuples(st.sampled_from(["t0", "t1", "t2"]), st.sampled_from([0.0, 200.0, 569.0, 571.0]))


@settings(max_examples=60, deadline=None)
@given(st.lists(STEP, max_size=25))
def test_exchanges_and_answers_at_once_match_a_reference_model(steps: list[tuple[str, float]]
                                                                ) -> None:
    asyncio.run(_against_model(steps))


async def _against_model(steps: list[tuple[str, float]]) -> None:
    server = AuthServer(lambda form: (200, exchanged(f"{form['subject_token']}#{len(server.requests)}")))
    clock = Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock)})
    guard, records = guard_with(resolver, {"read": [REQ]})
    model: dict[str, tuple[float, str]] = {}  # token -> (deadline, the credential it holds)
    for token, advance in steps:
        clock.now += advance
        entry = model.get(token)
        hit = entry is not None and entry[0] > clock.now
        sidecar = Sidecar()
        decided = guard.check_now("read", credentials(token), sidecar=sidecar)
        assert isinstance(decided, Decision) is hit  # at once exactly when the model holds one
        decision = decided if isinstance(decided, Decision) else await decided
        if not hit:
            model[token] = (clock.now + 600 - 30, f"Bearer {token}#{len(server.requests)}")
        held = held_for(sidecar, "crm")
        assert decision.allowed and held is not None and held.credential is not None
        assert held.credential.headers() == {"Authorization": model[token][1]}
        assert records[-1]["credential"] == {"kind": "token-exchange", "cached": hit}
    assert len(server.requests) == sum(1 for r in records if not r["credential"]["cached"])


ROLE = "auth:claim:role:reader"
LATE_FIRST = f"""[quotas.once]
calls = 1
per_seconds = 3600
[quotas.mid]
calls = 1
per_seconds = 3600
[tools.metered]
requirements = ["quota:once", "{ROLE}"]
[tools.read]
requirements = ["{ROLE}"]
[tools.middle]
requirements = ["{ROLE}", "quota:mid", "auth:claim:sub:alice"]
"""


async def test_late_requirements_before_the_others_are_ruled_in_the_tools_order_at_once() -> None:
    server, clock = AuthServer(lambda form: (200, exchanged())), Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock)})
    guard = Guard(parse_policy(LATE_FIRST.encode(), "p.toml"), {"read": [REQ], "metered": [REQ]},
                  resolvers=[resolver], entry_points=False)
    principal = caller(expires_at=None).principal
    assert principal is not None
    reader = Credentials(token=TOKEN, principal=principal.__class__.from_claims(
        {**principal.claims, "role": "reader"}, kind="jwt"))
    assert (await guard.check("read", reader, sidecar=Sidecar())).allowed  # exchanged
    for _ in range(2):  # one stage, before the others: merged in place (and the second remembered)
        read = guard.check_now("read", reader, sidecar=Sidecar())
        assert isinstance(read, Decision) and read.allowed
        assert [o.requirement for o in read.outcomes] == [REQ, ROLE]
    order = [REQ, "quota:once", ROLE]
    first = guard.check_now("metered", reader, sidecar=Sidecar())  # two stages: the unit taken
    assert isinstance(first, Decision) and first.allowed
    assert [o.requirement for o in first.outcomes] == order
    sidecar_again = Sidecar()
    again = guard.check_now("metered", reader, sidecar=sidecar_again)
    assert isinstance(again, Decision) and not again.allowed and again.unmet == ("quota:once",)
    assert [o.requirement for o in again.outcomes] == order
    assert held_for(sidecar_again, "crm") is None  # refused by the quota: the credential released
    for allowed in (True, False):  # one stage between the others: each outcome at its place
        middle = guard.check_now("middle", reader, sidecar=Sidecar())
        assert isinstance(middle, Decision) and middle.allowed is allowed
        assert [o.requirement for o in middle.outcomes] == [ROLE, "quota:mid", "auth:claim:sub:alice"]
    guest = guard.check_now("read", credentials(), sidecar=Sidecar())
    assert isinstance(guest, Decision) and guest.unmet == (ROLE,)
    assert guest.outcome(REQ) is None and len(server.requests) == 1


async def test_a_callers_calls_after_the_first_are_answered_quickly_as_decide_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool whose one late requirement is a credential asks the stage's `quick` answer first
    (snapshot.evaluate): once what a call holds is built for a principal object, its calls skip
    `decide` and are decided, held, recorded and counted exactly as `decide` did; an expired
    credential is never given (the call is awaited, and a failing exchange denies it); another
    principal object, even with the same token, goes through `decide`."""
    answer: list[tuple[int, Any]] = [(200, exchanged())]
    server, clock = AuthServer(lambda form: answer[0]), Clock()
    resolver = CredentialResolver({"crm": exchange(server, clock)})
    seen = counted(resolver)
    guard, records = guard_with(resolver, {"read": [REQ]})
    decided_by_stage: list[str] = []
    decide = CredentialStage.decide

    def counting_decide(self: CredentialStage, call: LateCall) -> Any:
        decided_by_stage.append(call.tool)
        return decide(self, call)
    monkeypatch.setattr(CredentialStage, "decide", counting_decide)
    alice = credentials()
    assert (await guard.check("read", alice, sidecar=Sidecar())).allowed  # exchanged
    answers = []
    for _ in range(3):  # `decide` builds what the call holds; then `quick`, twice
        sidecar = Sidecar()
        decided = guard.check_now("read", alice, sidecar=sidecar)
        assert isinstance(decided, Decision)
        held = held_for(sidecar, "crm")
        assert held is not None and held.credential is not None
        answers.append((decided.allowed, decided.outcomes, records[-1]["credential"], held,
                        held.credential.headers(), dict(sidecar.notes)))
    assert len(decided_by_stage) == 2  # the exchange's call and the first at hand, not the rest
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][2] == {"kind": "token-exchange", "cached": True}
    assert seen == [("crm", "obtained"), ("crm", "cached"), ("crm", "cached"), ("crm", "cached")]
    other = credentials()  # the same token, another principal object: `decide` again
    assert isinstance(guard.check_now("read", other, sidecar=Sidecar()), Decision)
    assert len(decided_by_stage) == 3 and len(server.requests) == 1
    clock.now += 600  # past the credential's deadline: never given; the exchange fails: denied
    answer[0] = (500, {"error": "server_error"})
    sidecar = Sidecar()
    decided = guard.check_now("read", alice, sidecar=sidecar)
    assert not isinstance(decided, Decision)
    denied = await decided
    assert not denied.allowed and [o.status for o in denied.outcomes] == [Status.ERROR]
    held = held_for(sidecar, "crm")
    assert held is not None and held.credential is None
    assert seen[-1] == ("crm", "error") and len(server.requests) == 2
