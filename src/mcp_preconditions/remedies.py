"""What a denial offers its caller for each unmet requirement (SPEC §15's table, `remedy_of`), with
the offers of the call's late stages and of the resolvers (offers.py: `Remedial`), asked by
`recipient_of` before the denial is shaped. denials.py turns the remedies into the SEP-2643
envelope, and `what_to_do` into the one sentence of the denial's text that says what to do, for
every client. No MCP SDK here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .envelope import AuthorizationDenial, Remediation, RemediationHint, parse
from .namespaces import AUTHORIZATION_SERVERS
from .offers import Offer, OfferCall, Remedial
from .outcomes import Decision, Outcome, Status
from .principal import Identity
from .resolvers.base import Registry

__all__ = ["ASK_AN_OPERATOR", "AVAILABLE", "DECLARED", "NOBODY", "OFFER_SECONDS", "QUOTA_PREFIX",
           "SCOPE_PREFIX", "UNAVAILABLE", "UNDISCLOSED", "Offer", "OfferCall", "Recipient",
           "Remedial", "declares_url_elicitation", "recipient_of", "remedy_of", "what_to_do"]

log = logging.getLogger(__name__)

SCOPE_PREFIX = "auth:scope:"
QUOTA_PREFIX = "quota:"
OFFER_SECONDS = 5.0  # a resolver's offer that takes longer is given up: the remedy is undisclosed


_SATISFIED, _UNSATISFIED = Status.SATISFIED, Status.UNSATISFIED
ASK_AN_OPERATOR = "ask an operator"
AVAILABLE = Offer(Remediation.AVAILABLE)
UNAVAILABLE = Offer(Remediation.UNAVAILABLE, (), ASK_AN_OPERATOR)
UNDISCLOSED = Offer(Remediation.UNDISCLOSED)
# An `error` (a backend down, a timeout): a retry may pass. An authorization server (a token's
# verifier, an exchange, a refresh) is named as such; any other backend is not named.
_RETRY_AUTH = Offer(Remediation.UNDISCLOSED, (), "the authorization server did not answer; try again")
_RETRY = Offer(Remediation.UNDISCLOSED, (), "a service the check needs did not answer; try again")
_NO_OFFERS: Mapping[str, Offer] = MappingProxyType({})


class Recipient(NamedTuple):
    """Who a denial goes to: whether its client declared URL-mode elicitation
    (`capabilities.elicitation.url`: only such a client is given a `url` hint), and what resolvers
    offered for the call's unmet requirements (`recipient_of`)."""

    url_elicitation: bool = False
    offers: Mapping[str, Offer] = _NO_OFFERS


NOBODY = Recipient()  # a client that declared nothing, and nothing offered
DECLARED = Recipient(url_elicitation=True)  # a client that declared URL elicitation, nothing offered


def declares_url_elicitation(capabilities: object) -> bool:
    """Whether a client's declared capabilities (the raw JSON: an `initialize`'s, or a 2026-07-28
    request's `_meta`) include URL-mode elicitation (`elicitation.url`, an object)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    return isinstance(elicitation, Mapping) and isinstance(elicitation.get("url"), Mapping)


def remedy_of(outcome: Outcome, recipient: Recipient) -> Offer:
    """SPEC §15's remedy of one unmet requirement (not a quota: no remedy, not an authorization
    denial): an `error` (a backend down, a timeout) is `undisclosed` (a retry may pass; nobody
    says when), "try again"; a resolver's offer, made `undisclosed` when it needs a URL the client
    cannot be given (its words kept: they name no single-use link); `auth:scope:` `available`
    (its hint is built once, for every missing scope); anything else `unavailable`, "ask an
    operator" (`auth:oauth2` included: over HTTP its remedy is the transport's 401)."""
    requirement = outcome.requirement
    if outcome.status is Status.ERROR:
        return _RETRY_AUTH if requirement.startswith(AUTHORIZATION_SERVERS) else _RETRY
    offer = recipient.offers.get(requirement) if recipient.offers else None
    if offer is not None:
        if not recipient.url_elicitation and any(h.type == "url" for h in offer.hints):
            return Offer(Remediation.UNDISCLOSED, (), offer.said)
        return offer
    return AVAILABLE if requirement.startswith(SCOPE_PREFIX) else UNAVAILABLE


