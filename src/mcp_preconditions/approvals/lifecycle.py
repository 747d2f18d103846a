"""The life of one approval request (SPEC §15), as pure functions both stores apply:

    requested --approve--> approved --use (once)--> used
        |                      \\--(expires_seconds after it was given)--> expired
        |--refuse--> refused
        \\--(not decided in time)--> expired

Every function takes the request and `now` (seconds) and returns the request after the transition
plus the results it made (each counted once, by the operation that made it), or why it was refused.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Literal

from .binding import Binding, Party


class State(enum.StrEnum):
    """Where a request stands; also the `result` values of records and metrics (SPEC §15)."""

    REQUESTED = "requested"
    APPROVED = "approved"
    REFUSED = "refused"
    EXPIRED = "expired"
    USED = "used"


# Why a transition did not happen. `unknown`: no such request, or it expired; `decided`: it was
# decided already; `own`: an approver may not approve their own call (or, for a `self` approval,
# only the caller answers); `unbound`: another call's approval; `not_approved`: nothing to use.
Refusal = Literal["unknown", "decided", "own", "unbound", "not_approved"]
Decision = Literal["approve", "refuse"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One request for an approval of one bound call, and where it stands. `expires_at` is when
    the current state ends: a request's deadline to be decided, then an approval's (or refusal's)
    `lifetime` from the moment it was given."""

    id: str
    binding: Binding
    self_approval: bool  # approvers = "self": only the caller answers, in flight
    state: State
    created_at: float
    expires_at: float
    lifetime: float  # expires_seconds
    decided_by: Party | None = None
    decided_at: float | None = None
    used_at: float | None = None

    @property
    def blocks(self) -> bool:
        """Whether this request answers for its binding (no new one is made): one still waiting, or
        an approval not used yet, or an approver's refusal (a `self` refusal is a "no" for that
        question only: the next call asks again)."""
        return self.state in (State.REQUESTED, State.APPROVED) or (
            self.state is State.REFUSED and not self.self_approval)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for a store and for the approval page (never a token)."""
        b = self.binding
        return {"id": self.id, "approval": b.approval, "tool": b.tool, "arguments": b.arguments,
                "caller": b.caller.to_dict() if b.caller else None, "revision": b.revision,
                "self": self.self_approval, "state": self.state.value, "created_at": self.created_at,
                "expires_at": self.expires_at, "lifetime": self.lifetime,
                "decided_by": self.decided_by.to_dict() if self.decided_by else None,
                "decided_at": self.decided_at, "used_at": self.used_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApprovalRequest:
        """The inverse of `to_dict`; raises KeyError, TypeError or ValueError on anything else."""
        caller, by = data["caller"], data["decided_by"]
        binding = Binding(str(data["approval"]), str(data["tool"]), str(data["arguments"]),
                          Party(str(caller["issuer"]), str(caller["subject"])) if caller else None,
                          str(data["revision"]))
        return cls(str(data["id"]), binding, bool(data["self"]), State(data["state"]),
                   float(data["created_at"]), float(data["expires_at"]), float(data["lifetime"]),
                   Party(str(by["issuer"]), str(by["subject"])) if by else None,
                   _number(data["decided_at"]), _number(data["used_at"]))


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


Step = tuple[ApprovalRequest, tuple[State, ...]]


def requested(request_id: str, binding: Binding, self_approval: bool, now: float, wait: float,
              lifetime: float) -> ApprovalRequest:
    """A new request: it must be decided within `wait` seconds (`timeout_seconds` for a `self`
    question, `expires_seconds` for an approver)."""
    return ApprovalRequest(request_id, binding, self_approval, State.REQUESTED, now, now + wait,
                           lifetime)


def aged(request: ApprovalRequest, now: float) -> Step:
    """The request as of `now`: one whose state has run out (not decided, not used in time) is
    expired."""
    if request.state in (State.REQUESTED, State.APPROVED, State.REFUSED) and now >= request.expires_at:
        return replace(request, state=State.EXPIRED), (State.EXPIRED,)
    return request, ()


def decide(request: ApprovalRequest, decision: Decision, approver: Party | None, now: float
           ) -> Step | Refusal:
    """An answer to a waiting request. Nobody approves their own call; a `self` request is answered
    by its caller only (`approver` None for an anonymous caller on the connection it asked)."""
    request, made = aged(request, now)
    if request.state is State.EXPIRED:
        return "unknown"
    if request.state is not State.REQUESTED:
        return "decided"
    caller = request.binding.caller
    allowed = (approver == caller if request.self_approval
               else approver is not None and approver != caller)
    if not allowed:
        return "own"
    state = State.APPROVED if decision == "approve" else State.REFUSED
    return replace(request, state=state, decided_by=approver, decided_at=now,
                   expires_at=now + request.lifetime), (*made, state)


def use(request: ApprovalRequest, binding: Binding, now: float) -> Step | Refusal:
    """The one use of an approval, by the call it is bound to."""
    request, made = aged(request, now)
    if request.binding != binding:
        return "unbound"
    if request.state is not State.APPROVED:
        return "not_approved"
    return replace(request, state=State.USED, used_at=now), (*made, State.USED)


def release(request: ApprovalRequest, now: float) -> Step:
    """Undo a use whose call did not run after all (a quota refused it afterwards): approved again
    until its own expiry. Not a result: nothing is counted."""
    if request.state is State.USED and now < request.expires_at:
        return replace(request, state=State.APPROVED, used_at=None), ()
    return request, ()


def expire(request: ApprovalRequest, now: float) -> Step:
    """A `self` question nobody answered in time (or whose caller went away): expired now."""
    request, made = aged(request, now)
    if request.state is State.REQUESTED:
        return replace(request, state=State.EXPIRED, expires_at=now), (State.EXPIRED,)
    return request, made
