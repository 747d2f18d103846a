"""The values every layer passes around: one requirement's Outcome, one call's Decision.

An Outcome is `satisfied`, `unsatisfied` (with a reason) or `error` (the resolver failed); only
`satisfied` ever counts towards allowing a call.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    """How one requirement ended for one call."""

    SATISFIED = "satisfied"
    UNSATISFIED = "unsatisfied"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of resolving one requirement string for one call."""

    requirement: str
    status: Status
    reason: str = ""
    # True when the call's arguments decided it (a capability grant with argument conditions):
    # another call of the same tool may end otherwise, so a client never learns it.
    argument_dependent: bool = False
    # True when the outcome holds only for now (a quota: it refills): a client never learns it.
    transient: bool = False
    # For an exhausted quota: the seconds until it has room again.
    retry_after_seconds: float | None = None

    @classmethod
    def satisfied(cls, requirement: str, reason: str = "", *, argument_dependent: bool = False
                  ) -> Outcome:
        return new_outcome(requirement, Status.SATISFIED, reason, argument_dependent)

    @classmethod
    def unsatisfied(cls, requirement: str, reason: str, *, argument_dependent: bool = False
                    ) -> Outcome:
        return new_outcome(requirement, Status.UNSATISFIED, reason, argument_dependent)

    @classmethod
    def error(cls, requirement: str, reason: str, *, argument_dependent: bool = False) -> Outcome:
        return new_outcome(requirement, Status.ERROR, reason, argument_dependent)

    @property
    def ok(self) -> bool:
        return self.status is Status.SATISFIED

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requirement": self.requirement, "status": self.status.value,
                               "reason": self.reason}
        if self.argument_dependent:
            out["argument_dependent"] = True
        if self.transient:
            out["transient"] = True
        if self.retry_after_seconds is not None:
            out["retry_after_seconds"] = self.retry_after_seconds
        return out


# The ruling on one call: whether its tool's outcomes allow it, and those outcomes (`ruling`).
Ruling = tuple[bool, tuple[Outcome, ...]]


def ruling(outcomes: tuple[Outcome, ...]) -> Ruling:
    """The one rule: outcomes allow a call only when there are some and every one is satisfied."""
    for outcome in outcomes:
        if outcome.status is not Status.SATISFIED:
            return False, outcomes
    return bool(outcomes), outcomes


_SATISFIED, _ERROR = Status.SATISFIED, Status.ERROR


class Refused(enum.StrEnum):
    """Why a call was refused without its requirements being evaluated (`Guard.refuse`)."""

    UNLISTED = "unlisted_tool"  # no such tool, a name listed twice, or one the policy does not expose
    MALFORMED = "malformed_requirements"  # the tool's own requirements cannot be read or enforced
    UNUSABLE = "policy_unusable"  # the policy cannot be applied to the server's tools (a near miss)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal the guard did not evaluate: its kind, and the sentence a caller is told (which
    names no policy entry, file or confidential requirement)."""

    kind: Refused
    said: str


@dataclass(frozen=True, slots=True)
class Decision:
    """One call's verdict: allowed only when every outcome is satisfied (fail closed)."""

    tool: str
    allowed: bool
    outcomes: tuple[Outcome, ...] = ()
    subject: str | None = None
    revision: str = ""
    duration_ns: int = 0
    confidential: frozenset[str] = field(default_factory=frozenset)
    refusal: Refusal | None = None  # set when the call was refused without being evaluated
    # What the call's late stages noted for its record (`{"credential": {"kind", "cached"}}`,
    # late.py): never a secret, and no part of what the decision is.
    notes: Mapping[str, Any] | None = field(default=None, compare=False)
    # The SEP-2643 `authorizationContextId` of an authorization denial (SPEC §15): drawn fresh by
    # the guard for every denial but one whose only unmet requirements are quotas and a policy
    # unusable for the server (neither gets an envelope). None: no envelope.
    context_id: str | None = None
    # The well-formed context ID the call's request echoed (a retry of a denied call): recorded, to
    # join the two decisions; it grants nothing.
    echoed: str | None = None

    # Each property below is read a few times per denial (its text, payload, `_meta`, envelope):
    # list comprehensions and the module's status constants, ~3x cheaper than generators here.
    @property
    def unmet(self) -> tuple[str, ...]:
        """Every requirement that was not satisfied (unsatisfied or error), in the tool's order."""
        return tuple([o.requirement for o in self.outcomes if o.status is not _SATISFIED])

    @property
    def errors(self) -> tuple[str, ...]:
        """The requirements whose resolver failed, timed out or found its backend down."""
        return tuple([o.requirement for o in self.outcomes if o.status is _ERROR])

    @property
    def argument_dependent(self) -> frozenset[str]:
        """The requirements whose outcome the call's arguments decided: a client must never learn
        these from a denial (the same tool with other arguments may be allowed)."""
        return frozenset([o.requirement for o in self.outcomes if o.argument_dependent])

    @property
    def transient(self) -> frozenset[str]:
        """The requirements whose outcome holds only for now (quotas): a client must never learn
        these from a denial (the same call may be allowed once the quota refills)."""
        return frozenset([o.requirement for o in self.outcomes if o.transient])

    @property
    def retry_after_seconds(self) -> float | None:
        """When the disclosed exhausted quotas of a denied call all have room again: seconds,
        rounded up to the millisecond; None when no disclosed unmet requirement says."""
        waits = [o.retry_after_seconds for o in self.outcomes if o.retry_after_seconds is not None
                 and o.status is not _SATISFIED and o.requirement not in self.confidential]
        return math.ceil(max(waits) * 1000) / 1000 if waits else None

    @property
    def disclosed_unmet(self) -> tuple[str, ...]:
        """The unmet requirements a denial may name: confidential ones are withheld."""
        confidential = self.confidential
        return tuple([o.requirement for o in self.outcomes
                      if o.status is not _SATISFIED and o.requirement not in confidential])

    @property
    def withheld(self) -> int:
        """How many unmet requirements a denial withholds (the confidential ones)."""
        confidential = self.confidential
        return len([o for o in self.outcomes
                    if o.status is not _SATISFIED and o.requirement in confidential])

    def outcome(self, requirement: str) -> Outcome | None:
        for o in self.outcomes:
            if o.requirement == requirement:
                return o
        return None

    def denial_payload(self) -> dict[str, Any]:
        """SPEC §3 `structuredContent` of a denied call, with `retry_after_seconds` (SPEC §13) when
        a disclosed quota is used up; SPEC §10's `unlisted_tool` for a name refused as unlisted."""
        unlisted = self.refusal is not None and self.refusal.kind is Refused.UNLISTED
        payload: dict[str, Any] = {
            "error": Refused.UNLISTED.value if unlisted else "unmet_requirements",
            "tool": self.tool,
            "unmet": list(self.disclosed_unmet),
            "withheld": self.withheld,
        }
        retry = self.retry_after_seconds
        if retry is not None:
            payload["retry_after_seconds"] = retry
        return payload

    def denial_text(self) -> str:
        """The human-readable text of a denied call; names no confidential requirement."""
        refusal = self.refusal
        if refusal is not None and refusal.kind is not Refused.MALFORMED:
            return (refusal.said if refusal.kind is Refused.UNUSABLE
                    else f"Tool '{self.tool}' was not run: {refusal.said}.")
        named = self.disclosed_unmet
        parts = [f"Tool '{self.tool}' was not run: unmet requirements"]
        parts.append(": " + ", ".join(named) if named else "")
        if self.withheld:
            parts.append(f" (+{self.withheld} withheld)")
        retry = self.retry_after_seconds
        if retry is not None:
            parts.append(f". Retry after {f'{retry:.3f}'.rstrip('0').rstrip('.')} s")
        return "".join(parts) + "."


