"""The server side of SPEC §15: every denial's SEP-2643 envelope (the table, per unmet requirement,
the most open winning; confidential -> undisclosed; hints only with `available`), the context ID
the guard draws (fresh per denial, none for an allowed call or quotas alone) and the echo it
records (validated, granting nothing), a resolver's offer (a `url` hint only for a client that
declared URL elicitation), and the 403 step-up's one rule.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_preconditions import Credentials, Guard, Identity, Principal, parse_policy
from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.decisions import caller_record, decision_record
from mcp_preconditions.denials import (
    SCOPE_DETAILS_TYPE,
    denial_error_data,
    denial_meta,
    denial_result,
    envelope_of,
    step_up,
)
from mcp_preconditions.envelope import (
    AUTHORIZATION_META_KEY,
    CONTEXT_ID_META_KEY,
    AuthorizationDenial,
    Remediation,
    RemediationHint,
    echo_of,
    echoed,
    new_context_id,
)
from mcp_preconditions.outcomes import Decision, Outcome, Refusal, Refused
from mcp_preconditions.principal import ANONYMOUS, ANONYMOUS_IDENTITY
from mcp_preconditions.remedies import (
    NOBODY,
    Offer,
    OfferCall,
    Recipient,
    declares_url_elicitation,
    recipient_of,
)

AVAILABLE, UNAVAILABLE, UNDISCLOSED = (Remediation.AVAILABLE, Remediation.UNAVAILABLE,
                                       Remediation.UNDISCLOSED)
POLICY = """
environment = ["staging"]
confidential = ["env:testing"]
[quotas.once]
calls = 1
per_seconds = 3600
[tools.deploy]
requirements = ["env:production"]
[tools.write]
requirements = ["auth:scope:notes:write", "auth:scope:notes:admin"]
[tools.metered]
requirements = ["quota:once"]
[tools.hidden]
requirements = ["env:testing", "auth:scope:notes:write"]
[tools.ticketed]
requirements = ["ticket:release"]
"""
ALICE = Identity(principal=Principal.from_claims({"sub": "alice", "scope": "notes:read"}))
ALICE_CREDENTIALS = Credentials(principal=ALICE.principal)
URL = "https://gw.example/pages/release"


def denied(*outcomes: Outcome, confidential: frozenset[str] = frozenset(),
           refusal: Refusal | None = None, context_id: str | None = "authzctx_t") -> Decision:
    return Decision("t", False, outcomes, confidential=confidential, refusal=refusal,
                    context_id=context_id)


def no(requirement: str) -> Outcome:
    return Outcome.unsatisfied(requirement, "no")


def scope_hint(*scopes: str) -> dict[str, Any]:
    return {"type": "authorization_remediation",
            "authorization_details": [{"type": SCOPE_DETAILS_TYPE, "scopes": list(scopes)}]}


# -- the table ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("requirement", "remediation"), [
    ("auth:oauth2", UNAVAILABLE),  # over HTTP the transport's 401 comes first; in-band: nothing to do
    ("auth:claim:role:admin", UNAVAILABLE),
    ("capability:rocket.launch", UNAVAILABLE),
    ("env:production", UNAVAILABLE),
    ("state:weather.clear", UNAVAILABLE),
    ("feature:launch_window.open", UNAVAILABLE),
    ("credential:github", UNAVAILABLE),  # until its resolver offers the connect URL
    ("approval:deploy", UNAVAILABLE),  # until its resolver offers the approval page
    ("ticket:release", UNAVAILABLE),  # a custom namespace
    ("(malformed requirements)", UNAVAILABLE),
    ("auth:scope:notes:write", AVAILABLE),
])
def test_each_unmet_requirement_has_its_remedy(requirement: str, remediation: Remediation) -> None:
    envelope = envelope_of(denied(no(requirement)))
    assert envelope is not None and envelope.remediation is remediation
    assert envelope.context_id == "authzctx_t" and envelope.reason == "insufficient_authorization"
    assert (envelope.hints != ()) is (remediation is AVAILABLE)


def test_missing_scopes_are_one_authorization_remediation_hint() -> None:
    envelope = envelope_of(denied(no("auth:scope:a"), no("env:production"), no("auth:scope:b"),
                                  no("auth:scope:a")))
    assert envelope is not None and envelope.to_dict() == {
        "reason": "insufficient_authorization", "remediation": "available",
        "authorizationContextId": "authzctx_t", "remediationHints": [scope_hint("a", "b")]}


def test_a_confidential_requirement_makes_it_undisclosed_whatever_else() -> None:
    envelope = envelope_of(denied(no("auth:scope:a"), no("env:testing"),
                                  confidential=frozenset({"env:testing", "auth:scope:b"})))
    assert envelope == AuthorizationDenial(UNDISCLOSED, "authzctx_t")
    assert "remediationHints" not in envelope.to_dict()


def test_a_confidential_scope_is_never_named_in_a_hint() -> None:
    envelope = envelope_of(denied(no("auth:scope:secret"), confidential=frozenset({"auth:scope:secret"})))
    assert envelope == AuthorizationDenial(UNDISCLOSED, "authzctx_t")


def test_an_error_is_undisclosed_and_the_most_open_wins() -> None:
    down = Outcome.error("state:weather.clear", "redis down")
    assert envelope_of(denied(down)) == AuthorizationDenial(UNDISCLOSED, "authzctx_t")
    assert envelope_of(denied(down, no("env:production"))) == AuthorizationDenial(UNDISCLOSED, "authzctx_t")
    mixed = envelope_of(denied(down, no("auth:scope:a")))
    assert mixed is not None and mixed.remediation is AVAILABLE
    # A scope that ended `error` is no step-up: no hint names it.
    errored = envelope_of(denied(Outcome.error("auth:scope:a", "introspection down")))
    assert errored == AuthorizationDenial(UNDISCLOSED, "authzctx_t")


def test_refusals_the_guard_did_not_evaluate() -> None:
    unlisted = denied(refusal=Refusal(Refused.UNLISTED, "no server lists a tool of that name"))
    assert envelope_of(unlisted) == AuthorizationDenial(UNAVAILABLE, "authzctx_t")
    unusable = denied(Outcome.error("(policy unusable)", "near miss"),
                      refusal=Refusal(Refused.UNUSABLE, "the gateway's policy is unusable"),
                      context_id=None)
    assert envelope_of(unusable) is None
    assert denial_result(unusable) == {"content": [{"type": "text", "text":
                                                    "the gateway's policy is unusable"}], "isError": True}


def test_every_form_of_a_denial_carries_the_same_envelope() -> None:
    decision = denied(no("auth:scope:a"))
    expected = {AUTHORIZATION_META_KEY: envelope_of(decision).to_dict()}  # type: ignore[union-attr]
    assert denial_meta(decision) is not None
    assert denial_meta(decision).items() >= expected.items()  # type: ignore[union-attr]
    assert denial_result(decision)["_meta"].items() >= expected.items()
    typed = denial_result(decision, typed=True)
    assert "structuredContent" not in typed and DENIAL_META_KEY in typed["_meta"]
    assert typed["_meta"].items() >= expected.items()
    assert denial_error_data(decision)["_meta"].items() >= expected.items()  # type: ignore[index]
    # What the client side reads back is what the server wrote.
    assert AuthorizationDenial.from_meta(denial_result(decision)["_meta"]) == envelope_of(decision)


# -- the context ID the guard draws, and the echo it records ---------------------------------------------
def guard(resolvers: list[Any] | None = None) -> Guard:
    return Guard(parse_policy(POLICY.encode(), "policy.toml"), entry_points=False,
                 resolvers=resolvers if resolvers is not None else [Tickets()])


def test_a_denial_draws_a_fresh_id_and_an_allowed_call_none() -> None:
    g = guard()
    first, second = (g.decide("deploy", ALICE, record=False) for _ in range(2))
    assert first.context_id is not None and second.context_id is not None
    assert first.context_id.startswith("authzctx_") and len(first.context_id) == 41
    assert first.context_id != second.context_id
    assert g.decide("unknown_tool", ALICE, record=False).context_id is None  # allowed
    assert len({new_context_id() for _ in range(1000)}) == 1000


def test_quotas_alone_are_no_authorization_denial() -> None:
    g = guard()
    assert g.decide("metered", ALICE, record=False).allowed
    refused = g.decide("metered", ALICE, record=False)
    assert not refused.allowed and refused.context_id is None
    assert envelope_of(refused) is None
    result = denial_result(refused)
    assert result["structuredContent"]["retry_after_seconds"] > 0
    assert AUTHORIZATION_META_KEY not in (result.get("_meta") or {})


async def test_a_refusal_draws_an_id_unless_the_policy_is_unusable() -> None:
    g = guard()
    unlisted = await g.refuse("x", ALICE_CREDENTIALS, Refusal(Refused.UNLISTED, "listed twice"))
    unusable = await g.refuse("x", ALICE_CREDENTIALS, Refusal(Refused.UNUSABLE, "unusable"))
    assert unlisted.context_id is not None and unusable.context_id is None


@pytest.mark.parametrize(("echo", "kept"), [
    ("authzctx_0123456789abcdef0123456789abcdef", True),
    ("ctx-1", True),
    ("a" * 128, True),
    ("a" * 129, False),
    ("x" * 100_000, False),
    ("has space", False),
    ('quote"', False),
    ("line\nbreak", False),
    ("", False),
    (42, False),
    (["authzctx_1"], False),
    ({"id": "authzctx_1"}, False),
])
def test_only_a_well_formed_echo_is_kept(echo: object, kept: bool) -> None:
    assert echoed(echo) == (echo if kept else None)
    assert echo_of({CONTEXT_ID_META_KEY: echo, "other": 1}) == echo
    assert echo_of(None) is None and echo_of("not a mapping") is None


async def test_an_echo_is_recorded_and_grants_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")
    g = guard()
    first = await g.check("deploy", ALICE_CREDENTIALS)
    retry = await g.check("deploy", ALICE_CREDENTIALS, echo=first.context_id)
    garbage = await g.check("deploy", ALICE_CREDENTIALS, echo="x" * 100_000)
    allowed = await g.check("unknown_tool", ALICE_CREDENTIALS, echo=first.context_id)
    assert not retry.allowed and retry.echoed == first.context_id  # decided afresh: still denied
    assert retry.context_id not in (None, first.context_id)
    assert garbage.echoed is None and allowed.allowed and allowed.echoed == first.context_id
    records = [json.loads(r.getMessage()) for r in caplog.records]
    assert [(r.get("context_id"), r.get("echoed_context_id")) for r in records] == [
        (first.context_id, None), (retry.context_id, first.context_id),
        (garbage.context_id, None), (None, first.context_id)]
    assert "x" * 1000 not in caplog.text  # a huge echo is never logged


async def test_a_refusal_records_the_echo_too() -> None:
    refused = await guard().refuse("x", ANONYMOUS, Refusal(Refused.UNLISTED, "no"), echo="ctx-9")
    assert refused.echoed == "ctx-9"


def test_both_records_carry_the_ids() -> None:
    decision = Decision("t", False, (no("env:production"),), context_id="authzctx_1", echoed="ctx-0")
    for record in (decision_record(decision), caller_record(decision)):
        assert (record["context_id"], record["echoed_context_id"]) == ("authzctx_1", "ctx-0")
    assert "context_id" not in decision_record(Decision("t", True))


# -- a resolver's offer, and the client's declared URL elicitation -----------------------------------------
class Tickets:
    """A custom namespace whose unmet requirement offers a page to open."""

    namespace = "ticket"

    def __init__(self, offer: Callable[[str, OfferCall], Awaitable[Offer | None]] | None = None) -> None:
        self.asked: list[tuple[str, OfferCall]] = []
        self._offer = offer

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: object) -> Outcome:
        return Outcome.unsatisfied(requirement, "no ticket")

    async def offer(self, requirement: str, call: OfferCall) -> Offer | None:
        self.asked.append((requirement, call))
        if self._offer is not None:
            return await self._offer(requirement, call)
        return Offer(AVAILABLE, (RemediationHint("url", url=URL),))


async def recipient(g: Guard, decision: Decision, url_elicitation: bool) -> Recipient:
    async def identity() -> Identity:
        return ALICE
    found = recipient_of(decision, g.snapshot.registry, url_elicitation=url_elicitation,
                         identity=identity, arguments={"n": 1})
    return found if isinstance(found, Recipient) else await found


async def test_a_url_hint_goes_only_to_a_client_that_declared_url_elicitation() -> None:
    tickets = Tickets()
    g = guard(resolvers=[tickets])
    decision = g.decide("ticketed", ALICE, record=False)
    told = envelope_of(decision, await recipient(g, decision, url_elicitation=True))
    assert told is not None and told.to_dict()["remediationHints"] == [{"type": "url", "url": URL}]
    assert told.remediation is AVAILABLE
    untold = envelope_of(decision, await recipient(g, decision, url_elicitation=False))
    assert untold == AuthorizationDenial(UNDISCLOSED, decision.context_id)  # type: ignore[arg-type]
    requirement, call = tickets.asked[0]
    assert requirement == "ticket:release" and call.decision is decision
    assert (call.identity, call.arguments, call.url_elicitation) == (ALICE, {"n": 1}, True)


async def test_nobody_is_asked_for_a_confidential_denial_or_the_built_in_namespaces() -> None:
    tickets = Tickets()
    g = guard(resolvers=[tickets])
    for tool in ("hidden", "deploy", "write"):
        found = recipient_of(g.decide(tool, ALICE, record=False), g.snapshot.registry,
                             url_elicitation=True, identity=_never, arguments=None)
        assert found == Recipient(True)  # at once: no coroutine, no identity asked
    assert tickets.asked == []


async def _never() -> Identity:
    raise AssertionError("the identity is asked only when a resolver is")


async def _raises(requirement: str, call: OfferCall) -> Offer | None:
    raise RuntimeError("ticket service down")


async def _bad_url(requirement: str, call: OfferCall) -> Offer | None:
    return Offer(AVAILABLE, (RemediationHint("url", url="javascript:alert(1)"),))


async def _hints_without_available(requirement: str, call: OfferCall) -> Offer | None:
    return Offer(UNAVAILABLE, (RemediationHint("url", url=URL),))


async def _not_an_offer(requirement: str, call: OfferCall) -> Offer | None:
    return "https://gw.example"  # type: ignore[return-value]


async def _slow(requirement: str, call: OfferCall) -> Offer | None:
    await asyncio.sleep(60)  # an offer that hangs
    return None


async def _nothing(requirement: str, call: OfferCall) -> Offer | None:
    return None


@pytest.mark.parametrize(("offer", "remediation"), [
    (_raises, UNDISCLOSED), (_bad_url, UNDISCLOSED), (_hints_without_available, UNDISCLOSED),
    (_not_an_offer, UNDISCLOSED), (_slow, UNDISCLOSED), (_nothing, UNAVAILABLE)])
async def test_a_broken_offer_is_undisclosed_and_none_is_the_table(
        offer: Callable[[str, OfferCall], Awaitable[Offer | None]], remediation: Remediation,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr("mcp_preconditions.remedies.OFFER_SECONDS", 0.05)
    g = guard(resolvers=[Tickets(offer)])
    decision = g.decide("ticketed", ALICE, record=False)
    envelope = envelope_of(decision, await recipient(g, decision, url_elicitation=True))
    assert envelope == AuthorizationDenial(remediation, decision.context_id)  # type: ignore[arg-type]
    warned = "resolver 'ticket': its offer for 'ticket:release' was ignored" in caplog.text
    assert warned is (remediation is UNDISCLOSED)


@pytest.mark.parametrize(("capabilities", "declared"), [
    ({"elicitation": {"url": {}}}, True), ({"elicitation": {"form": {}, "url": {}}}, True),
    ({"elicitation": {}}, False), ({"elicitation": {"form": {}}}, False),
    ({"elicitation": {"url": True}}, False), ({"elicitation": "url"}, False), ({}, False), (None, False)])
def test_what_a_client_declared(capabilities: object, declared: bool) -> None:
    assert declares_url_elicitation(capabilities) is declared


def test_nobody_declared_nothing() -> None:
    assert Recipient(False, {}) == NOBODY


# -- the 403 step-up: one rule for hosted apps and the gateway ---------------------------------------------
TOKEN = ALICE  # a caller whose token was verified


def test_a_call_only_lacking_scopes_is_the_403() -> None:
    answer = step_up(denied(no("auth:scope:a"), no("auth:scope:b")), TOKEN)
    assert answer is not None
    assert answer.challenge == ('Bearer error="insufficient_scope", scope="a b", '
                                "error_description=\"tool 't' needs more scopes\"")
    assert json.loads(answer.body) == {"error": "insufficient_scope", "scope": "a b",
                                       "error_description": "the call needs more scopes"}


@pytest.mark.parametrize("decision", [
    denied(no("auth:scope:a"), no("env:production")),  # more scopes alone would not do
    denied(Outcome.error("auth:scope:a", "down")),
    denied(no("auth:scope:a"), confidential=frozenset({"auth:scope:a"})),
    denied(no('auth:scope:a"b')),  # not a scope token: cannot be put in the header
    denied(no("auth:oauth2")),
    Decision("t", True),
])
def test_any_other_call_is_no_403(decision: Decision) -> None:
    assert step_up(decision, TOKEN) is None


def test_a_call_without_a_verified_token_is_no_403() -> None:  # the auth layer's 401
    assert step_up(denied(no("auth:scope:a")), ANONYMOUS_IDENTITY) is None
    assert step_up(denied(no("auth:scope:a")), Identity(failure="bad signature")) is None
