"""Deciding a tool's `approval:` requirements for one call, after every other requirement holds
(SPEC §15). `ApprovalPlan.decide` finds or makes each approval's request for the call and, when
every one is approved, uses each once (atomically: two replicas racing use it once); `release`
undoes the uses of a call that was refused afterwards (a quota); `answer` takes a caller's answer
to a `self` question. Every outcome is `transient`: a client never learns it.

An approver's request answers for its binding (any identical call of the caller may use it once).
A `self` question belongs to the one call that asked it: its ID is `THREAD.INDEX` (a random thread
per asking call, the approval's index in the tool's order), so a concurrent identical call gets
questions of its own, and only the call whose accept was taken uses it (`ApprovalCall.accepted`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..late import Answer
from ..outcomes import Outcome, Status
from ..principal import Identity
from .lifecycle import ApprovalNote, ApprovalRequest, Binding, Event, Party, Question, State, bind, events_of
from .store import ApprovalStore, Changed, new_id


@dataclass(frozen=True, slots=True)
class CompiledApproval:
    """One `[approvals.NAME]` as the plan uses it; `approvers` None is "self"."""

    name: str
    approvers: tuple[str, ...] | None
    expires_seconds: float
    timeout_seconds: float
    store: ApprovalStore


class ApprovalCall(NamedTuple):
    """The call as an approval sees it. `tool` is the name the caller used (the gateway's visible
    name); `can_ask`: the client can be asked in flight (it declared form elicitation, or speaks
    2026-07-28 input rounds). `answered`: the `self` question (request ID) this call continues (a
    2026-07-28 retry whose round asked it) or just answered; `accepted`: None while it was not
    answered by this call yet, True when this call's accept of it was taken (only then does a
    `self` approval run the call), False when its answer was anything else, or not taken (another
    retry of the round answered first)."""

    tool: str
    arguments: Mapping[str, Any] | None
    identity: Identity
    revision: str
    can_ask: bool = False
    answered: str | None = None
    accepted: bool | None = None


# What the caller can do about an unmet approval (the envelope's remediation, SPEC §15):
# "approver": someone else decides at /approvals/ID (a `url` hint, or `undisclosed` for a client
# without URL elicitation); "ask": ask the caller now (`question`), then decide the call again;
# "undisclosed": a `self` approval for a client that cannot be asked; "none": nothing to do
# (refused, declined, no answer, cannot be bound): `unavailable`.
Remedy = Literal["approver", "ask", "undisclosed", "none"]


class ApprovalStep(NamedTuple):
    """One `approval:` requirement of one call."""

    requirement: str
    outcome: Outcome
    note: ApprovalNote | None = None  # None: no request was involved
    remedy: Remedy | None = None  # None when satisfied, or on `error`
    request: ApprovalRequest | None = None
    question: Question | None = None  # remedy "ask"


class ApprovalRuling(NamedTuple):
    """A call's approval steps (tool order) and the results to count."""

    steps: tuple[ApprovalStep, ...]
    events: tuple[Event, ...] = ()

    @property
    def allowed(self) -> bool:
        return all(step.outcome.ok for step in self.steps)

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return tuple(step.outcome for step in self.steps)

    @property
    def note(self) -> ApprovalNote | None:
        """The record's `approval`: the first step that met a request (the one that kept the call
        from running, when one did)."""
        notes = [s.note for s in self.steps if s.note is not None]
        unmet = [s.note for s in self.steps if s.note is not None and not s.outcome.ok]
        found = unmet or notes
        return found[0] if found else None


def _outcome(requirement: str, status: Status, reason: str) -> Outcome:
    return Outcome(requirement, status, reason, transient=True)


