"""One call's approvals (SPEC §15), through `ApprovalPlan` on the memory store with a controlled
clock: an approver's approval lets exactly one call run; a changed argument, another caller, a new
revision, an expired or self-made approval are refused; a `self` question is asked, answered once;
a failing store is `error`; every outcome is transient (never learned by a client).
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import Identity, Principal
from mcp_preconditions.approvals import (
    MAX_ENDED_PER_CALLER,
    MAX_PENDING_PER_CALLER,
    ApprovalCall,
    ApprovalPlan,
    ApprovalRuling,
    CompiledApproval,
    MemoryApprovalStore,
    Party,
    State,
)
from mcp_preconditions.errors import BackendError
from mcp_preconditions.outcomes import Status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def who(subject: str) -> Identity:
    return Identity(Principal.from_claims({"iss": "https://idp", "sub": subject}))


ALICE, BOB = who("alice"), who("bob")
BOB_PARTY = Party("https://idp", "bob")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryApprovalStore:
    return MemoryApprovalStore(clock=clock)


def plan_of(store: Any, approvers: tuple[str, ...] | None = ("auth:claim:role:rm",),
            names: tuple[str, ...] = ("deploy",)) -> ApprovalPlan:
    return ApprovalPlan(tuple(f"approval:{n}" for n in names),
                        tuple(CompiledApproval(n, approvers, 600, 120, store) for n in names))


def call(identity: Identity = ALICE, arguments: dict[str, Any] | None = None, revision: str = "r1",
         **extra: Any) -> ApprovalCall:
    return ApprovalCall("deploy_service", {"env": "prod"} if arguments is None else arguments,
                        identity, revision, **extra)


def only(ruling: ApprovalRuling) -> tuple[Status, str, str | None, State | None]:
    (step,) = ruling.steps
    return (step.outcome.status, step.outcome.reason, step.remedy,
            step.note.result if step.note else None)


async def test_an_approvers_approval_lets_exactly_one_call_run(store: MemoryApprovalStore) -> None:
    plan = plan_of(store)
    first = await plan.decide(call())
    request = first.steps[0].request
    assert request is not None
    assert only(first) == (Status.UNSATISFIED, f"approval 'deploy' is requested: waiting for an "
                           f"approver (request {request.id})", "approver", State.REQUESTED)
    assert first.events == (("deploy", State.REQUESTED),)
    assert first.note is not None and first.note.to_record() == {
        "name": "deploy", "id": request.id, "result": "requested"}
    assert all(o.transient for o in first.outcomes)
    again = await plan.decide(call())  # still waiting: the same request, nothing counted
    assert again.steps[0].request == request and again.events == ()
    decided = await store.decide(request.id, "approve", BOB_PARTY)
    assert not isinstance(decided, str) and decided.made == (State.APPROVED,)
    ran = await plan.decide(call())
    assert ran.allowed and ran.events == (("deploy", State.USED),)
    assert only(ran) == (Status.SATISFIED, f"approval 'deploy' was given, and this call uses it "
                         f"(request {request.id})", None, State.USED)
    after = await plan.decide(call())  # used once: the next call needs a new approval
    assert not after.allowed and after.events == (("deploy", State.REQUESTED),)
    assert after.steps[0].request is not None and after.steps[0].request.id != request.id


@pytest.mark.parametrize("other", [call(arguments={"env": "staging"}), call(identity=BOB),
                                   call(revision="r2"), call(arguments={"env": "prod", "force": True})])
async def test_another_call_is_not_approved(store: MemoryApprovalStore, other: ApprovalCall) -> None:
    plan = plan_of(store)
    request = (await plan.decide(call())).steps[0].request
    assert request is not None
    await store.decide(request.id, "approve", Party("https://idp", "carol"))
    denied = await plan.decide(other)
    assert not denied.allowed and denied.events == (("deploy", State.REQUESTED),)
    assert (await plan.decide(call())).allowed  # the approved call itself still runs, once


async def test_nobody_approves_their_own_call(store: MemoryApprovalStore) -> None:
    request = (await plan_of(store).decide(call())).steps[0].request
    assert request is not None
    assert await store.decide(request.id, "approve", Party("https://idp", "alice")) == "own"
    assert await store.decide(request.id, "approve", None) == "own"
    assert not (await plan_of(store).decide(call())).allowed


async def test_a_request_not_decided_in_time_expires(store: MemoryApprovalStore, clock: Clock) -> None:
    plan = plan_of(store)
    request = (await plan.decide(call())).steps[0].request
    assert request is not None
    clock.now += 600
    assert await store.decide(request.id, "approve", BOB_PARTY) == "unknown"
    later = await plan.decide(call())
    assert later.events == (("deploy", State.EXPIRED), ("deploy", State.REQUESTED))
    assert later.steps[0].request is not None and later.steps[0].request.id != request.id


async def test_an_approval_is_good_for_expires_seconds_from_when_it_was_given(
        store: MemoryApprovalStore, clock: Clock) -> None:
    plan = plan_of(store)
    request = (await plan.decide(call())).steps[0].request
    assert request is not None
    clock.now += 500
    await store.decide(request.id, "approve", BOB_PARTY)
    clock.now += 599  # 1099 s after the request, 599 after the approval
    assert (await plan.decide(call())).allowed
    second = (await plan.decide(call())).steps[0].request
    assert second is not None
    await store.decide(second.id, "approve", BOB_PARTY)
    clock.now += 600
    expired = await plan.decide(call())
    assert not expired.allowed
    assert expired.events == (("deploy", State.EXPIRED), ("deploy", State.REQUESTED))


async def test_a_refusal_stands_until_it_expires(store: MemoryApprovalStore, clock: Clock) -> None:
    plan = plan_of(store)
    request = (await plan.decide(call())).steps[0].request
    assert request is not None
    assert not isinstance(await store.decide(request.id, "refuse", BOB_PARTY), str)
    assert await store.decide(request.id, "approve", BOB_PARTY) == "decided"
    refused = await plan.decide(call())
    assert only(refused) == (Status.UNSATISFIED, f"approval 'deploy': an approver refused it "
                             f"(request {request.id})", "none", State.REFUSED)
    clock.now += 600
    assert (await plan.decide(call())).events == (("deploy", State.EXPIRED), ("deploy", State.REQUESTED))


async def test_an_anonymous_caller_gets_no_approver_request(store: MemoryApprovalStore) -> None:
    ruling = await plan_of(store).decide(call(identity=Identity(failure="no access token")))
    assert only(ruling) == (Status.UNSATISFIED, "approval 'deploy' needs a verified caller: an "
                            "approval is bound to the caller's issuer and subject", "none", None)
    assert await store.waiting() == []


async def test_a_caller_whose_identity_failed_is_an_error(store: MemoryApprovalStore) -> None:
    ruling = await plan_of(store).decide(call(identity=Identity(failure="jwks down", error=True)))
    assert only(ruling)[:3] == (Status.ERROR, "the caller could not be identified (authentication "
                                "failed on a backend error), so the call cannot be bound", None)


async def test_unbindable_arguments_are_refused(store: MemoryApprovalStore) -> None:
    ruling = await plan_of(store).decide(call(arguments={"n": float("nan")}))
    assert only(ruling) == (Status.UNSATISFIED, "approval 'deploy' cannot be asked for: its arguments "
                            "have no canonical JSON form (RFC 8785): nan is not representable in JCS",
                            "none", None)


async def test_a_greedy_caller_drops_their_own_oldest_and_others_still_ask(
        store: MemoryApprovalStore, clock: Clock) -> None:
    """SPEC §14: at most 16 requests waiting per caller, the oldest dropped (counted expired); one
    caller never fills the store for anyone else (issue 39.10)."""
    plan = plan_of(store)
    first = []
    for i in range(MAX_PENDING_PER_CALLER):
        clock.now += 1
        ruling = await plan.decide(call(arguments={"i": i}))
        assert ruling.events == (("deploy", State.REQUESTED),)
        first.append(ruling.steps[0].request)
    clock.now += 1
    more = await plan.decide(call(arguments={"i": "one more"}))
    assert not more.allowed and more.steps[0].remedy == "approver"
    assert more.events == (("deploy", State.REQUESTED), ("deploy", State.EXPIRED))
    assert first[0] is not None and await store.get(first[0].id) is None  # the oldest: dropped
    assert len(await store.waiting()) == MAX_PENDING_PER_CALLER
    assert (await plan.decide(call(identity=BOB))).events == (("deploy", State.REQUESTED),)
    assert len(await store.waiting()) == MAX_PENDING_PER_CALLER + 1


async def test_ten_thousand_declines_keep_a_bounded_few(store: MemoryApprovalStore) -> None:
    """One caller declining a `self` question 10,000 times used to fill the memory store (10,000
    requests kept for an hour) for everyone: now each caller keeps at most 16 ended ones."""
    plan = plan_of(store, approvers=None)
    for _ in range(10_000):
        step = (await plan.decide(call(can_ask=True))).steps[0]
        assert step.request is not None
        await plan.answer(step.request.id, call(), "decline")
    assert len(store._requests) <= MAX_PENDING_PER_CALLER + MAX_ENDED_PER_CALLER
    assert (await plan_of(store).decide(call(identity=BOB))).events == (("deploy", State.REQUESTED),)


async def test_a_failing_store_is_an_error(store: MemoryApprovalStore) -> None:
    class Down(MemoryApprovalStore):
        async def open(self, *args: Any) -> Any:
            raise BackendError("redis approval open failed: ConnectionError")

    ruling = await plan_of(Down()).decide(call())
    assert only(ruling) == (Status.ERROR, "approval store 'memory' failed: BackendError: redis approval "
                            "open failed: ConnectionError", None, None)


async def test_a_released_approval_serves_the_next_call(store: MemoryApprovalStore) -> None:
    plan = plan_of(store)
    request = (await plan.decide(call())).steps[0].request
    assert request is not None
    await store.decide(request.id, "approve", BOB_PARTY)
    used = await plan.decide(call())
    released = await plan.release(used)
    assert released.events == () and released.steps[0].outcome.reason == (
        f"approval 'deploy' was given (not used: the call was refused for another reason; request "
        f"{request.id})")
    assert (await plan.decide(call())).allowed  # good again, once
    assert not (await plan.decide(call())).allowed


async def test_two_approvals_are_used_both_or_neither(clock: Clock) -> None:
    class Raced(MemoryApprovalStore):
        """Another replica uses `b` between this call's look and its use."""

        async def use(self, request_id: str, binding: Any) -> Any:
            assert b is not None  # set (and checked) before the plan first uses an approval
            if request_id == b.id:
                await super().use(request_id, binding)
            return await super().use(request_id, binding)

    store = Raced(clock=clock)
    plan = plan_of(store, names=("a", "b"))
    first = await plan.decide(call())
    a, b = (s.request for s in first.steps)
    assert a is not None and b is not None
    for request in (a, b):
        await store.decide(request.id, "approve", BOB_PARTY)
    lost = await plan.decide(call())
    assert [s.outcome.status for s in lost.steps] == [Status.SATISFIED, Status.UNSATISFIED]
    assert lost.steps[1].outcome.reason == ("approval 'b' could not be used (not_approved): another "
                                            "call used it first, or it expired")
    assert lost.events == ()  # `a` was given back: not counted as used
    got = await store.get(a.id)
    assert got is not None and got.state is State.APPROVED


