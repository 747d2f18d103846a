"""Requirements decided after every other requirement of a call (SPEC §13 quotas, §14 credentials,
§15 approvals): a resolver that declares `order` and `stage(requirements)` has a tool's
requirements of its namespace compiled into one `LateStage`; the snapshot decides a call's stages
in `order`, each only once every other requirement and every earlier stage held (a call refused
for another reason never costs an exchange, never takes a quota unit).

And the `Sidecar`: what one call carries beside its decision, never inside it. The adapter that
will forward the call makes one and hands it to `Guard.check`; stages read the caller's raw token
from it and leave there what the forwarding needs (a credential) and what the record says.

How a next stage plugs in (docs/ARCHITECTURE.md says it too): its resolver declares
`order` (credentials 100, approvals 500, quotas 900: a quota unit is taken last, by a call about
to run),
`not_a_condition` (the error when a capability grant names one) and
`stage(requirements) -> LateStage`. Its stage's `decide(call)` gives one outcome per requirement,
at once or awaited (under `timeout`, the snapshot's lookup timeout when None); `release(call)`
gives back what `decide` took when a later stage refuses the call. A stage may also offer `quick`
(`Quick`): the answer `decide` would give at once, for the common call it knows already, or None
for `decide` to give; a tool whose only late stage it is asks it first (no `LateCall` is built).
Nothing else changes: listing filtering skips late stages (their outcomes are transient),
capability grants refuse them as conditions, and the one rule (`outcomes.ruling`) decides on every
outcome in the tool's order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from .outcomes import Outcome
from .principal import Identity

CREDENTIAL_ORDER = 100
APPROVAL_ORDER = 500  # after a credential (an approval is not spent on a call that cannot run)
QUOTA_ORDER = 900

Found = tuple[Outcome, ...]  # one stage's outcomes, one per requirement, in its order


class Sidecar:
    """What one call carries beside its decision. `token`: the caller's raw bearer token (set by
    `Guard.check` from the call's credentials), read by a stage that must present it somewhere
    (token exchange) and by nothing else. `held`: by requirement, what a stage left for the
    forwarding (a `credentials.HeldCredential`, an `approvals.HeldApproval`). `notes`: fields the
    decision record adds (`{"credential": {"kind", "cached"}}`): never a secret. `can_ask`: the
    adapter can ask the caller in flight (its client declared form elicitation: a `self`
    approval's question); `answered`: the approval question this very call continues or just
    answered, and `accepted` whether its caller's accept of it was kept (None: not answered yet;
    approvals/plan.py). `finished`: told whether the call was allowed, once its Decision is made
    (an approval counts `used` only for a call that runs)."""

    __slots__ = ("accepted", "answered", "can_ask", "finished", "held", "notes", "token")

    def __init__(self, *, can_ask: bool = False, answered: str | None = None,
                 accepted: bool | None = None) -> None:
        self.token: str | None = None
        self.held: dict[str, Any] = {}
        self.notes: dict[str, Any] = {}
        self.can_ask = can_ask
        self.answered = answered
        self.accepted = accepted
        self.finished: list[Callable[[bool], None]] = []

    def __repr__(self) -> str:  # never the token
        return f"Sidecar(held={sorted(self.held)}, notes={self.notes})"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Sidecar holds a caller's token: it is not pickled or copied")


class LateCall(NamedTuple):
    """One call as a late stage sees it: the tool's name, the caller, the arguments, the policy
    revision deciding it, and its sidecar (None: the adapter forwards nothing beside the decision,
    so a stage that must leave something there refuses)."""

    tool: str
    identity: Identity
    arguments: Mapping[str, Any] | None
    revision: str
    sidecar: Sidecar | None


class LateStage(Protocol):
    """One tool's requirements of one late namespace, compiled once per snapshot."""

    namespace: str
    requirements: tuple[str, ...]
    timeout: float | None  # for an awaited decision; None: the snapshot's lookup timeout

    def decide(self, call: LateCall) -> Found | Awaitable[Found]:
        """One outcome per requirement (their order). Raising is an `error` for every one."""
        ...

    def release(self, call: LateCall) -> Awaitable[None] | None:
        """A later stage refused the call that `decide` allowed: give back what it took."""
        ...


# A tool's only late stage's answer for (caller, sidecar) when it has one at once, with the same
# effects as `decide` (what it leaves in the sidecar, what it counts); None: `decide` decides. It
# never raises for a call it cannot decide (a raise is taken as None).
Quick = Callable[[Identity, "Sidecar | None"], "Found | None"]


class LateResolver(Protocol):
    """A resolver whose requirements are decided late: in `order`, by the stage it compiles."""

    namespace: str
    order: int
    not_a_condition: str  # why a capability grant cannot name one (it only looks)

    def stage(self, requirements: Sequence[str]) -> LateStage: ...


def late_resolver(resolver: object) -> LateResolver | None:
    """The resolver as a late one, or None when it decides with the others."""
    if isinstance(getattr(resolver, "order", None), int) and callable(getattr(resolver, "stage", None)):
        return resolver  # type: ignore[return-value]
    return None
