"""One approval request's life (SPEC §15): what it is bound to, what a person is shown of it, how it
moves, and what it leaves.

What an approval is bound to (`Binding`, `bind`): the approval's name, the visible tool name, the
canonical JSON (RFC 8785) of the call's arguments, the caller (issuer and subject) and the policy
revision. An approval serves a call only when all of these are equal, code point for code point.

What a person is shown of it, on the approval page and in the `self` question alike (`Question`:
what the caller is asked in flight, late.py: an `elicitation/create` in form mode at 2025-11-25,
an input round at 2026-07-28): the tool and every argument (whole), every character they could
not see or could misread written as its JSON escape (`visible`).

How a request moves, as pure functions both stores apply:

    requested --approve--> approved --use (once)--> used
        |                      \\--(expires_seconds after it was given)--> expired
        |--refuse--> refused
        \\--(not decided in time)--> expired

Every function takes the request and `now` (seconds) and returns the request after the transition
plus the results it made (each counted once, by the operation that made it), or why it was refused.

What it leaves behind: the `approval` field of a decision record (`ApprovalNote`), and the results
the series `mcp_preconditions_approvals_total{approval,result}` counts, as they are told to it
(`counting`). An approval's label is its name in the policy (bounded); no caller appears in either.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple, Protocol

from ..envelope import canonical_json
from ..late import input_round as round_of
from ..principal import Identity

log = logging.getLogger("mcp_preconditions.approvals")

# Arguments larger than this (as canonical JSON) are not bound: an approver could not read them,
# and a store would keep them for every pending request.
MAX_ARGUMENTS_BYTES = 65_536


@dataclass(frozen=True, slots=True)
class Party:
    """A verified person or client: the token's issuer (`iss`, "" when it has none) and subject
    (`sub`, else `client_id`: the subject every decision record names)."""

    issuer: str
    subject: str

    @classmethod
    def of(cls, identity: Identity) -> Party | None:
        """The party of a verified identity; None for an anonymous or unverified caller."""
        principal = identity.principal
        if principal is None or principal.subject is None:
            return None
        issuer = principal.claims.get("iss")
        return cls(issuer if isinstance(issuer, str) else "", principal.subject)

    def to_dict(self) -> dict[str, str]:
        return {"issuer": self.issuer, "subject": self.subject}


@dataclass(frozen=True, slots=True)
class Binding:
    """One call as an approval sees it. `key` (a SHA-256 of the canonical JSON of every part) is
    what a store files it under: no subject or argument appears in a store key. `caller` is None
    for an anonymous caller, whom only a `self` approval serves (the question goes to that very
    connection)."""

    approval: str
    tool: str
    arguments: str  # canonical JSON
    caller: Party | None
    revision: str
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        who = [self.caller.issuer, self.caller.subject] if self.caller is not None else None
        parts = canonical_json([self.approval, self.tool, self.arguments, who, self.revision])
        object.__setattr__(self, "key", hashlib.sha256(parts.encode()).hexdigest())


def bind(approval: str, tool: str, arguments: Mapping[str, Any] | None, identity: Identity,
         revision: str) -> Binding | str:
    """The binding of one call, or why the call cannot be bound (its arguments have no canonical
    form or are too large). Absent arguments are `{}`."""
    try:
        text = canonical_json(dict(arguments or {}))
    except ValueError as exc:
        return f"its arguments have no canonical JSON form (RFC 8785): {exc}"
    size = len(text.encode())
    if size > MAX_ARGUMENTS_BYTES:
        return (f"its arguments are too large to approve ({size} bytes of canonical JSON, at most "
                f"{MAX_ARGUMENTS_BYTES})")
    return Binding(approval, tool, text, Party.of(identity), revision)


# -- what a person is shown of a request: the `self` question, and the approval page's text ------
# Controls, format characters (the bidirectional overrides and isolates, zero-width ones), line
# and paragraph separators, spaces other than U+0020, private-use, surrogate and unassigned code
# points. (A new line is kept: pretty-printed JSON has them, and a string's are escaped already.)
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"))


def hidden(char: str) -> bool:
    """Whether a person could not see `char`, or could misread what follows it."""
    return char != " " and char != "\n" and unicodedata.category(char) in _HIDDEN


def escape(char: str) -> str:
    """`char` as JSON writes it escaped (`\\u202e`; beyond the BMP, a surrogate pair)."""
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every hidden character written as its JSON escape (within a JSON string, the
    same value)."""
    return "".join(escape(c) if hidden(c) else c for c in text)


