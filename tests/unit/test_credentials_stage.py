"""`credential:KEY` decided by the guard as a late stage (late.py) with a scripted authorization
server: obtained only after every other requirement held (a call refused for another reason costs
no exchange) and before a quota unit is taken (a call refused for its credential spends none);
outcomes in the tool's order; the source's own timeout, not the lookup timeout; the credential in
the call's sidecar, never in the decision; records name the kind and whether it was cached; the
remedy's connect link; a refused credential overruled through the guard.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_preconditions.credentials import (
    ConnectedAccounts,
    ConnectFlow,
    CredentialResolver,
    ExchangeCache,
    HeldCredential,
    MemoryTickets,
    MemoryVault,
    Obtained,
    TokenExchange,
    held_for,
)
from mcp_preconditions.credentials.obtaining import CredentialSources
from mcp_preconditions.decisions import decision_record
from mcp_preconditions.envelope import Remediation
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.guard import Guard
from mcp_preconditions.late import Sidecar
from mcp_preconditions.outcomes import Decision, Outcome, Status
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials, Identity
from mcp_preconditions.remedies import Offer, OfferCall, Recipient, recipient_of
from tests.unit.credentials_doubles import AuthServer, Clock, caller, exchanged
from tests.unit.test_credentials_accounts import oauth_settings
from tests.unit.test_credentials_exchange import settings

REQ = "credential:crm"
TOKEN = "caller-token-xyz"
POLICY = """
[quotas.once]
calls = 1
per_seconds = 3600

