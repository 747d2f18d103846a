"""Who may approve (SPEC §15): the approver's requirements decided by the guard's own evaluator (a
real Snapshot's `evaluate_one`, grants and claims included), never the caller themselves; and the
`approval:` namespace's start-up checks, naming the tool and the requirement.
"""

from __future__ import annotations

import pytest

from mcp_preconditions import Guard, Identity, Principal, RequirementError, parse_policy
from mcp_preconditions.approvals import (
    ApprovalResolver,
    MemoryApprovalStore,
    approval_resolver,
    approver_findings,
    bind,
    judge_approver,
)
from mcp_preconditions.approvals.lifecycle import ApprovalRequest, Binding, requested
from mcp_preconditions.namespaces import build_registry
from mcp_preconditions.outcomes import Outcome
from mcp_preconditions.resolvers.base import CallContext

POLICY = b"""
confidential = ["auth:claim:clearance:top"]
[approvals.deploy]
approvers = ["auth:claim:role:release_manager", "capability:deploy.approve"]
[approvals.top]
approvers = ["auth:claim:clearance:top"]
[approvals.mine]
approvers = "self"
[[capabilities.grants]]
capabilities = ["deploy.approve"]
when = ["auth:claim:team:platform"]
arguments = { "/env" = ["staging"] }
"""
SOURCE = parse_policy(POLICY, "p.toml")


def person(subject: str, **claims: str) -> Identity:
    return Identity(Principal.from_claims({"iss": "https://idp", "sub": subject, **claims}))


ALICE = person("alice", role="release_manager", team="platform")


def guard() -> Guard:
    return Guard(SOURCE, {"deploy_service": ["approval:deploy"]}, entry_points=False)


def request_for(env: str, caller: Identity = ALICE) -> ApprovalRequest:
    binding = bind("deploy", "deploy_service", {"env": env}, caller, "r1")
    assert isinstance(binding, Binding)
    return requested("id", binding, False, 0.0, 600, 600)


@pytest.mark.parametrize(("approver", "env", "allowed", "reason"), [
    (person("bob", role="release_manager", team="platform"), "staging", True, ""),
    # the grant's argument condition reads the request's arguments
    (person("bob", role="release_manager", team="platform"), "prod", False,
     "the approver does not meet: capability:deploy.approve"),
    (person("carol", team="platform"), "staging", False,
     "the approver does not meet: auth:claim:role:release_manager"),
    (ALICE, "staging", False, "nobody approves their own call"),
    (Identity(failure="no access token"), "staging", False,
     "an approver must be signed in (a verified token with a subject)"),
])
async def test_an_approver_meets_every_requirement_and_is_not_the_caller(
        approver: Identity, env: str, allowed: bool, reason: str) -> None:
    evaluate = guard().snapshot.evaluate_one
    approvers = SOURCE.policy.approvals["deploy"].approvers
    assert isinstance(approvers, list)
    judged = await judge_approver(approvers, request_for(env), approver, evaluate)
    assert (judged.allowed, judged.reason, judged.error) == (allowed, reason, False)
    if allowed:
        assert [o.requirement for o in judged.outcomes] == approvers


async def test_a_confidential_approver_requirement_is_never_named() -> None:
    judged = await judge_approver(["auth:claim:clearance:top"], request_for("x"),
                                  person("bob"), guard().snapshot.evaluate_one,
                                  SOURCE.policy.confidential)
    assert judged.reason == "the approver does not meet this approval's requirements"


async def test_an_approver_whose_verification_failed_is_an_error_not_a_refusal() -> None:
    judged = await judge_approver(["auth:oauth2"], request_for("x"),
                                  Identity(failure="jwks down", error=True), guard().snapshot.evaluate_one)
    assert (judged.allowed, judged.error) == (False, True)


async def test_a_failing_lookup_is_an_error() -> None:
    def evaluate(requirement: str, context: CallContext) -> Outcome:
        return Outcome.error(requirement, "redis down")

    judged = await judge_approver(["state:x"], request_for("x"), person("bob"), evaluate)
    assert (judged.allowed, judged.error, judged.reason) == (False, True,
                                                             "the approver does not meet: state:x")


def test_an_approval_the_policy_does_not_define_is_a_load_error_naming_tool_and_requirement() -> None:
    source = parse_policy(POLICY + b'[tools.t2]\nrequirements = ["approval:nope2"]\n', "p.toml")
    with pytest.raises(RequirementError) as info:
        Guard(source, {"deploy_service": ["approval:deploy", "approval:nope"]}, entry_points=False)
    forms = "(accepted forms: approval:NAME, where the policy defines [approvals.NAME])"
    defined = "(defined approvals: 'deploy', 'top', 'mine')"
    assert info.value.messages == [
        f"tool 'deploy_service': requirement 'approval:nope': the policy defines no approval 'nope' "
        f"{defined} {forms}",
        f"p.toml: tool 't2': requirement 'approval:nope2': the policy defines no approval 'nope2' "
        f"{defined} {forms}"]


def test_approver_requirements_are_checked_for_form_at_start_up() -> None:
    source = parse_policy(b'[approvals.d]\napprovers = ["weather:sunny", "env:", "auth:oauth2"]\n',
                          "p.toml")
    registry = build_registry(source, lambda r, c: None, entry_points=False)  # type: ignore[arg-type,return-value]
    assert [str(f) for f in approver_findings(source.policy.approvals, registry, source.source)] == [
        "p.toml: tool '(policy approvals.d.approvers)': requirement 'weather:sunny': unknown namespace "
        "'weather' (known namespaces: 'approval', 'auth', 'capability', 'env', 'feature', 'pdp', "
        "'quota', 'state')",
        "p.toml: tool '(policy approvals.d.approvers)': requirement 'env:': env: needs a label name "
        "(env:NAME) (accepted forms: env:NAME)"]


def test_an_approval_asked_as_a_condition_is_unsatisfied() -> None:
    resolver: ApprovalResolver = approval_resolver(SOURCE, MemoryApprovalStore())
    outcome = resolver.resolve("approval:deploy", CallContext("t", ALICE))
    assert (outcome.ok, outcome.transient) == (False, True)


def test_redis_approvals_share_one_store_on_the_policys_connection() -> None:
    source = parse_policy(b'[state.redis]\nurl = "redis://127.0.0.1:1/0"\n[approvals.a]\n'
                          b'approvers = "self"\nstore = "redis"\n[approvals.b]\napprovers = "self"\n'
                          b'store = "redis"\n[approvals.c]\napprovers = "self"\n', "p.toml")
    memory = MemoryApprovalStore()
    resolver = approval_resolver(source, memory)
    a, b, c = (resolver.approvals[n].store for n in "abc")
    assert a is b and a.name == "redis" and c is memory