@dataclass(frozen=True, slots=True)
class Question:
    """Ask the caller whether `tool` may run with `arguments` (canonical JSON), once; the answer is
    due within `timeout_seconds`. `request_id` names the request it answers (an input round's
    state carries it to the retry). A `late.Question`."""

    request_id: str
    approval: str
    tool: str
    arguments: str
    timeout_seconds: float

    def message(self) -> str:
        """The question, with every argument (never shortened: what is not shown could hide what
        runs), each character a person could not see written as its escape."""
        shown = json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False, sort_keys=True)
        return (f"Approve one call of tool '{visible(self.tool)}' (approval '{self.approval}') with "
                f"these arguments?\n{visible(shown)}")

    def elicitation_params(self) -> dict[str, Any]:
        """The params of the `elicitation/create` request (form mode; accepting is the answer, so
        the form asks for nothing else)."""
        return {"mode": "form", "message": self.message(),
                "requestedSchema": {"type": "object", "properties": {}}}

    def input_round(self) -> dict[str, Any]:
        """The `input_required` result that asks it at 2026-07-28 (`late.input_round`)."""
        return round_of(self.request_id, self.elicitation_params())


# -- how a request moves ------------------------------------------------------------------------
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


# -- what a request leaves behind ---------------------------------------------------------------
METRIC = "mcp_preconditions_approvals_total"
METRIC_HELP = ("Approval requests and what became of them, by approval and result (requested, "
               "approved, refused, expired, used).")
METRIC_LABELS = ("approval", "result")
RESULTS = tuple(state.value for state in State)


class ApprovalNote(NamedTuple):
    """The decision record's `"approval": {"name", "id", "result"}`: the request a call met, and
    where it stood for that call (`requested`: waiting for a decision; `refused`; `expired`: not
    answered in time; `used`: this call used the approval)."""

    name: str
    id: str
    result: State

    def to_record(self) -> dict[str, str]:
        return {"name": self.name, "id": self.id, "result": self.result.value}


# One (approval name, result) per transition an operation made: what the metric counts.
Event = tuple[str, State]


def events_of(name: str, made: tuple[State, ...]) -> tuple[Event, ...]:
    return tuple((name, state) for state in made)


# Told each (approval name, result) an operation made: the approvals_total metric. No caller.
Observe = Callable[[str, str], None]
Count = Callable[[Iterable[Event]], None]  # each result an operation made, to the metric


class Results(Protocol):
    """Whoever holds the metric's callback, set when it counts (`namespaces.LiveSources`: an
    owner may set it once the guard is made, `Guard.live`)."""

    approval_results: Observe | None


def told_to(owner: Results) -> Observe:
    """An `Observe` that tells `owner.approval_results` as it is when a result is counted."""
    def observe(name: str, result: str) -> None:
        told = owner.approval_results
        if told is not None:
            told(name, result)
    return observe


def counting(observe: Observe | None) -> Count:
    """What tells `observe` each result an operation made (None: nothing counts); counting never
    changes an answer, so a failing `observe` is logged and the rest are told."""
    def count(events: Iterable[Event]) -> None:
        if observe is None:
            return
        for name, state in events:
            try:
                observe(name, state.value)
            except Exception:
                log.exception("approval %s: counting %s failed", name, state.value)
    return count
