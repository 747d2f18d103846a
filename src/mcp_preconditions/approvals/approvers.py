"""Who may approve (SPEC §15): an approver meets every requirement of `[approvals.NAME] approvers`,
decided by the guard's own evaluator (the snapshot's `evaluate_one`, exactly as capability grants
decide their conditions), and is never the caller whose call it is. Checked at compile time for
form (`approver_findings`) and per decision (`judge_approver`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from ..outcomes import Outcome, Status, ruling
from ..policy.deciders import Approval
from ..principal import Identity
from ..requirements import Finding, FormChecker
from ..resolvers.base import CallContext
from .lifecycle import ApprovalRequest, Party
from .plan import CompiledApproval

# The snapshot's `evaluate_one`: one requirement for one call, through its resolver, under the
# snapshot's timeout; never raises.
Evaluate = Callable[[str, CallContext], Outcome | Awaitable[Outcome]]


def approver_findings(approvals: Mapping[str, Approval] | Mapping[str, CompiledApproval],
                      registry: FormChecker, source: str) -> list[Finding]:
    """Start-up errors for approver requirements a resolver does not accept (unknown namespace,
    wrong form), each naming the approval and the requirement, like a grant's conditions.
    `approvals`: the policy's, or as compiled (`approvers` None for "self")."""
    found = []
    for name, approval in approvals.items():
        approvers = approval.approvers
        if approvers == "self" or approvers is None:
            continue
        for req in approvers:
            problem = registry.check_form(req)
            if problem is not None:
                found.append(Finding("error", f"(policy approvals.{name}.approvers)",
                                     f"requirement {req!r}: {problem}", req, source))
    return found


class ApproverRuling(NamedTuple):
    """Whether `approver` may decide a request: `allowed`, the outcomes of the approver's
    requirements (policy order), and, when not, `reason` (what the page and a 403 say: never a
    confidential requirement). `error`: an outcome was `error` or the approver could not be
    verified for a backend's failure (a 503, not a 403: the approver may be entitled)."""

    allowed: bool
    outcomes: tuple[Outcome, ...]
    reason: str
    error: bool = False


async def judge_approver(approvers: Sequence[str], request: ApprovalRequest, approver: Identity,
                         evaluate: Evaluate, confidential: Collection[str] = ()) -> ApproverRuling:
    """May `approver` approve or refuse `request`? Never their own call; then every requirement of
    `approvers`, decided for the approver, with the request's tool and arguments as the call (so
    grants with argument conditions can scope who approves what)."""
    if approver.error:
        return ApproverRuling(False, (), "the approver could not be verified (an authorization "
                                         "server or key set did not answer)", True)
    party = Party.of(approver)
    if party is None:
        return ApproverRuling(False, (), "an approver must be signed in (a verified token with a "
                                         "subject)")
    if party == request.binding.caller:
        return ApproverRuling(False, (), "nobody approves their own call")
    context = CallContext(request.binding.tool, approver, json.loads(request.binding.arguments),
                          evaluate)
    decided = [evaluate(req, context) for req in approvers]
    pending = [d for d in decided if not isinstance(d, Outcome)]
    done = iter(await asyncio.gather(*pending)) if pending else iter(())
    outcomes = tuple(d if isinstance(d, Outcome) else next(done) for d in decided)
    allowed, _ = ruling(outcomes)
    if allowed:
        return ApproverRuling(True, outcomes, "")
    unmet = [o.requirement for o in outcomes if not o.ok]
    named = [r for r in unmet if r not in confidential]
    withheld = len(unmet) - len(named)
    reason = "the approver does not meet: " + ", ".join(named) if named else \
        "the approver does not meet this approval's requirements"
    if named and withheld:
        reason += f" (+{withheld} withheld)"
    return ApproverRuling(False, outcomes, reason,
                          any(o.status is Status.ERROR for o in outcomes))
