"""`approval:NAME` as a late stage (late.py): decided once every other requirement and the call's
credential held, before a quota unit is taken. The plan's ruling goes to the call's sidecar as a
`HeldApproval` (a `late.Held`): the adapter asks its `self` question and decides the call again
with the answer, a denial's remedy is its offer (the approval page, or what the caller said), and
`used` is counted only for a call allowed to run.
"""

from __future__ import annotations

from collections.abc import Awaitable

from ..envelope import Remediation, RemediationHint
from ..late import Answer, LateCall, Sidecar
from ..offers import Offer, OfferCall
from ..outcomes import Outcome, Status
from .lifecycle import Count, Question, State
from .plan import ApprovalCall, ApprovalPlan, ApprovalRuling, ApprovalStep

NOT_DECIDED = ("an approval is decided only for a call whose adapter can carry it (the gateway, or "
               "a hosted server's tool call): this one cannot")
TAKEN_AS_GIVEN = "taken as given (policy test): a person decides each call"
# The remedy of an approval nothing decided for the call, or whose question was not asked (yet).
UNDISCLOSED = Offer(Remediation.UNDISCLOSED)

class HeldApproval:
    """One call's approvals as the stage decided them (its `late.Held`): the plan, the call as the
    approvals saw it, and the ruling (replaced when a later stage refused the call and the uses were
    given back). `pages_url`: the base URL of the approval pages (None: none are served)."""

    __slots__ = ("_count", "call", "pages_url", "plan", "ruling")

    outbound = None  # the request goes as the server's own: an approval adds nothing to it

    def __init__(self, plan: ApprovalPlan, call: ApprovalCall, ruling: ApprovalRuling,
                 count: Count, pages_url: str | None = None) -> None:
        self.plan = plan
        self.call = call
        self.ruling = ruling
        self._count = count
        self.pages_url = pages_url

    @property
    def requirements(self) -> tuple[str, ...]:
        return self.plan.requirements

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return self.ruling.outcomes

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

    def finished(self, allowed: bool, ran: bool) -> None:
        """The call is over: its approvals count `used` when it was allowed (the approval was used
        by that decision, whether or not its server then ran it)."""
        if allowed:
            self._count(e for e in self.ruling.events if e[1] is State.USED)

    async def offer(self, requirement: str, call: OfferCall) -> Offer | None:
        """The remedy of an unmet `approval:NAME` (SPEC §15): an approver's request is `available`
        with a `url` hint to its page, for a client that declared URL elicitation and a gateway
        with pages (else `undisclosed`: the request exists all the same); a `self` question that
        could not be asked is `undisclosed`; refused, declined, expired: `unavailable`. Each says
        in words what happened and where to go ("waiting for an approver: request ID,
        GATEWAY/approvals"), for every client."""
        step = self.step(requirement)
        if step is None or step.remedy == "ask":
            return UNDISCLOSED
        if step.remedy == "undisclosed":
            return Offer(Remediation.UNDISCLOSED, (), "the caller must confirm this call, and this "
                         "client cannot ask (it declared no elicitation)")
        request = step.request
        if step.remedy != "approver" or request is None:
            said = _ended(request.state, request.self_approval) if request is not None else ""
            return Offer(Remediation.UNAVAILABLE, (), said) if said else None
        pages = f", {self.pages_url}/approvals" if self.pages_url is not None else ""
        said = f"waiting for an approver: request {request.id}{pages}"
        if not call.url_elicitation or self.pages_url is None:
            return Offer(Remediation.UNDISCLOSED, (), said)
        url = f"{self.pages_url}/approvals/{request.id}"
        return Offer(Remediation.AVAILABLE, (RemediationHint("url", url=url),), said)


class ApprovalStage:
    """A tool's `approval:` requirements, decided by its ApprovalPlan under the snapshot's lookup
    timeout (a store round trip each; a `self` question is asked outside the decision). `asks`:
    how many questions it may put to the caller of one call (one per `self` approval)."""

    timeout: float | None = None

    def __init__(self, namespace: str, plan: ApprovalPlan, count: Count, *,
                 pages_url: str | None = None, taken_as_given: bool = False) -> None:
        self.namespace = namespace
        self.requirements = plan.requirements
        self.plan = plan
        self.asks = sum(1 for a in plan.approvals if a.approvers is None)
        self._count = count
        self._pages_url = pages_url
        self._taken_as_given = taken_as_given

    def decide(self, call: LateCall) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        sidecar = call.sidecar
        if sidecar is None:  # nowhere to keep the request: the approval is not given here
            if self._taken_as_given:
                return tuple(Outcome(r, Status.SATISFIED, TAKEN_AS_GIVEN, transient=True)
                             for r in self.requirements)
            return tuple(Outcome(r, Status.UNSATISFIED, NOT_DECIDED, transient=True)
                         for r in self.requirements)
        return self._decided(call, sidecar)

    async def _decided(self, call: LateCall, sidecar: Sidecar) -> tuple[Outcome, ...]:
        asked = ApprovalCall(call.tool, call.arguments, call.identity, call.revision,
                             sidecar.can_ask, sidecar.answered, sidecar.accepted)
        ruling = await self.plan.decide(asked)
        held = HeldApproval(self.plan, asked, ruling, self._count, self._pages_url)
        for requirement in self.requirements:
            sidecar.held[requirement] = held
        _note(sidecar, ruling)
        self._count(e for e in ruling.events if e[1] is not State.USED)
        if ruling.allowed:
            sidecar.told.append(held)
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


def _ended(state: State, self_approval: bool) -> str:
    """What a denial says of a request that will not approve this call: a person said no, or
    nobody answered in time (a new call asks again)."""
    if state is State.REFUSED:
        return "the caller declined" if self_approval else "refused by an approver"
    if state is State.EXPIRED:
        return ("the caller did not answer in time; call again to be asked again" if self_approval
                else "the approval expired; call again to request a new one")
    return ""