[tools.read]
requirements = ["auth:claim:role:reader"]
[tools.metered]
requirements = ["auth:claim:role:reader", "quota:once"]
[tools.first]
requirements = ["credential:crm", "auth:claim:role:reader"]
"""


class Records:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, decision: Decision) -> None:
        self.records.append(json.loads(json.dumps(decision_record(decision))))


def setup(answer: Any = None, *, delay: float = 0.0, policy: str = POLICY, **overrides: Any
          ) -> tuple[Guard, AuthServer, Records, list[tuple[str, str]]]:
    server = AuthServer(answer or (lambda form: (200, exchanged())), delay=delay)
    clock = Clock()
    source = TokenExchange("crm", settings(**overrides), ExchangeCache(clock=clock), clock=clock,
                           transport=server.transport())
    resolver = CredentialResolver({"crm": source})
    counted: list[tuple[str, str]] = []
    resolver.observe = lambda key, obtained: counted.append((key, obtained.result))
    records = Records()
    guard = Guard(parse_policy(policy.encode(), "p.toml"), {"read": [REQ], "metered": [REQ]},
                  resolvers=[resolver], entry_points=False, recorder=records)
    return guard, server, records, counted


def reader(role: str = "reader", subject: str = "alice") -> Credentials:
    identity = caller(subject)
    assert identity.principal is not None
    principal = identity.principal.__class__.from_claims({**identity.principal.claims, "role": role},
                                                         kind="jwt")
    return Credentials(token=TOKEN, principal=principal)


async def test_obtained_after_the_others_held_kept_beside_the_decision_and_recorded() -> None:
    guard, server, records, counted = setup()
    sidecar = Sidecar()
    decision = await guard.check("read", reader(), sidecar=sidecar)
    assert decision.allowed and decision.unmet == ()
    assert [o.requirement for o in decision.outcomes] == [REQ, "auth:claim:role:reader"]
    assert server.forms[0]["subject_token"] == TOKEN  # the caller's token, to the endpoint only
    held = held_for(sidecar, "crm")
    assert isinstance(held, HeldCredential) and held.credential is not None
    assert held.credential.headers() == {"Authorization": "Bearer upstream-token"}
    assert "upstream-token" not in repr(decision) and TOKEN not in repr(sidecar)
    again = Sidecar()
    assert (await guard.check("read", reader(), sidecar=again)).allowed
    assert len(server.requests) == 1  # cached
    assert [r["credential"] for r in records.records] == [
        {"kind": "token-exchange", "cached": False}, {"kind": "token-exchange", "cached": True}]
    assert counted == [("crm", "obtained"), ("crm", "cached")]
    assert TOKEN not in json.dumps(records.records) and "upstream-token" not in json.dumps(records.records)


async def test_a_call_refused_for_another_reason_costs_no_exchange_and_reports_no_credential() -> None:
    guard, server, records, counted = setup()
    decision = await guard.check("read", reader(role="guest"), sidecar=Sidecar())
    assert not decision.allowed and decision.unmet == ("auth:claim:role:reader",)
    assert decision.outcome(REQ) is None and server.requests == [] and counted == []
    assert "credential" not in records.records[0]


@pytest.mark.parametrize(("answer", "status", "result"), [
    ((400, {"error": "invalid_grant"}), Status.UNSATISFIED, "refused"),
    ((503, b"down"), Status.ERROR, "error")])
async def test_no_credential_is_unsatisfied_a_failing_server_an_error_both_deny(
        answer: tuple[int, Any], status: Status, result: str) -> None:
    guard, _, records, counted = setup(lambda form: answer)
    sidecar = Sidecar()
    decision = await guard.check("read", reader(), sidecar=sidecar)
    assert not decision.allowed and decision.unmet == (REQ,)
    outcome = decision.outcome(REQ)
    assert outcome is not None and outcome.status is status and outcome.transient
    held = held_for(sidecar, "crm")
    assert held is not None and held.credential is None
    assert counted == [("crm", result)] and records.records[0]["credential"]["cached"] is False


async def test_anonymous_callers_are_refused_without_asking_anyone() -> None:
    guard, server, _, _ = setup(policy="")
    decision = await guard.check("read", Credentials(), sidecar=Sidecar())
    assert not decision.allowed and decision.unmet == (REQ,) and server.requests == []


async def test_the_credential_comes_before_the_quota_so_a_refused_one_spends_no_unit() -> None:
    refuse = {"now": True}
    guard, _, _, _ = setup(lambda form: (400, {"error": "invalid_grant"}) if refuse["now"]
                           else (200, exchanged()))
    refused = await guard.check("metered", reader(), sidecar=Sidecar())
    assert not refused.allowed and refused.unmet == (REQ,)
    assert refused.outcome("quota:once") is None  # not asked
    refuse["now"] = False
    sidecar = Sidecar()
    allowed = await guard.check("metered", reader(), sidecar=sidecar)
    assert allowed.allowed  # the one unit was still there
    used = Sidecar()
    exhausted = await guard.check("metered", reader(), sidecar=used)
    assert not exhausted.allowed and exhausted.unmet == ("quota:once",)
    assert exhausted.outcome(REQ) is not None and exhausted.outcome(REQ).ok  # type: ignore[union-attr]
    assert held_for(used, "crm") is None  # released: a refused call carries no credential


async def test_the_sources_own_timeout_not_the_lookup_timeout() -> None:
    guard, _, _, _ = setup(delay=0.7)  # the lookup timeout is 0.5 s; an exchange may take 10 s
    assert (await guard.check("read", reader(), sidecar=Sidecar())).allowed
    slow, _, _, _ = setup(delay=0.5, timeout_seconds=0.2)
    decision = await slow.check("read", reader(), sidecar=Sidecar())
    outcome = decision.outcome(REQ)
    assert outcome is not None and outcome.status is Status.ERROR
    assert outcome.reason == "https://idp.test/token did not answer within 0.2 s"


async def test_without_a_sidecar_the_call_is_denied_as_it_could_not_carry_a_credential() -> None:
    guard, server, _, _ = setup()
    decision = await guard.check("read", reader())
    assert not decision.allowed and decision.unmet == (REQ,) and server.requests == []


def test_a_credential_in_a_grant_condition_refuses_start_up() -> None:
    policy = '[[capabilities.grants]]\ncapabilities = ["c"]\nwhen = ["credential:crm"]\n'
    with pytest.raises(RequirementError) as raised:
        setup(policy=policy)
    assert raised.value.messages == [
        "p.toml: tool '(policy capabilities.grants[0].when)': requirement 'credential:crm': a "
        "credential is not a grant condition: it is obtained for a call about to reach its "
        "server, after every other requirement"]


async def test_renewing_exchanges_once_more_and_an_overruled_call_is_recorded_denied() -> None:
    answers = iter([exchanged("first"), exchanged("second")])
    guard, server, records, counted = setup(lambda form: (200, next(answers)))
    sidecar = Sidecar()
    decision = await guard.check("read", reader(), sidecar=sidecar)
    held = held_for(sidecar, "crm")
    assert held is not None
    renewed = await held.renew(sidecar.token)
    assert isinstance(renewed, Obtained) and renewed.result == "obtained"
    assert renewed.credential is not None
    assert renewed.credential.headers()["Authorization"] == "Bearer second"
    # The held one is left as it was (other calls of the caller may hold it).
    assert held.credential is not None and held.credential.headers()["Authorization"] == "Bearer first"
    refused = Outcome(REQ, Status.UNSATISFIED, "server 'crm' refused the renewed credential",
                      transient=True)
    overruled = guard.overrule(decision, refused)
    assert not overruled.allowed and overruled.unmet == (REQ,) and overruled.outcome(REQ) == refused
    assert [r["allowed"] for r in records.records] == [True, False]
    assert records.records[1]["credential"] == {"kind": "token-exchange", "cached": False}
    assert len(server.requests) == 2 and counted[-1] == ("crm", "obtained")


async def test_the_servers_challenge_reaches_the_renewal_and_a_renewed_one_is_not_renewed_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC §14, §17: what a call goes as (`Held.outbound`) hands the server's `WWW-Authenticate`
    to the renewal (a step-up's scope is in it); what that returns answers a second challenge
    with the unmet outcome, asking no authorization server (renewed once)."""
    answers = iter([exchanged("first"), exchanged("second")])
    guard, server, _, _ = setup(lambda form: (200, next(answers)))
    sidecar = Sidecar()
    await guard.check("read", reader(), sidecar=sidecar)
    held = held_for(sidecar, "crm")
    assert held is not None and held.outbound is not None
    told: list[str | None] = []
    renew = CredentialSources.renew

    async def recorded(self: CredentialSources, requirement: str, identity: Identity,
                       token: str | None, stale: Any, challenge: str | None = None) -> Obtained:
        told.append(challenge)
        return await renew(self, requirement, identity, token, stale, challenge)
    monkeypatch.setattr(CredentialSources, "renew", recorded)
    step_up = 'Bearer error="insufficient_scope", scope="crm:write"'
    renewed = await held.outbound.challenged(sidecar.token, step_up)
    assert told == [step_up]
    assert not isinstance(renewed, Outcome)
    assert renewed.owner == held.owner and renewed.headers()["Authorization"] == "Bearer second"
    again = await renewed.challenged(sidecar.token, step_up)
    assert isinstance(again, Outcome) and again.requirement == REQ
    assert again.status is Status.UNSATISFIED and again.transient
    assert told == [step_up] and len(server.requests) == 2


