"""The one sentence of a denial's text that says what to do (SPEC §15, `remedies.what_to_do`,
`denials.denial_text`): which remedy's words win when several requirements are unmet, the same
words in every form of a denial (its text, the JSON-RPC error's message) and for every client,
nothing when a confidential requirement is unmet; and the HTTP 401's rule (`needs_sign_in`).
tests/integration/test_denial_what_to_do.py holds every remedy kind through both paths.
"""

from __future__ import annotations

import pytest

from mcp_preconditions.approvals.stage import HeldApproval
from mcp_preconditions.denials import denial_error_data, denial_result, denial_text, needs_sign_in
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, Remediation, RemediationHint
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._calls import denial_error
from mcp_preconditions.late import Answer, Sidecar
from mcp_preconditions.outcomes import Decision, Outcome, Refusal, Refused
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS_IDENTITY, Credentials, Identity, Principal
from mcp_preconditions.remedies import NOBODY, Offer, Recipient, recipient_of, what_to_do

PAGE = "https://pages.example/sign"
SIGN = Offer(Remediation.AVAILABLE, (RemediationHint("url", url=PAGE),), f"sign at {PAGE}")
SIGNING = Recipient(url_elicitation=True, offers={"sign:it": SIGN})
SIGNING_NO_URL = Recipient(url_elicitation=False, offers={"sign:it": SIGN})


def denied(*outcomes: Outcome, confidential: frozenset[str] = frozenset(),
           refusal: Refusal | None = None) -> Decision:
    return Decision("t", False, outcomes, confidential=confidential, refusal=refusal,
                    context_id="authzctx_t")


def no(requirement: str) -> Outcome:
    return Outcome.unsatisfied(requirement, "no")


def down(requirement: str) -> Outcome:
    return Outcome.error(requirement, "did not answer")


OPERATOR = "ask an operator"
AUTH_DOWN = "the authorization server did not answer; try again"
SERVICE_DOWN = "a service the check needs did not answer; try again"


@pytest.mark.parametrize(("outcomes", "recipient", "said"), [
    ((no("env:production"),), NOBODY, OPERATOR),
    ((no("auth:oauth2"),), NOBODY, OPERATOR),  # in-band; over HTTP the transport's 401
    ((no("auth:scope:notes:write"),), NOBODY, ""),  # "Missing scopes" says it
    ((down("auth:oauth2"),), NOBODY, AUTH_DOWN),
    ((down("credential:crm"),), NOBODY, AUTH_DOWN),
    ((down("state:pad.ready"),), NOBODY, SERVICE_DOWN),
    ((no("sign:it"),), SIGNING, f"sign at {PAGE}"),
    ((no("sign:it"),), SIGNING_NO_URL, f"sign at {PAGE}"),  # no link for it, the words all the same
    # What only someone else can change comes first, then what the caller does, then a retry.
    ((down("state:pad.ready"), no("sign:it"), no("env:production")), SIGNING, OPERATOR),
    ((down("state:pad.ready"), no("sign:it")), SIGNING, f"sign at {PAGE}"),
    ((no("auth:scope:a"), down("feature:beta")), NOBODY, SERVICE_DOWN),
    ((Outcome.satisfied("env:staging"), no("quota:hourly")), NOBODY, ""),  # "Retry after" says when
])
def test_the_most_pressing_remedy_speaks(outcomes: tuple[Outcome, ...], recipient: Recipient,
                                         said: str) -> None:
    assert what_to_do(denied(*outcomes), recipient) == said


def test_a_confidential_requirement_unmet_says_nothing_beyond_the_unmet_list() -> None:
    secret = frozenset({"env:testing"})
    hidden = denied(no("env:production"), no("env:testing"), no("sign:it"), confidential=secret)
    assert what_to_do(hidden, SIGNING) == ""
    assert denial_text(hidden, SIGNING) == ("Tool 't' was not run: unmet requirements: env:production, "
                                            "sign:it (+1 withheld).")
    # Met, it changes nothing: the others speak as without it.
    met = denied(Outcome.satisfied("env:testing"), no("sign:it"), confidential=secret)
    assert denial_text(met, SIGNING) == ("Tool 't' was not run: unmet requirements: sign:it. "
                                         f"Sign at {PAGE}.")


def test_the_text_is_the_unmet_list_then_the_sentence_then_the_scopes() -> None:
    decision = denied(no("auth:scope:notes:write"), no("env:production"))
    assert denial_text(decision) == ("Tool 't' was not run: unmet requirements: auth:scope:notes:write, "
                                     "env:production. Ask an operator. Missing scopes: notes:write.")


