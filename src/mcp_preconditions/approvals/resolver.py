"""`approval:NAME`: satisfied when the call's approval was given and this call uses it (SPEC §15).

The namespace's resolver validates the form (the policy defines `[approvals.NAME]`) and compiles
each tool's `ApprovalPlan` into a late stage (stage.py), decided after every other requirement and
the call's credential, before quotas. `resolve` is what an approval is when asked anywhere else (a
grant's condition): unsatisfied. A denial's remedy is what the stage holds for the call
(`HeldApproval.offer`: the approval page's `url`); `offer` here is for a call nothing decided.
`policy_findings` checks the approvers of the policy's approvals as a snapshot compiles.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..errors import RequirementError
from ..late import late_resolver
from ..offers import Offer, OfferCall
from ..outcomes import Outcome, Status
from ..policy.load import PolicySource
from ..requirements import Finding, body_of
from ..resolvers.base import CallContext, Registry
from .approvers import approver_findings
from .lifecycle import Observe, counting
from .plan import ApprovalPlan, CompiledApproval
from .stage import UNDISCLOSED, ApprovalStage, HeldApproval
from .store import ApprovalStore, MemoryApprovalStore

log = logging.getLogger("mcp_preconditions.approvals")
NAMESPACE = "approval"
PAGES_PATH = "/approvals"  # where the gateway serves the approval pages (pages.py)
# Who decides an approval, as `check`, `policy test` and the explorer show it: a person, per call.
ASKS_THE_CALLER, NEEDS_AN_APPROVER = "asks_the_caller", "needs_an_approver"
APPROVAL_ORDER = 500  # after a credential (an approval is not spent on a call that cannot run)


class ApprovalResolver:
    """The `approval` namespace of one policy snapshot. `pages_url`: the base URL of the approval
    pages (the gateway's public URL; None: no pages, an approver's remedy is `undisclosed`)."""

    namespace = NAMESPACE
    forms = ("approval:NAME, where the policy defines [approvals.NAME]",)
    order = APPROVAL_ORDER  # a late stage: after a credential, before a quota unit is taken
    not_a_condition = ("an approval is not a grant condition: it is given for one call of a tool, "
                       "after its other requirements")

    def __init__(self, approvals: Mapping[str, CompiledApproval], *, pages_url: str | None = None,
                 observe: Observe | None = None, taken_as_given: bool = False,
                 source: str = "(policy)") -> None:
        self.approvals = dict(approvals)
        self.pages_url = pages_url.rstrip("/") if pages_url else None
        self.observe = observe
        self.count = counting(observe)  # each result an operation made, to `observe`
        # `policy test` only (LiveSources.approvals_taken_as_given): a call without a sidecar has
        # its approvals satisfied, "taken as given", and is decided on the rest.
        self.taken_as_given = taken_as_given
        self.source = source  # the policy file, named in findings

    def decided_by(self, requirement: str) -> str | None:
        """ASKS_THE_CALLER or NEEDS_AN_APPROVER for a defined approval (None: not one)."""
        approval = self.approvals.get(body_of(requirement))
        if approval is None:
            return None
        return ASKS_THE_CALLER if approval.approvers is None else NEEDS_AN_APPROVER

    def stage(self, requirements: Sequence[str]) -> ApprovalStage:
        """A tool's `approval:` requirements as its late stage (compiled once per snapshot)."""
        return ApprovalStage(self.namespace, self.plan(requirements), self.count,
                             pages_url=self.pages_url, taken_as_given=self.taken_as_given)

    def policy_findings(self, registry: Registry) -> list[Finding]:
        """Start-up errors in the approvers of the policy's approvals: a requirement no resolver
        accepts, or a late one (an approver's requirements are decided like a grant's conditions:
        never a late one)."""
        found = approver_findings(self.approvals, registry, self.source)
        for name, approval in self.approvals.items():
            for req in approval.approvers or ():
                late = late_resolver(registry.for_requirement(req))
                if late is not None:
                    found.append(Finding("error", f"(policy approvals.{name}.approvers)",
                                         f"requirement {req!r}: {late.not_a_condition}", req,
                                         self.source))
        return found

    async def offer(self, requirement: str, call: OfferCall) -> Offer | None:
        """The remedy of an unmet `approval:NAME`: what its stage holds for the call says it
        (`HeldApproval.offer`); an approval no stage decided (the adapter carried no sidecar) is
        `undisclosed`."""
        held = call.held.get(requirement)
        return await held.offer(requirement, call) if isinstance(held, HeldApproval) else UNDISCLOSED

    def validate(self, requirement: str) -> str | None:
        name = body_of(requirement)
        if name in self.approvals:
            return None
        defined = ", ".join(repr(n) for n in self.approvals) or "none"
        return f"the policy defines no approval {name!r} (defined approvals: {defined})"

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        return Outcome(requirement, Status.UNSATISFIED, "an approval is decided for a tool's own "
                       "call, after its other requirements: it is never a condition of something "
                       "else", transient=True)

    def plan(self, requirements: Sequence[str]) -> ApprovalPlan:
        """How to decide these approvals (a tool's, in its order), compiled once per snapshot."""
        return ApprovalPlan(tuple(requirements),
                            tuple(self.approvals[body_of(r)] for r in requirements))