def _identity(identity: Identity) -> Any:
    async def known() -> Identity:
        return identity
    return known


async def test_the_remedy_is_a_connect_link_made_for_the_denied_caller() -> None:
    accounts = ConnectedAccounts("gh", oauth_settings(), MemoryVault())
    flow = ConnectFlow({"gh": accounts}, MemoryTickets(), "https://gw.test")
    resolver = CredentialResolver({"gh": accounts}, flow)
    guard = Guard(parse_policy(b"", "p.toml"), {"issues": ["credential:gh"]}, resolvers=[resolver],
                  entry_points=False, recorder=Records())
    sidecar = Sidecar()
    decision = await guard.check("issues", Credentials(principal=caller("alice").principal),
                                 sidecar=sidecar)
    assert not decision.allowed and decision.unmet == ("credential:gh",)
    alice = caller("alice")
    offer = await resolver.offer("credential:gh", OfferCall(decision, alice, None, True))
    assert offer is not None and offer.remediation is Remediation.AVAILABLE
    (hint,) = offer.hints
    assert hint.type == "url" and hint.url is not None and hint.url.startswith("https://gw.test/connect/")
    link = await flow.peek(hint.url.rsplit("/", 1)[1])
    assert (link.caller.subject, link.server) == ("alice", "gh")
    # a client that cannot open a URL: undisclosed
    said = "connect your account for gh at https://gw.test/connections"
    assert offer.said == said
    assert await resolver.offer("credential:gh", OfferCall(decision, alice, None, False)) == Offer(
        Remediation.UNDISCLOSED, (), said)  # the words all the same: the page signs the person in
    recipient = recipient_of(decision, guard.snapshot.registry, url_elicitation=True,
                             identity=_identity(alice), arguments=None)
    assert not isinstance(recipient, Recipient)
    offers = (await recipient).offers
    assert offers["credential:gh"].hints[0].type == "url"


async def test_no_connect_link_for_other_kinds_or_a_failing_server() -> None:
    guard, _, _, _ = setup(lambda form: (400, {"error": "invalid_grant"}))
    sidecar = Sidecar()
    decision = await guard.check("read", reader(), sidecar=sidecar)
    resolver = guard.snapshot.registry.get("credential")
    assert decision.unmet and await resolver.offer(  # type: ignore[union-attr]
        decision.unmet[0], OfferCall(decision, caller("alice"), None, True)) is None
