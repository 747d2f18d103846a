"""Approvals as a requirement (SPEC §15): `approval:NAME` holds when someone allowed this very call
(the caller, `approvers = "self"`, or an approver who meets the policy's requirements), once.

lifecycle.py (one request's life: what an approval is bound to, RFC 8785; the `self` question
and what a person is shown of a call; requested → approved | refused | expired; approved → used;
records and metrics), store.py and store_redis.py (atomic, one process or every replica; the
bounds of how many requests one caller keeps are store.py's), approvers.py (who may approve),
plan.py (one call's approvals), resolver.py (the namespace), stage.py (the late stage).
The approver
pages are `mcp_preconditions.pages`. No MCP SDK here: the adapters ask.
"""

from __future__ import annotations

from ..envelope import canonical_json
from ..late import Answer, answer_of, asks_forms
from .approvers import ApproverRuling, Evaluate, approver_findings, judge_approver
from .lifecycle import (
    MAX_ARGUMENTS_BYTES,
    METRIC,
    RESULTS,
    ApprovalNote,
    ApprovalRequest,
    Binding,
    Event,
    Party,
    Question,
    Refusal,
    State,
    bind,
)
from .plan import ApprovalCall, ApprovalPlan, ApprovalRuling, ApprovalStep, CompiledApproval, Remedy
from .resolver import (
    ASKS_THE_CALLER,
    NAMESPACE,
    NEEDS_AN_APPROVER,
    PAGES_PATH,
    ApprovalResolver,
    approval_resolver,
    decided_by,
    needing_pages,
    refuse_without_pages,
)
from .stage import HeldApproval
from .store import (
    MAX_ENDED_PER_CALLER,
    MAX_PENDING_PER_CALLER,
    ApprovalStore,
    Changed,
    MemoryApprovalStore,
)

__all__ = [
    "ASKS_THE_CALLER", "MAX_ARGUMENTS_BYTES", "MAX_ENDED_PER_CALLER", "MAX_PENDING_PER_CALLER",
    "METRIC", "NAMESPACE", "NEEDS_AN_APPROVER", "PAGES_PATH", "RESULTS", "Answer", "ApprovalCall",
    "ApprovalNote", "ApprovalPlan",
    "ApprovalRequest", "ApprovalResolver", "ApprovalRuling", "ApprovalStep", "ApprovalStore",
    "ApproverRuling", "Binding", "Changed", "CompiledApproval", "Evaluate", "Event",
    "HeldApproval", "MemoryApprovalStore", "Party", "Question", "Refusal", "Remedy", "State", "answer_of",
    "approval_resolver", "approver_findings", "asks_forms", "bind", "canonical_json", "decided_by",
    "judge_approver", "needing_pages", "refuse_without_pages",
]