def approval_resolver(source: PolicySource, memory: MemoryApprovalStore,
                      shared: ApprovalStore | None = None, *, pages_url: str | None = None,
                      observe: Observe | None = None) -> ApprovalResolver:
    """The resolver of a policy's `[approvals]`: `store = "memory"` approvals in `memory` (kept by
    the guard across reloads, like memory quotas), `store = "redis"` ones in one Redis store on
    `[state.redis]`; `shared` replaces both (tests, `check`)."""
    policy = source.policy
    redis: ApprovalStore | None = None
    if shared is None and policy.state.redis is not None and any(
            a.store == "redis" for a in policy.approvals.values()):
        try:
            from .store_redis import RedisApprovalStore
        except ImportError as exc:
            raise RequirementError([f"{source.source}: approvals with store = \"redis\" need the "
                                    f"'redis' extra (pip install 'mcp-preconditions[redis]'): "
                                    f"{exc}"]) from None
        redis = RedisApprovalStore.from_policy(policy.state.redis)
    compiled = {}
    for name, approval in policy.approvals.items():
        store = shared or (redis if approval.store == "redis" else memory)
        if store is None:  # the policy model refuses this already; a constructed one may not
            raise RequirementError([f'{source.source}: approvals.{name}.store: store = "redis" '
                                    "needs a [state.redis] connection"])
        approvers = None if approval.approvers == "self" else tuple(approval.approvers)
        compiled[name] = CompiledApproval(name, approvers, approval.expires_seconds,
                                          approval.timeout_seconds, store)
    return ApprovalResolver(compiled, pages_url=pages_url, observe=observe, source=source.source)



def needing_pages(source: PolicySource) -> str | None:
    """The first approval decided by approvers (not `self`): they approve on the approval pages,
    which only a gateway serves. None when every approval asks the caller."""
    return next((name for name, a in source.policy.approvals.items() if a.approvers != "self"), None)


def refuse_without_pages(source: PolicySource) -> None:
    """A hosted server serves no approval pages: a policy with an approver-decided approval is
    refused at start (RequirementError, one line), telling the operator to put the gateway in
    front."""
    name = needing_pages(source)
    if name is not None:
        raise RequirementError([
            f"{source.source}: approvals.{name}: approvers decide it on the gateway's approval pages,"
            " which a hosted server does not serve: put the mcp-preconditions gateway in front of "
            'this server, or use approvers = "self"'])


def decided_by(requirement: str, registry: Registry) -> str | None:
    """Whether `requirement` is an approval that asks the caller or needs an approver (None: it
    is not an approval of this registry's policy)."""
    resolver = registry.get(NAMESPACE) if requirement.startswith(NAMESPACE + ":") else None
    return resolver.decided_by(requirement) if isinstance(resolver, ApprovalResolver) else None
