"""`approval:NAME`: satisfied when the call's approval was given and this call uses it (SPEC §15).

The namespace's resolver validates the form (the policy defines `[approvals.NAME]`) and compiles
each tool's `ApprovalPlan`; the guard decides a tool's approvals through that plan, after every
other requirement holds. `resolve` is what an approval is when asked anywhere else (a grant's
condition): unsatisfied, for an approval is never a condition of something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import RequirementError
from ..outcomes import Outcome, Status
from ..policy.load import PolicySource
from ..requirements import body_of
from ..resolvers.base import CallContext
from .plan import ApprovalPlan, CompiledApproval
from .store import ApprovalStore, MemoryApprovalStore

NAMESPACE = "approval"


class ApprovalResolver:
    namespace = NAMESPACE
    forms = ("approval:NAME, where the policy defines [approvals.NAME]",)

    def __init__(self, approvals: Mapping[str, CompiledApproval]) -> None:
        self.approvals = dict(approvals)

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
                      shared: ApprovalStore | None = None) -> ApprovalResolver:
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
    return ApprovalResolver(compiled)
