"""`credential:KEY` (SPEC §14): satisfied when the gateway holds or obtains a credential for this
caller and server KEY. No credential is `unsatisfied`; an authorization server or store that fails
is `error`. Outcomes are transient (an account may be connected, a token renewed), and their
reasons never hold a secret: the credential itself travels beside the outcome (obtaining.py).

The guard decides it after every other requirement of a call (a call refused for another reason
costs no exchange): a late stage (late.py, stage.py) takes a credential at hand at once and else
awaits it; `resolve`, the plain resolver protocol, only looks and never allows
(docs/credentials.md); `offer` (offers.Remedial) is the connect link of an unmet one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..outcomes import Outcome, Status
from ..requirements import body_of
from .obtaining import (
    CREDENTIAL_ORDER,
    NAMESPACE,
    NOT_OBTAINED,
    CredentialSource,
    CredentialSources,
    requirement_for,
)
from .stage import CredentialStage

__all__ = ["NAMESPACE", "NOT_OBTAINED", "CredentialResolver", "CredentialSource", "requirement_for"]

class CredentialResolver(CredentialSources):
    """The `credential` namespace for the servers of one gateway that have credentials."""

    namespace = NAMESPACE
    forms = ("credential:KEY, where the gateway's config has [servers.KEY.credentials]",)
    order = CREDENTIAL_ORDER  # a late stage: after every other requirement, before quotas
    not_a_condition = ("a credential is not a grant condition: it is obtained for a call about to "
                       "reach its server, after every other requirement")

    def stage(self, requirements: Sequence[str]) -> CredentialStage:
        """A tool's `credential:` requirements as its late stage (compiled once per snapshot)."""
        return CredentialStage(self, requirements)

    def validate(self, requirement: str) -> str | None:
        server = body_of(requirement)
        if server in self.sources:
            return None
        known = ", ".join(repr(k) for k in self.sources) or "none"
        return f"no server {server!r} has credentials (servers with credentials: {known})"

    def resolve(self, requirement: str, context: object) -> Outcome:
        """The plain protocol looks only, and never allows: a credential is obtained by `obtain`,
        which the guard runs last. Transient, so list filtering counts the tool as callable."""
        return Outcome(requirement, Status.UNSATISFIED, NOT_OBTAINED, transient=True)