class ApprovalPlan:
    """A tool's approvals, in its order (compiled once per snapshot, like a QuotaPlan)."""

    def __init__(self, requirements: tuple[str, ...], approvals: tuple[CompiledApproval, ...]) -> None:
        self.requirements = requirements
        self.approvals = approvals

    async def decide(self, call: ApprovalCall) -> ApprovalRuling:
        """Each approval's request for this call; when every one is approved (and every `self`
        one by this very call's accept), each is used once (a use that fails, another call having
        used it first, gives back the ones used before)."""
        steps: list[ApprovalStep] = []
        events: list[Event] = []
        thread = await self._thread(call)
        for i, (requirement, approval) in enumerate(zip(self.requirements, self.approvals,
                                                        strict=True)):
            step, made = await _guarded(requirement, approval,
                                        self._prepare(i, requirement, approval, call, thread))
            steps.append(step)
            events += made
        asks = any(a.approvers is None for a in self.approvals)
        if (asks and call.accepted is not True) or not all(
                s.outcome.ok and s.note is not None and s.note.result is State.APPROVED for s in steps):
            return ApprovalRuling(tuple(steps), tuple(events))
        return await self._use(steps, events)

    async def _thread(self, call: ApprovalCall) -> str:
        """The thread of `self` questions this call continues, else a new one. A question it
        answered is its own; one a retry continues must still wait for its answer: a round whose
        question was answered already (used, declined, expired, or accepted on another retry) or
        that is another call's is a new call, asked again."""
        named = _question(call.answered)
        if named is None or named[1] >= len(self.approvals):
            return new_id()
        approval = self.approvals[named[1]]
        binding = bind(approval.name, call.tool, call.arguments, call.identity, call.revision)
        if approval.approvers is not None or isinstance(binding, str):
            return new_id()
        try:
            found = await approval.store.get(str(call.answered))
        except Exception:  # the store is down: each step says so (`error`)
            return new_id()
        if found is None or not found.self_approval or found.binding != binding or (
                call.accepted is None and found.state is not State.REQUESTED):
            return new_id()
        return named[0]

    async def _prepare(self, index: int, requirement: str, approval: CompiledApproval,
                       call: ApprovalCall, thread: str) -> tuple[ApprovalStep, tuple[Event, ...]]:
        if call.identity.error:
            return ApprovalStep(requirement, Outcome(
                requirement, Status.ERROR, "the caller could not be identified (authentication "
                "failed on a backend error), so the call cannot be bound", transient=True)), ()
        binding = bind(approval.name, call.tool, call.arguments, call.identity, call.revision)
        if isinstance(binding, str):
            return _none(requirement, f"approval '{approval.name}' cannot be asked for: {binding}"), ()
        if approval.approvers is not None:
            if binding.caller is None:
                return _none(requirement, f"approval '{approval.name}' needs a verified caller: an "
                                          "approval is bound to the caller's issuer and subject"), ()
            opened = await approval.store.open(binding, approval.expires_seconds,
                                               approval.expires_seconds)
            return _step(requirement, approval, opened.request), _counted(approval, opened)
        if not call.can_ask:
            return ApprovalStep(requirement, _outcome(
                requirement, Status.UNSATISFIED, f"approval '{approval.name}' asks the caller "
                "to confirm, and this client cannot be asked (no elicitation)"),
                remedy="undisclosed"), ()
        if call.accepted is False:  # the call ends: its questions are read, none is made
            return await _unasked(requirement, approval, f"{thread}.{index}", binding, call), ()
        asked = await approval.store.ask(f"{thread}.{index}", binding, approval.timeout_seconds,
                                         approval.expires_seconds)
        if not isinstance(asked, Changed):
            return _none(requirement, f"approval '{approval.name}': its question belongs to "
                                      "another call"), ()
        return _asked(requirement, approval, asked.request, call), _counted(approval, asked)

    async def _use(self, steps: list[ApprovalStep], events: list[Event]) -> ApprovalRuling:
        used: list[int] = []
        for i, step in enumerate(steps):
            approval, request = self.approvals[i], step.request
            assert request is not None  # an approved step holds its request
            changed: Changed | str | Exception
            try:
                changed = await approval.store.use(request.id, request.binding)
            except Exception as exc:  # a failing store: `error` (fail closed)
                changed = exc
            if not isinstance(changed, Changed):
                for j in used:  # the call will not run: the approvals used for it are good again
                    steps[j] = await self._released(j, steps[j])
                steps[i] = _lost(step, approval, changed)
                kept = [e for e in events if e[1] is not State.USED]
                return ApprovalRuling(tuple(steps), tuple(kept))
            used.append(i)
            steps[i] = _step(step.requirement, approval, changed.request)
            events += events_of(approval.name, changed.made)
        return ApprovalRuling(tuple(steps), tuple(events))

    async def release(self, decided: ApprovalRuling) -> ApprovalRuling:
        """The call these approvals were used for was refused afterwards (a quota had no unit):
        each used approval is approved again until its own expiry, and `used` is not counted."""
        steps = list(decided.steps)
        for i, step in enumerate(steps):
            if step.note is not None and step.note.result is State.USED:
                steps[i] = await self._released(i, step)
        return ApprovalRuling(tuple(steps), tuple(e for e in decided.events if e[1] is not State.USED))

    async def _released(self, i: int, step: ApprovalStep) -> ApprovalStep:
        """Give a used approval back; a store that fails now only costs the caller that approval
        (the call is denied anyway)."""
        approval, request = self.approvals[i], step.request
        assert request is not None
        try:
            changed = await approval.store.release(request.id)
        except Exception:
            changed = "unknown"
        after = changed.request if isinstance(changed, Changed) else request
        return _step(step.requirement, approval, after, released=True)

    async def answer(self, request_id: str, call: ApprovalCall, answer: Answer | None
                     ) -> tuple[tuple[Event, ...], bool]:
        """The caller's answer to a `self` question: accept approves it, decline or cancel refuses
        it, None (no answer in `timeout_seconds`, or garbage) lets it expire. Only the caller of the
        very call it asked about answers: another call, caller or revision changes nothing. The
        first answer kept is the question's; the results it made, and whether this answer was an
        accept that was kept (the call may then run: decide it again with `answered=request_id`
        and `accepted` that). A store that is down raises BackendError (the call is denied)."""
        for approval in self.approvals:
            if approval.approvers is not None:
                continue
            request = await approval.store.get(request_id)
            binding = bind(approval.name, call.tool, call.arguments, call.identity, call.revision)
            if request is None or not request.self_approval or request.binding != binding:
                continue
            assert isinstance(binding, Binding)
            store = approval.store
            changed = (await store.expire(request_id) if answer is None else
                       await store.decide(request_id, "approve" if answer == "accept" else "refuse",
                                          Party.of(call.identity)))
            if not isinstance(changed, Changed):
                return (), False
            taken = answer == "accept" and State.APPROVED in changed.made
            return events_of(approval.name, changed.made), taken
        return (), False