# -- self ------------------------------------------------------------------------------------------
async def test_a_client_that_cannot_be_asked_gets_undisclosed(store: MemoryApprovalStore) -> None:
    ruling = await plan_of(store, approvers=None).decide(call())
    assert only(ruling) == (Status.UNSATISFIED, "approval 'deploy' asks the caller to confirm, and this "
                            "client cannot be asked (no elicitation)", "undisclosed", None)
    assert ruling.events == ()


@pytest.mark.parametrize(("answer", "result", "reason"), [
    ("accept", State.USED, "was given, and this call uses it"),
    ("decline", State.REFUSED, "the caller declined"),
    ("cancel", State.REFUSED, "the caller declined"),
    (None, State.EXPIRED, "the caller did not answer within 120 s")])
async def test_a_self_question_is_asked_and_answered_once(
        store: MemoryApprovalStore, answer: Any, result: State, reason: str) -> None:
    plan = plan_of(store, approvers=None)
    asked = await plan.decide(call(can_ask=True))
    (step,) = asked.steps
    assert step.remedy == "ask" and step.question is not None and step.request is not None
    assert asked.events == (("deploy", State.REQUESTED),)
    assert step.question.elicitation_params() == {
        "mode": "form", "requestedSchema": {"type": "object", "properties": {}},
        "message": "Approve one call of tool 'deploy_service' (approval 'deploy') with these "
                   'arguments?\n{\n  "env": "prod"\n}'}
    made = await plan.answer(step.request.id, call(), answer)
    assert made == ((("deploy", State.APPROVED if answer == "accept" else result),), answer == "accept")
    decided = await plan.decide(call(can_ask=True, answered=step.request.id,
                                     accepted=answer == "accept"))
    assert decided.allowed == (answer == "accept")
    assert only(decided)[1] == f"approval 'deploy': {reason} (request {step.request.id})" or \
        only(decided)[1] == f"approval 'deploy' {reason} (request {step.request.id})"
    assert only(decided)[3] is result
    assert await plan.answer(step.request.id, call(), "accept") == ((), False)  # answered once


