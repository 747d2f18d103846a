"""`approval:NAME` wired into the guard (SPEC §15) as a late stage: the resolver registered for every
policy, its memory store outliving reloads, decided after the other requirements and before a quota
(a quota that refuses gives the approval back), the record's `approval` note, `used` counted only
for a call that runs, and the denial's remedy: the approval page's `url`, or `undisclosed`.
"""

from __future__ import annotations

from typing import Any

from mcp_preconditions.approvals import ApprovalResolver, MemoryApprovalStore, Party, State
from mcp_preconditions.approvals.stage import NOT_DECIDED, HeldApproval
from mcp_preconditions.envelope import Remediation, RemediationHint
from mcp_preconditions.guard import Guard
from mcp_preconditions.late import Sidecar
from mcp_preconditions.namespaces import BUILTIN_NAMESPACES, LiveSources
from mcp_preconditions.outcomes import Decision, Status
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials, Principal
from mcp_preconditions.remedies import Offer, OfferCall, Recipient, recipient_of

POLICY = """
[quotas.once]
calls = 1
per_seconds = 3600

[approvals.deploy]
approvers = ["auth:claim:role:rm"]
[approvals.confirm]
approvers = "self"

[tools.deploy]
requirements = ["approval:deploy", "auth:claim:role:dev"]
[tools.metered]
requirements = ["quota:once", "approval:deploy"]
[tools.wipe]
requirements = ["approval:confirm"]
[tools.spend]
requirements = ["quota:once"]
"""


def who(subject: str, role: str = "dev") -> Credentials:
    return Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": subject,
                                                        "role": role}))


ALICE, RM = who("alice"), who("rita", "rm")


class Counted:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, name: str, result: str) -> None:
        self.seen.append((name, result))


def guard_of(policy: str = POLICY, **live: Any) -> Guard:
    return Guard(parse_policy(policy.encode(), "policy.toml"), live=LiveSources(**live))


def store_of(guard: Guard) -> Any:
    resolver = guard.snapshot.registry.get("approval")
    assert isinstance(resolver, ApprovalResolver)
    return resolver.approvals["deploy"].store


async def approve(guard: Guard, decision: Decision) -> None:
    note = decision.notes["approval"] if decision.notes else None
    assert note is not None
    changed = await store_of(guard).decide(note["id"], "approve", Party("https://idp", "rita"))
    assert not isinstance(changed, str)


def test_the_approval_namespace_is_built_in_and_its_store_reachable() -> None:
    assert "approval" in BUILTIN_NAMESPACES
    memory = MemoryApprovalStore()
    guard = guard_of(approval_memory=memory)
    resolver = guard.snapshot.registry.get("approval")
    assert isinstance(resolver, ApprovalResolver)
    assert resolver.approvals["deploy"].store is memory
    assert resolver.approvals["confirm"].approvers is None


async def test_memory_approvals_outlive_a_reload() -> None:
    guard = guard_of()
    denied = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    before = store_of(guard)
    guard.reload(parse_policy((POLICY + "\n# another revision\n").encode(), "policy.toml"))
    assert store_of(guard) is before
    assert denied.notes is not None
    found = await before.get(denied.notes["approval"]["id"])
    assert found is not None and found.state is State.REQUESTED


async def test_a_call_refused_for_another_reason_asks_nobody() -> None:
    counted = Counted()
    guard = guard_of(approval_results=counted)
    decision = await guard.check("deploy", who("mallory", "guest"), {}, sidecar=Sidecar())
    assert not decision.allowed
    assert [o.requirement for o in decision.outcomes] == ["auth:claim:role:dev"]
    assert decision.notes is None and counted.seen == []
    assert await store_of(guard).waiting() == []


async def test_an_approvers_approval_lets_one_call_run_and_counts_used_once() -> None:
    counted = Counted()
    guard = guard_of(approval_results=counted)
    first = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    assert not first.allowed and first.notes is not None
    assert first.notes["approval"]["result"] == "requested"
    assert counted.seen == [("deploy", "requested")]
    await approve(guard, first)
    again = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    assert again.allowed and again.notes == {"approval": {**first.notes["approval"],
                                                          "result": "used"}}
    assert counted.seen == [("deploy", "requested"), ("deploy", "used")]
    twice = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    assert not twice.allowed  # single use: a new request
    assert twice.notes is not None and twice.notes["approval"]["id"] != first.notes["approval"]["id"]


async def test_a_quota_that_refuses_after_the_approval_gives_it_back() -> None:
    counted = Counted()
    guard = guard_of(approval_results=counted)
    spent = await guard.check("metered", ALICE, {}, sidecar=Sidecar())
    assert not spent.allowed and spent.notes is not None
    assert [o.requirement for o in spent.outcomes] == ["approval:deploy"]  # no unit taken
    await approve(guard, spent)
    assert (await guard.check("spend", ALICE, {})).allowed  # the quota's one unit
    refused = await guard.check("metered", ALICE, {}, sidecar=Sidecar())
    assert not refused.allowed
    quota = refused.outcomes[0]
    assert quota.requirement == "quota:once" and quota.status is Status.UNSATISFIED
    assert refused.notes is not None and refused.notes["approval"]["result"] == "approved"
    found = await store_of(guard).get(spent.notes["approval"]["id"])
    assert found is not None and found.state is State.APPROVED  # good for the next call
    assert ("deploy", "used") not in counted.seen


async def test_without_a_sidecar_no_request_is_made() -> None:
    guard = guard_of()
    decision = await guard.check("deploy", ALICE, {})
    assert not decision.allowed
    assert decision.outcomes[0].reason == NOT_DECIDED
    assert await store_of(guard).waiting() == []