# What a refusal the guard did not evaluate records as its one unmet requirement (`Guard.refuse`):
# a tool whose own requirements cannot be read or enforced, and a policy unusable for the server.
MALFORMED_REQUIREMENTS = "(malformed requirements)"
POLICY_UNUSABLE = "(policy unusable)"


# -- fast construction ---------------------------------------------------------------------------
# A frozen dataclass's __init__ pays one object.__setattr__ call per field: building a Decision
# cost ~1.1 µs, more than the rest of a decision. These twins have the same slot layout but are
# mutable, so plain slot stores fill them (their __init__, or `_new_decision`); then the instance
# *becomes* the frozen class (`__class__` assignment between layout-identical classes is
# documented CPython behaviour). The
# result is an ordinary, immutable Outcome/Decision, equal to one built by the public constructor.


class _OutcomeFields:
    __slots__ = Outcome.__slots__

    def __init__(self, requirement: str, status: Status, reason: str,
                 argument_dependent: bool = False) -> None:
        self.requirement = requirement
        self.status = status
        self.reason = reason
        self.argument_dependent = argument_dependent
        self.transient = False
        self.retry_after_seconds = None
        self.__class__ = Outcome  # type: ignore[assignment]


class _DecisionFields:
    __slots__ = Decision.__slots__


_new = object.__new__


def _new_decision(tool: str, allowed: bool, outcomes: tuple[Outcome, ...], subject: str | None,
                  revision: str, duration_ns: int, confidential: frozenset[str],
                  refusal: Refusal | None = None, notes: Mapping[str, Any] | None = None,
                  context_id: str | None = None, echoed: str | None = None) -> Decision:
    # A function rather than the twin's __init__: calling a class costs its tp_new and tp_init
    # slots on top of the frame (0.05 µs of a decision, on every call).
    d: Any = _new(_DecisionFields)
    d.tool = tool
    d.allowed = allowed
    d.outcomes = outcomes
    d.subject = subject
    d.revision = revision
    d.duration_ns = duration_ns
    d.confidential = confidential
    d.refusal = refusal
    d.notes = notes
    d.context_id = context_id
    d.echoed = echoed
    d.__class__ = Decision
    return d  # type: ignore[no-any-return]


# `Outcome(requirement, status, reason)` / `Decision(...)` with every field given, built without the
# frozen-dataclass setattr cost (same values; ~4x cheaper). Typed as the classes they build.
new_outcome: Callable[[str, Status, str, bool], Outcome] = _OutcomeFields  # type: ignore[assignment]
new_decision: Callable[..., Decision] = _new_decision


class OutcomeMemo:
    """One immutable Outcome per (requirement, answer), reused across calls instead of building an
    equal one each time: a resolver computes its answer, looks the outcome up, and `keep`s the one
    it builds on a miss. Bounded: past `maxsize` keys, outcomes are built and not kept (requirement
    strings first seen at call time are not remembered)."""

    def __init__(self, maxsize: int = 4096) -> None:
        self._items: dict[Hashable, Outcome] = {}
        self._maxsize = maxsize
        self.lookup = self._items.get  # the hot read: one dict lookup

    def keep(self, key: Hashable, outcome: Outcome) -> Outcome:
        if len(self._items) < self._maxsize:
            self._items[key] = outcome
        return outcome


class Verdict(enum.StrEnum):
    """The client's strict SEP-2487 verdict for one tool."""

    PROCEED = "proceed"
    WILL_FAIL = "will_fail"