@pytest.mark.parametrize("other", [call(identity=BOB), call(arguments={"env": "staging"}),
                                   call(revision="r2")])
async def test_only_the_call_asked_about_answers(store: MemoryApprovalStore, other: ApprovalCall) -> None:
    plan = plan_of(store, approvers=None)
    request = (await plan.decide(call(can_ask=True))).steps[0].request
    assert request is not None
    assert await plan.answer(request.id, other, "accept") == ((), False)
    got = await store.get(request.id)
    assert got is not None and got.state is State.REQUESTED
    assert not (await plan.decide(other._replace(answered=request.id, accepted=True))).allowed


async def test_a_self_decline_does_not_stop_the_next_question(store: MemoryApprovalStore) -> None:
    plan = plan_of(store, approvers=None)
    request = (await plan.decide(call(can_ask=True))).steps[0].request
    assert request is not None
    await plan.answer(request.id, call(), "decline")
    again = await plan.decide(call(can_ask=True))  # a new call (no answer with it) is asked again
    assert again.steps[0].remedy == "ask" and again.steps[0].request is not None
    assert again.steps[0].request.id != request.id


async def test_an_accept_approves_only_the_call_that_asked(store: MemoryApprovalStore) -> None:
    """Issue 39.1: two identical calls in flight; the first's question is accepted, the second's
    declined. Before, both were asked about one request (any identical call could use what one
    earned), and both ran. Now each call has its own question; only the accepted one runs."""
    plan = plan_of(store, approvers=None)
    one, two = [(await plan.decide(call(can_ask=True))).steps[0] for _ in range(2)]
    assert one.request is not None and two.request is not None
    assert one.request.id != two.request.id  # a question of its own
    assert (await plan.answer(one.request.id, call(), "accept"))[1] is True
    assert (await plan.answer(two.request.id, call(), "decline"))[1] is False
    runs = [await plan.decide(call(can_ask=True, answered=rid, accepted=taken))
            for rid, taken in ((two.request.id, False), (one.request.id, True))]
    assert [r.allowed for r in runs] == [False, True]
    assert only(runs[0])[1:] == (f"approval 'deploy': the caller declined (request "
                                 f"{two.request.id})", "none", State.REFUSED)
    # the accepted question serves nobody else: not a continuation, not a retry whose answer lost
    for other in (call(can_ask=True, answered=one.request.id),
                  call(can_ask=True, answered=one.request.id, accepted=False),
                  call(can_ask=True, answered=one.request.id, accepted=True)):
        assert not (await plan.decide(other)).allowed


