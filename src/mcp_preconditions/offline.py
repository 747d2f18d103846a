"""What `check` and the explorer cannot decide offline, shown as what it is, never as allowed (SPEC
§14, §15): a `credential:KEY` is obtained per call by the gateway, for that caller (an account
they connected, their token exchanged, a secret kept for them); an `approval:NAME` is given per
call by a person. `OfflineCredentials` is the `credential` namespace where no gateway obtains
anything; `verdict` is the one word `check` and the page say for a decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from .approvals import decided_by
from .credentials.obtaining import CREDENTIAL_ORDER
from .late import Found, LateCall
from .outcomes import Decision, Outcome, Status
from .requirements import body_of
from .resolvers.base import Registry

NAMESPACE = "credential"
NEEDS_A_CREDENTIAL = "needs_a_credential"  # an outcome's status as `check` and the page show it
_KIND_WORDS = {"oauth": "an account the caller connects (kind oauth)",
               "token-exchange": "the caller's token, exchanged (kind token-exchange)",
               "per-subject": "a secret kept for the caller (kind per-subject)"}

Verdict = Literal["allowed", "denied", "needs_approval", "needs_credential"]


class OfflineCredentials:
    """`credential:KEY` where nothing obtains a credential: every one is unsatisfied, its reason
    saying it is decided per call at the gateway (transient: a caller may have one). `kinds`: each
    server with credentials and its kind (a gateway config's); None takes any KEY (a tools list
    the gateway showed: it names its own servers)."""

    namespace = NAMESPACE
    forms = ("credential:KEY, a server the gateway reaches with each caller's own credential",)
    order = CREDENTIAL_ORDER  # decided where the gateway decides it: after every other requirement
    not_a_condition = ("a credential is not a grant condition: it is obtained for a call about to "
                       "reach its server, after every other requirement")

    def __init__(self, kinds: Mapping[str, str] | None = None) -> None:
        self.kinds = dict(kinds) if kinds is not None else None

    def stage(self, requirements: Sequence[str]) -> _Unobtained:
        return _Unobtained(self, tuple(requirements))

    def validate(self, requirement: str) -> str | None:
        server = body_of(requirement)
        if not server:
            return "credential: needs a server key (credential:KEY)"
        if self.kinds is None or server in self.kinds:
            return None
        known = ", ".join(repr(k) for k in self.kinds) or "none"
        return f"no server {server!r} has credentials (servers with credentials: {known})"

    def resolve(self, requirement: str, context: object) -> Outcome:
        server = body_of(requirement)
        kind = self.kinds.get(server) if self.kinds is not None else None
        what = _KIND_WORDS.get(kind or "", "the caller's own credential")
        return Outcome(requirement, Status.UNSATISFIED, f"decided per call, at the gateway: {what} "
                       f"for server '{server}', which nothing offline can obtain", transient=True)


class _Unobtained:
    """A tool's credentials as a late stage (late.py) that obtains nothing: each unsatisfied."""

    namespace = NAMESPACE
    timeout = None

    def __init__(self, resolver: OfflineCredentials, requirements: tuple[str, ...]) -> None:
        self.requirements = requirements
        self._found = tuple(resolver.resolve(r, None) for r in requirements)

    def decide(self, call: LateCall) -> Found:
        return self._found

    def release(self, call: LateCall) -> None:
        return None


def credential_offline(requirement: str, registry: Registry | None) -> bool:
    """Whether `requirement` is a credential nothing here can obtain (`OfflineCredentials`)."""
    return (registry is not None and requirement.startswith(NAMESPACE + ":")
            and isinstance(registry.get(NAMESPACE), OfflineCredentials))


def verdict(decision: Decision, registry: Registry) -> Verdict:
    """`allowed`; `needs_credential` or `needs_approval` when nothing but a credential the gateway
    obtains per call and approvals a person gives stands before the call (a credential is decided
    first: the approval is asked once it is obtained); else `denied`."""
    if decision.allowed:
        return "allowed"
    unmet = decision.unmet
    if not unmet or decision.errors or decision.refusal is not None:
        return "denied"
    credentials = [r for r in unmet if credential_offline(r, registry)]
    if all(r in credentials or decided_by(r, registry) is not None for r in unmet):
        return "needs_credential" if credentials else "needs_approval"
    return "denied"
