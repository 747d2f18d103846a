"""Approvals as a requirement (SPEC §15): `approval:NAME` holds when someone allowed this very call
(the caller, `approvers = "self"`, or an approver who meets the policy's requirements), once.

binding.py (what an approval is bound to, RFC 8785), lifecycle.py (requested → approved | refused |
expired; approved → used), store.py and store_redis.py (atomic, one process or every replica),
approvers.py (who may approve), question.py (the `self` question), plan.py (one call's approvals),
resolver.py (the namespace), record.py (records and metrics). No MCP SDK here: the adapters ask.
"""

from __future__ import annotations

from .approvers import ApproverRuling, Evaluate, approver_findings, judge_approver
from .binding import MAX_ARGUMENTS_BYTES, Binding, Party, bind, canonical_json
from .lifecycle import ApprovalRequest, Refusal, State
from .plan import ApprovalCall, ApprovalPlan, ApprovalRuling, ApprovalStep, CompiledApproval, Remedy
from .question import Answer, Question, answer_of
from .record import METRIC, RESULTS, ApprovalNote, Event
from .resolver import NAMESPACE, ApprovalResolver, approval_resolver
from .store import MAX_WAITING_PER_CALLER, ApprovalStore, Busy, Changed, MemoryApprovalStore

__all__ = [
    "MAX_ARGUMENTS_BYTES", "MAX_WAITING_PER_CALLER", "METRIC", "NAMESPACE", "RESULTS", "Answer",
    "ApprovalCall", "ApprovalNote", "ApprovalPlan", "ApprovalRequest", "ApprovalResolver",
    "ApprovalRuling", "ApprovalStep", "ApprovalStore", "ApproverRuling", "Binding", "Busy",
    "Changed", "CompiledApproval", "Evaluate", "Event", "MemoryApprovalStore", "Party", "Question",
    "Refusal", "Remedy", "State", "answer_of", "approval_resolver", "approver_findings", "bind",
    "canonical_json", "judge_approver",
]