async def test_a_self_approval_without_elicitation_asks_nobody() -> None:
    guard = guard_of()
    sidecar = Sidecar()
    decision = await guard.check("wipe", ALICE, {"path": "/"}, sidecar=sidecar)
    assert not decision.allowed and decision.notes is None
    held = sidecar.held["approval:confirm"]
    assert isinstance(held, HeldApproval) and held.question is None
    assert await offered(guard, decision, sidecar, url=True) == Offer(
        Remediation.UNDISCLOSED, (), "the caller must confirm this call, and this client cannot ask "
        "(it declared no elicitation)")


async def test_a_self_approval_is_asked_then_runs_once_on_accept() -> None:
    counted = Counted()
    guard = guard_of(approval_results=counted)
    sidecar = Sidecar(can_ask=True)
    asked = await guard.check("wipe", ALICE, {"path": "/"}, sidecar=sidecar)
    held = sidecar.held["approval:confirm"]
    assert not asked.allowed and isinstance(held, HeldApproval) and held.question is not None
    assert held.question.tool == "wipe" and held.question.arguments == '{"path":"/"}'
    assert await held.answer("accept") is True
    rerun = await guard.check("wipe", ALICE, {"path": "/"},
                              sidecar=Sidecar(can_ask=True, answered=held.question.request_id,
                                              accepted=True))
    assert rerun.allowed
    assert counted.seen == [("confirm", "requested"), ("confirm", "approved"), ("confirm", "used")]


async def test_a_declined_question_denies_unavailable() -> None:
    guard = guard_of()
    sidecar = Sidecar(can_ask=True)
    await guard.check("wipe", ALICE, {}, sidecar=sidecar)
    held = sidecar.held["approval:confirm"]
    assert held.question is not None
    assert await held.answer("decline") is False
    again = Sidecar(can_ask=True, answered=held.question.request_id, accepted=False)
    decision = await guard.check("wipe", ALICE, {}, sidecar=again)
    assert not decision.allowed and decision.notes is not None
    assert decision.notes["approval"]["result"] == "refused"
    assert await offered(guard, decision, again, url=True) == Offer(
        Remediation.UNAVAILABLE, (), "the caller declined")


async def offered(guard: Guard, decision: Decision, sidecar: Sidecar, *, url: bool
                  ) -> Offer | None:
    resolver = guard.snapshot.registry.get("approval")
    assert isinstance(resolver, ApprovalResolver)
    requirement = next(o.requirement for o in decision.outcomes if o.requirement.startswith("approval:"))
    return await resolver.offer(requirement, OfferCall(
        decision, await guard.authenticate(ALICE), {}, url, sidecar.held))


async def test_an_approvers_remedy_is_the_page_for_a_client_that_opens_urls() -> None:
    guard = guard_of(approvals_url="https://gw.example/")
    sidecar = Sidecar()
    decision = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=sidecar)
    assert decision.notes is not None
    request = decision.notes["approval"]["id"]
    page = f"https://gw.example/approvals/{request}"
    said = f"waiting for an approver: request {request}, https://gw.example/approvals"
    assert await offered(guard, decision, sidecar, url=True) == Offer(
        Remediation.AVAILABLE, (RemediationHint("url", url=page),), said)
    assert await offered(guard, decision, sidecar, url=False) == Offer(
        Remediation.UNDISCLOSED, (), said)  # no link, the words all the same
    recipient = recipient_of(decision, guard.snapshot.registry, url_elicitation=True,
                             identity=lambda: guard.authenticate(ALICE), arguments={"env": "prod"},
                             held=sidecar.held)
    assert not isinstance(recipient, Recipient)
    shaped = await recipient
    assert shaped.offers["approval:deploy"].hints == (RemediationHint("url", url=page),)


async def test_without_pages_an_approvers_remedy_is_undisclosed() -> None:
    guard = guard_of()
    sidecar = Sidecar()
    decision = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=sidecar)
    assert decision.notes is not None
    assert await offered(guard, decision, sidecar, url=True) == Offer(
        Remediation.UNDISCLOSED, (), f"waiting for an approver: request {decision.notes['approval']['id']}")


def test_an_unknown_approver_requirement_is_refused_at_start() -> None:
    import pytest

    from mcp_preconditions.errors import RequirementError

    policy = POLICY.replace('approvers = ["auth:claim:role:rm"]', 'approvers = ["bogus:x"]')
    with pytest.raises(RequirementError) as caught:
        guard_of(policy)
    assert "(policy approvals.deploy.approvers)': requirement 'bogus:x': unknown namespace" in str(
        caught.value)


async def test_another_caller_or_a_new_revision_is_not_approved() -> None:
    guard = guard_of()
    first = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    await approve(guard, first)
    assert first.notes is not None
    bob = await guard.check("deploy", who("bob"), {"env": "prod"}, sidecar=Sidecar())
    assert not bob.allowed and bob.notes is not None
    assert bob.notes["approval"]["id"] != first.notes["approval"]["id"]
    guard.reload(parse_policy((POLICY + "\n# revision two\n").encode(), "policy.toml"))
    later = await guard.check("deploy", ALICE, {"env": "prod"}, sidecar=Sidecar())
    assert not later.allowed and later.notes is not None
    assert later.notes["approval"]["id"] != first.notes["approval"]["id"]
    kept = await store_of(guard).get(first.notes["approval"]["id"])
    assert kept is not None and kept.state is State.APPROVED  # still the old revision's
