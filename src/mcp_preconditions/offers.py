"""What a denial may offer its caller for an unmet requirement (SPEC §15): an `Offer` (remediation,
hints, and what to do in words), made for one denied call (`OfferCall`) by a `Remedial`: a resolver
for its namespace, or what a late stage holds for the call (late.py `Held`). remedies.py asks them
and shapes the denial.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .envelope import Remediation, RemediationHint
from .outcomes import Decision
from .principal import Identity


class Offer(NamedTuple):
    """The remedy of one unmet requirement: its remediation, hints (only with `available`), and
    `said`: what to do, in plain words, lower case and without a final stop ("connect your account
    for wiki at https://gw.example/connections"). The words go to every client, whatever the
    remediation (a page that signs the person in is no secret); "" says nothing, and an
    `unavailable` remedy that says nothing is "ask an operator"."""

    remediation: Remediation
    hints: tuple[RemediationHint, ...] = ()
    said: str = ""


class OfferCall(NamedTuple):
    """What an `offer` knows of the denied call: its Decision (tool, subject, revision, context ID),
    the caller's verified Identity, the arguments, and whether the client can be given a URL (an
    offer made for one that cannot is shaped as `undisclosed` all the same)."""

    decision: Decision
    identity: Identity
    arguments: Mapping[str, Any] | None
    url_elicitation: bool
    # What the call's late stages hold for it (late.py `Sidecar.held`), by requirement.
    held: Mapping[str, Any] = MappingProxyType({})


@runtime_checkable
class Remedial(Protocol):
    """What can say how to fix an unmet requirement: a resolver, for its namespace's requirements,
    or a late stage's answer for the call (late.py `Held`), which is asked first. `offer` is asked
    once per denial for each requirement that ended `unsatisfied` (not `error`, and never when a
    confidential requirement is unmet: that denial is `undisclosed` whatever else), within
    remedies.OFFER_SECONDS. It returns the Offer (a `url` hint to a page, say), or None for the
    table's default. An offer that fails, is late or is malformed is `undisclosed`."""

    def offer(self, requirement: str, call: OfferCall) -> Awaitable[Offer | None]: ...