def test_refusals_the_guard_did_not_evaluate() -> None:
    unlisted = denied(refusal=Refusal(Refused.UNLISTED, "no server lists a tool of that name"))
    assert denial_text(unlisted) == ("Tool 't' was not run: no server lists a tool of that name. "
                                     "Ask an operator.")
    malformed = denied(no("(malformed requirements)"),
                       refusal=Refusal(Refused.MALFORMED, "its requirements cannot be read"))
    assert denial_text(malformed) == ("Tool 't' was not run: unmet requirements: "
                                      "(malformed requirements). Ask an operator.")
    unusable = denied(down("(policy unusable)"),
                      refusal=Refusal(Refused.UNUSABLE, "the gateway's policy is unusable"))
    assert denial_text(unusable) == "the gateway's policy is unusable"  # the service's fault, alone


def test_every_form_of_a_denial_says_the_same() -> None:
    decision = denied(no("sign:it"))
    text = denial_text(decision, SIGNING_NO_URL)
    assert text == f"Tool 't' was not run: unmet requirements: sign:it. Sign at {PAGE}."
    assert denial_result(decision, recipient=SIGNING_NO_URL)["content"][0]["text"] == text
    error = denial_error(decision, SIGNING_NO_URL)
    assert error is not None and error.message == text
    data = denial_error_data(decision, SIGNING_NO_URL)  # the payload is SPEC §3's, no words added
    assert data is not None and data["unmet"] == ["sign:it"] and "said" not in str(data)


ALICE = Identity(principal=Principal.from_claims({"sub": "alice"}))
REFUSED_TOKEN = Identity(failure="signature does not match")
VERIFIER_DOWN = Identity(failure="JWKS did not answer", error=True)


@pytest.mark.parametrize(("decision", "identity", "challenged"), [
    (denied(no("auth:oauth2")), ANONYMOUS_IDENTITY, True),
    (denied(no("auth:oauth2")), REFUSED_TOKEN, True),
    (denied(down("auth:oauth2")), VERIFIER_DOWN, False),  # a retry may pass: no sign-in asked
    (denied(no("auth:oauth2"), no("env:production")), ANONYMOUS_IDENTITY, False),  # more is missing
    (denied(no("auth:oauth2"), confidential=frozenset({"auth:oauth2"})), ANONYMOUS_IDENTITY, False),
    (denied(no("env:production")), ANONYMOUS_IDENTITY, False),
    (denied(no("auth:oauth2")), ALICE, False),  # (a verified caller always meets it)
    (Decision("t", True, (Outcome.satisfied("auth:oauth2"),)), ANONYMOUS_IDENTITY, False),
])
def test_only_a_call_that_lacks_a_token_alone_is_the_401(decision: Decision, identity: Identity,
                                                         challenged: bool) -> None:
    assert needs_sign_in(decision, identity) is challenged


SELF = '[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
BOB = Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": "bob"}))


@pytest.mark.parametrize(("answer", "said"), [
    ("decline", "The caller declined."),
    (None, "The caller did not answer in time; call again to be asked again.")])
async def test_an_unanswered_or_declined_question_says_so(answer: Answer | None, said: str) -> None:
    """The `self` approval's words for a caller who said no, or did not answer (the request
    expired: the next call asks again)."""
    guard = Guard(parse_policy(SELF.encode(), "p.toml"), entry_points=False)
    asked = Sidecar(can_ask=True)
    await guard.check("wipe", BOB, {}, sidecar=asked)
    held = asked.held["approval:confirm"]
    assert isinstance(held, HeldApproval) and held.question is not None
    taken = await held.answer(answer)  # (an accept that was kept: never for these answers)
    again = Sidecar(can_ask=True, answered=held.question.request_id, accepted=taken)
    decision = await guard.check("wipe", BOB, {}, sidecar=again)
    recipient = recipient_of(decision, guard.snapshot.registry, url_elicitation=True,
                             identity=lambda: guard.authenticate(BOB), arguments={}, held=again.held)
    assert not isinstance(recipient, Recipient)
    shaped = await recipient
    assert denial_text(decision, shaped) == (
        f"Tool 'wipe' was not run: unmet requirements: approval:confirm. {said}")
    assert denial_result(decision, recipient=shaped)["_meta"][AUTHORIZATION_META_KEY][
        "remediation"] == "unavailable"