def what_to_do(decision: Decision, recipient: Recipient) -> str:
    """The one plain sentence of a denial's text that says what to do (SPEC §15), for every
    client, from the remedies of its unmet requirements (`remedy_of`): "" when a confidential
    requirement is unmet (a denial then says nothing beyond SPEC §3, nor hints at it), for quotas
    alone (the text says when to retry) and when no remedy has words (missing scopes: the text
    names them). One sentence, the most pressing: what only someone else can change comes first
    (an `unavailable` remedy: "ask an operator", "refused by an approver"), then what the caller
    does (a resolver's words: connect an account, wait for an approver), then "try again"."""
    if decision.allowed:
        return ""
    confidential = decision.confidential
    final = acting = retrying = ""
    for outcome in decision.outcomes:
        if outcome.status is _SATISFIED or outcome.requirement.startswith(QUOTA_PREFIX):
            continue
        if outcome.requirement in confidential:
            return ""
        offer = remedy_of(outcome, recipient)
        if offer.remediation is Remediation.UNAVAILABLE:
            final = final or offer.said or ASK_AN_OPERATOR
        elif outcome.status is Status.ERROR:
            retrying = retrying or offer.said
        else:
            acting = acting or offer.said
    if decision.refusal is not None and not decision.outcomes:  # a name nobody lists
        final = ASK_AN_OPERATOR
    return final or acting or retrying


def recipient_of(decision: Decision, registry: Registry, *, url_elicitation: bool,
                 identity: Callable[[], Awaitable[Identity]],
                 arguments: Mapping[str, Any] | None, held: Mapping[str, Any] | None = None
                 ) -> Recipient | Awaitable[Recipient]:
    """The Recipient of a denial: what its client declared, and the offers for its unmet
    requirements: what a late stage holds for the call (`held`, the call's `Sidecar.held`: late.py
    `Held.offer`) is asked first, else the `Remedial` resolver of the requirement's namespace. At
    once when nobody is to be asked (the static namespaces offer nothing: the table decides), else
    a coroutine that asks them (`identity`, the caller's, is awaited first)."""
    offering = _offering(registry)
    asked: list[tuple[str, Remedial]] = []
    confidential = decision.confidential
    for outcome in decision.outcomes if offering or held else ():
        if outcome.status is _SATISFIED:
            continue
        requirement = outcome.requirement
        if requirement in confidential:  # `undisclosed` whatever is offered: ask nobody
            return DECLARED if url_elicitation else NOBODY
        if outcome.status is not _UNSATISFIED:
            continue
        answer = held.get(requirement) if held else None
        offers = answer if answer is not None and callable(getattr(answer, "offer", None)) else \
            offering.get(requirement.partition(":")[0])
        if offers is not None:
            asked.append((requirement, offers))
    if not asked:
        return DECLARED if url_elicitation else NOBODY
    return _offers(decision, asked, url_elicitation, identity, arguments, held or {})


# The one registry last asked about, and its Remedial resolvers by namespace: a registry is built
# once per policy snapshot and never changes, and most have none (then a denial asks nobody).
_last: tuple[Registry, Mapping[str, Remedial]] | None = None


def _offering(registry: Registry) -> Mapping[str, Remedial]:
    global _last
    last = _last
    if last is not None and last[0] is registry:
        return last[1]
    found: dict[str, Remedial] = {}
    for namespace in registry.namespaces():
        resolver = registry.get(namespace)
        if callable(getattr(resolver, "offer", None)):
            found[namespace] = resolver  # type: ignore[assignment]
    _last = (registry, found)
    return found


async def _offers(decision: Decision, asked: list[tuple[str, Remedial]], url_elicitation: bool,
                  identity: Callable[[], Awaitable[Identity]],
                  arguments: Mapping[str, Any] | None, held: Mapping[str, Any]) -> Recipient:
    call = OfferCall(decision, await identity(), arguments, url_elicitation, held)
    offers = {requirement: await _offer(offering, requirement, call)
              for requirement, offering in asked}
    return Recipient(url_elicitation, {r: o for r, o in offers.items() if o is not None})


async def _offer(offering: Remedial, requirement: str, call: OfferCall) -> Offer | None:
    """One offer, checked by the rules an envelope is read by (envelope.parse)."""
    try:
        async with asyncio.timeout(OFFER_SECONDS):
            offer = await offering.offer(requirement, call)
        if offer is None:
            return None
        if not isinstance(offer, Offer) or not isinstance(offer.remediation, Remediation) or not all(
                isinstance(h, RemediationHint) for h in offer.hints):
            raise ValueError(f"an offer must be an Offer of RemediationHints, got {offer!r:.80}")
        parse(AuthorizationDenial(offer.remediation, "checked", offer.hints).to_dict())
        return offer
    except Exception as exc:  # a broken offer must not break the denial: it is undisclosed
        log.warning("resolver %r: its offer for %r was ignored: %s",
                    getattr(offering, "namespace", requirement.partition(":")[0]), requirement,
                    type(exc).__name__ if isinstance(exc, TimeoutError) else exc)
        return UNDISCLOSED