async def test_a_retry_continues_its_own_question_and_only_the_kept_accept_runs(
        store: MemoryApprovalStore) -> None:
    """2026-07-28: each retry of a round continues its question until it is answered; of several
    retries answering it, the first answer is the question's, and only the retry whose accept was
    kept runs; a later retry of an answered round is a new call, asked again."""
    plan = plan_of(store, approvers=None)
    asked = (await plan.decide(call(can_ask=True))).steps[0]
    assert asked.request is not None
    rid = asked.request.id
    retries = [await plan.decide(call(can_ask=True, answered=rid)) for _ in range(3)]
    assert {r.steps[0].question.request_id for r in retries if r.steps[0].question} == {rid}
    assert all(r.events == () for r in retries)  # continuing: nothing new
    kept = [(await plan.answer(rid, call(), "accept"))[1] for _ in range(3)]
    assert kept == [True, False, False]
    ruled = [await plan.decide(call(can_ask=True, answered=rid, accepted=k)) for k in kept]
    assert [r.allowed for r in ruled] == [True, False, False]
    replay = await plan.decide(call(can_ask=True, answered=rid))  # the round replayed: a new call
    assert replay.steps[0].remedy == "ask" and replay.steps[0].request is not None
    assert replay.steps[0].request.id != rid


async def test_a_declined_question_never_runs_whatever_comes_after(store: MemoryApprovalStore) -> None:
    plan = plan_of(store, approvers=None)
    asked = (await plan.decide(call(can_ask=True))).steps[0]
    assert asked.request is not None
    rid = asked.request.id
    assert await plan.answer(rid, call(), "decline") == ((("deploy", State.REFUSED),), False)
    assert await plan.answer(rid, call(), "accept") == ((), False)
    for accepted in (None, False, True):
        assert not (await plan.decide(call(can_ask=True, answered=rid, accepted=accepted))).allowed
    got = await store.get(rid)
    assert got is not None and got.state is State.REFUSED


