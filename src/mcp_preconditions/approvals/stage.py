"""`approval:NAME` as a late stage (late.py): decided once every other requirement and the call's
credential held, before a quota unit is taken. The plan's ruling goes to the call's sidecar as a
`HeldApproval`: the adapter asks its `self` question and decides the call again with the answer, a
denial's remedy reads it (`ApprovalResolver.offer`), and `used` is counted only for a call that runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..late import LateCall, Sidecar
from ..outcomes import Outcome, Status
from .lifecycle import State
from .plan import ApprovalCall, ApprovalPlan, ApprovalRuling, ApprovalStep
from .question import Answer, Question
from .record import Event

if TYPE_CHECKING:
    from .resolver import ApprovalResolver

NOT_DECIDED = ("an approval is decided only for a call whose adapter can carry it (the gateway, or "
               "a hosted server's tool call): this one cannot")
TAKEN_AS_GIVEN = "taken as given (policy test): a person decides each call"


class HeldApproval:
    """One call's approvals as the stage decided them: the plan, the call as the approvals saw it,
    and the ruling (replaced when a later stage refused the call and the uses were given back)."""

    __slots__ = ("_count", "call", "plan", "ruling")

    def __init__(self, plan: ApprovalPlan, call: ApprovalCall, ruling: ApprovalRuling,
                 count: Callable[[Iterable[Event]], None]) -> None:
        self.plan = plan
        self.call = call
        self.ruling = ruling
        self._count = count

    def step(self, requirement: str) -> ApprovalStep | None:
        return next((s for s in self.ruling.steps if s.requirement == requirement), None)

    @property
    def question(self) -> Question | None:
        """The first `self` question to ask the caller before the call is decided again."""
        return next((s.question for s in self.ruling.steps if s.remedy == "ask"), None)

    async def answer(self, answer: Answer | None) -> bool:
        """The caller's answer to `question` (None: no answer in time, or garbage): recorded in
        the store and counted; whether it was an accept that was kept. The adapter then decides
        the call again with `Sidecar(answered=question.request_id, accepted=that)`: only the call
        whose accept was kept runs. A store that is down raises BackendError."""
        question = self.question
        if question is None:
            return False
        events, taken = await self.plan.answer(question.request_id, self.call, answer)
        self._count(events)
        return taken

    async def release(self, sidecar: Sidecar) -> None:
        """A later stage (a quota) refused the call: the approvals used for it are good again."""
        self.ruling = await self.plan.release(self.ruling)
        _note(sidecar, self.ruling)

    def finished(self, allowed: bool) -> None:
        """The call's Decision is made: its approvals count `used` only when it runs."""
        if allowed:
            self._count(e for e in self.ruling.events if e[1] is State.USED)


class ApprovalStage:
    """A tool's `approval:` requirements, decided by its ApprovalPlan under the snapshot's lookup
    timeout (a store round trip each; a `self` question is asked outside the decision)."""

    timeout: float | None = None

    def __init__(self, resolver: ApprovalResolver, requirements: Sequence[str]) -> None:
        self.namespace = resolver.namespace
        self.resolver = resolver
        self.requirements = tuple(requirements)
        self.plan = resolver.plan(self.requirements)

    def decide(self, call: LateCall) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        sidecar = call.sidecar
        if sidecar is None:  # nowhere to keep the request: the approval is not given here
            if self.resolver.taken_as_given:
                return tuple(Outcome(r, Status.SATISFIED, TAKEN_AS_GIVEN, transient=True)
                             for r in self.requirements)
            return tuple(Outcome(r, Status.UNSATISFIED, NOT_DECIDED, transient=True)
                         for r in self.requirements)
        return self._decided(call, sidecar)

    async def _decided(self, call: LateCall, sidecar: Sidecar) -> tuple[Outcome, ...]:
        asked = ApprovalCall(call.tool, call.arguments, call.identity, call.revision,
                             sidecar.can_ask, sidecar.answered, sidecar.accepted)
        ruling = await self.plan.decide(asked)
        held = HeldApproval(self.plan, asked, ruling, self.resolver.count)
        for requirement in self.requirements:
            sidecar.held[requirement] = held
        _note(sidecar, ruling)
        self.resolver.count(e for e in ruling.events if e[1] is not State.USED)
        if ruling.allowed:
            sidecar.finished.append(held.finished)
        return ruling.outcomes

    def release(self, call: LateCall) -> Awaitable[None] | None:
        held = call.sidecar.held.get(self.requirements[0]) if call.sidecar is not None else None
        if isinstance(held, HeldApproval) and call.sidecar is not None:
            return held.release(call.sidecar)
        return None


def _note(sidecar: Sidecar, ruling: ApprovalRuling) -> None:
    """The decision record's `approval` (SPEC §15): the request the call met."""
    note = ruling.note
    if note is not None:
        sidecar.notes["approval"] = note.to_record()
