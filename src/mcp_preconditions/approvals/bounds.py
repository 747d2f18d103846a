"""How many approval requests one caller keeps in a store (SPEC §14, "Bounds that no single caller
can exhaust"), as a pure function both stores apply when a caller's request is made: at most
`MAX_PENDING_PER_CALLER` waiting for a decision (the oldest dropped to make room), and at most
`MAX_ENDED_PER_CALLER` that ended (used, expired, a declined question) kept besides, so a late
page or retry can say what became of them. An approver's decision that still holds (an approval
not yet used, a refusal that stands) is not dropped: only approvers make those.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import lifecycle
from .lifecycle import ApprovalRequest, State
from .record import Event

MAX_PENDING_PER_CALLER = 16
MAX_ENDED_PER_CALLER = 16


def pending(request: ApprovalRequest, now: float) -> bool:
    """Waiting for a decision (an approver's, or the caller's answer to a question)."""
    return request.state is State.REQUESTED and now < request.expires_at


def standing(request: ApprovalRequest, now: float) -> bool:
    """An approver's decision that still holds: only approvers make these."""
    return not request.self_approval and request.state in (State.APPROVED, State.REFUSED) \
        and now < request.expires_at


def crowded(mine: Iterable[ApprovalRequest], now: float) -> list[ApprovalRequest]:
    """Which of one caller's requests to drop before one more of theirs is made: the oldest
    waiting ones beyond `MAX_PENDING_PER_CALLER - 1`, and the oldest ended ones beyond
    `MAX_ENDED_PER_CALLER`."""
    ordered = sorted(mine, key=lambda r: (r.created_at, r.id))
    waiting = [r for r in ordered if pending(r, now)]
    ended = [r for r in ordered if not pending(r, now) and not standing(r, now)]
    return [*waiting[:max(0, len(waiting) - MAX_PENDING_PER_CALLER + 1)],
            *ended[:max(0, len(ended) - MAX_ENDED_PER_CALLER)]]


def dropped(request: ApprovalRequest, now: float) -> tuple[Event, ...]:
    """What dropping `request` counts: a waiting one expired now (nobody can decide it any more);
    an outlived one its expiry, which nothing counted yet."""
    if pending(request, now):
        return ((request.binding.approval, State.EXPIRED),)
    _, made = lifecycle.aged(request, now)
    return tuple((request.binding.approval, state) for state in made)