def _step(requirement: str, approval: CompiledApproval, request: ApprovalRequest | None,
          released: bool = False) -> ApprovalStep:
    """The step for a request as it stands."""
    assert request is not None
    name, state = approval.name, request.state
    note = ApprovalNote(name, request.id, state)
    if state is State.USED:
        return ApprovalStep(requirement, _outcome(requirement, Status.SATISFIED, f"approval '{name}' "
                            f"was given, and this call uses it (request {request.id})"), note, None, request)
    if state is State.APPROVED:
        why = "not used: the call was refused for another reason" if released else "to be used"
        return ApprovalStep(requirement, _outcome(requirement, Status.SATISFIED, f"approval '{name}' "
                            f"was given ({why}; request {request.id})"), note, None, request)
    if state is State.REQUESTED and request.self_approval:
        question = Question(request.id, name, request.binding.tool, request.binding.arguments,
                            approval.timeout_seconds)
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval '{name}':"
                            f" the caller is asked to confirm (request {request.id})"), note, "ask",
                            request, question)
    if state is State.REQUESTED:
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval '{name}' "
                            f"is requested: waiting for an approver (request {request.id})"), note,
                            "approver", request)
    if state is State.REFUSED:
        who = "the caller declined" if request.self_approval else "an approver refused it"
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval '{name}': "
                            f"{who} (request {request.id})"), note, "none", request)
    why = (f"the caller did not answer within {approval.timeout_seconds:g} s" if request.self_approval
           else "it expired before it was used")
    return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval '{name}': "
                        f"{why} (request {request.id})"), note, "none", request)