async def test_two_self_approvals_are_asked_in_turn_on_one_call(store: MemoryApprovalStore) -> None:
    plan = plan_of(store, approvers=None, names=("a", "b"))
    first = await plan.decide(call(can_ask=True))
    assert [s.remedy for s in first.steps] == ["ask", "ask"]
    a, b = (s.request for s in first.steps)
    assert a is not None and b is not None and a.id.rsplit(".", 1)[0] == b.id.rsplit(".", 1)[0]
    assert (await plan.answer(a.id, call(), "accept"))[1]
    second = await plan.decide(call(can_ask=True, answered=a.id, accepted=True))
    assert not second.allowed and [s.remedy for s in second.steps] == [None, "ask"]
    assert second.steps[1].question is not None and second.steps[1].question.request_id == b.id
    assert (await plan.answer(b.id, call(), "accept"))[1]
    third = await plan.decide(call(can_ask=True, answered=b.id, accepted=True))
    assert third.allowed and third.events == (("a", State.USED), ("b", State.USED))


@pytest.mark.parametrize("answer", ["accept", "decline", None])
async def test_answering_a_dropped_question_drops_no_other_waiting_one(
        store: MemoryApprovalStore, clock: Clock, answer: Any) -> None:
    """SPEC §14's bound (16 waiting per caller, the oldest dropped) counts questions asked. A call
    whose answer was not a kept accept ends, asking nothing: before, deciding it again made a new
    question of its own (asked to nobody, yet waiting) whenever the question it answered was gone,
    which dropped the caller's oldest question still waiting; its answer did the same, and so on.
    (Issue 41: test_approval_self_props's model and the store disagreed so.)"""
    plan = plan_of(store, approvers=None)
    asked = []
    for i in range(MAX_PENDING_PER_CALLER + 1):
        clock.now += 1
        step = (await plan.decide(call(arguments={"i": i}, can_ask=True))).steps[0]
        assert step.remedy == "ask" and step.request is not None
        asked.append(step.request.id)
    assert await store.get(asked[0]) is None  # the 17th dropped the oldest
    clock.now += 1
    gone = call(arguments={"i": 0}, can_ask=True)
    assert await plan.answer(asked[0], gone, answer) == ((), False)
    again = await plan.decide(gone._replace(answered=asked[0], accepted=False))
    assert only(again) == (Status.UNSATISFIED, "approval 'deploy': not asked, the caller did not "
                           "accept this call", "none", None)
    assert again.events == ()
    for rid in asked[1:]:  # every question asked since still waits for its answer
        got = await store.get(rid)
        assert got is not None and got.state is State.REQUESTED, rid
    assert len(store._requests) == MAX_PENDING_PER_CALLER  # and nothing else was made


async def test_another_calls_answer_makes_no_question(store: MemoryApprovalStore) -> None:
    """The answer of a call that was not asked (bob's, to alice's question) changes nothing and
    ends bob's call without making a question for it (issue 41)."""
    plan = plan_of(store, approvers=None)
    request = (await plan.decide(call(can_ask=True))).steps[0].request
    assert request is not None
    assert await plan.answer(request.id, call(identity=BOB), "accept") == ((), False)
    ended = await plan.decide(call(identity=BOB, can_ask=True, answered=request.id, accepted=False))
    assert only(ended)[2:] == ("none", None) and ended.events == ()
    assert list(store._requests) == [request.id]