def _asked(requirement: str, approval: CompiledApproval, request: ApprovalRequest,
           call: ApprovalCall) -> ApprovalStep:
    """The step of a `self` question for the call that asked it: approved is satisfied when this
    call's accept was taken (or it is an earlier question of the call, answered before); a
    question already used is not; a question this call answered with anything but a kept accept
    ends the call (it is not asked again)."""
    name, state = approval.name, request.state
    mine = request.id != call.answered or call.accepted is True
    if state is State.APPROVED and not mine:
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval "
                            f"'{name}' was given on another retry of this call, which runs it "
                            f"(request {request.id})"), ApprovalNote(name, request.id, state),
                            "none", request)
    if state is State.USED:
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval "
                            f"'{name}' was used already (request {request.id})"),
                            ApprovalNote(name, request.id, state), "none", request)
    if state is State.REQUESTED and call.accepted is False:
        return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, f"approval "
                            f"'{name}': not asked, the caller did not accept this call (request "
                            f"{request.id})"), ApprovalNote(name, request.id, state), "none", request)
    return _step(requirement, approval, request)


async def _unasked(requirement: str, approval: CompiledApproval, request_id: str, binding: Binding,
                   call: ApprovalCall) -> ApprovalStep:
    """The step of a `self` approval for a call whose answer was not a kept accept: the call ends,
    so its question is read as it stands, never made. (One made now would be asked to nobody, yet
    wait: counted against its caller's bound, it dropped a question the caller was being asked.
    That happened whenever the question answered was gone, dropped by the bound itself, or was
    another call's.)"""
    found = await approval.store.get(request_id)
    if found is None or not found.self_approval or found.binding != binding:
        return _none(requirement, f"approval '{approval.name}': not asked, the caller did not "
                                  "accept this call")
    return _asked(requirement, approval, found, call)


def _counted(approval: CompiledApproval, changed: Changed) -> tuple[Event, ...]:
    return (*events_of(approval.name, changed.made), *changed.dropped)


def _question(request_id: str | None) -> tuple[str, int] | None:
    """A `self` question's (thread, index), from its ID `THREAD.INDEX`; None for anything else."""
    thread, dot, index = (request_id or "").rpartition(".")
    if not dot or not thread or not index.isdigit() or len(index) > 3:
        return None
    return thread, int(index)


def _none(requirement: str, reason: str) -> ApprovalStep:
    return ApprovalStep(requirement, _outcome(requirement, Status.UNSATISFIED, reason), remedy="none")


def _lost(step: ApprovalStep, approval: CompiledApproval, why: object) -> ApprovalStep:
    """A use that did not happen: another call used the approval first, it expired meanwhile, or
    the store failed (`error`)."""
    if isinstance(why, BaseException):
        return ApprovalStep(step.requirement, _outcome(step.requirement, Status.ERROR, _failed(
            approval, why)), step.note, None, step.request)
    return ApprovalStep(step.requirement, _outcome(
        step.requirement, Status.UNSATISFIED, f"approval '{approval.name}' could not be used "
        f"({why}): another call used it first, or it expired"), step.note, "none", step.request)


def _failed(approval: CompiledApproval, exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"approval store '{approval.store.name}' failed: {text[:300]}"


async def _guarded(requirement: str, approval: CompiledApproval,
                   pending: Awaitable[tuple[ApprovalStep, tuple[Event, ...]]]
                   ) -> tuple[ApprovalStep, tuple[Event, ...]]:
    """A store that fails is `error` for the approval: the call is denied (fail closed)."""
    try:
        return await pending
    except Exception as exc:
        return ApprovalStep(requirement, _outcome(requirement, Status.ERROR, _failed(approval, exc))), ()
