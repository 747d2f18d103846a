"""What an approval leaves behind (SPEC §15): the `approval` field of a decision record, and the
results the series `mcp_preconditions_approvals_total{approval,result}` counts, as they are told
to it. An approval's label
is its name in the policy (bounded); no caller appears in either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .lifecycle import State

log = logging.getLogger("mcp_preconditions.approvals")
METRIC = "mcp_preconditions_approvals_total"
METRIC_HELP = ("Approval requests and what became of them, by approval and result (requested, "
               "approved, refused, expired, used).")
METRIC_LABELS = ("approval", "result")
RESULTS = tuple(state.value for state in State)


class ApprovalNote(NamedTuple):
    """The decision record's `"approval": {"name", "id", "result"}`: the request a call met, and
    where it stood for that call (`requested`: waiting for a decision; `refused`; `expired`: not
    answered in time; `used`: this call used the approval)."""

    name: str
    id: str
    result: State

    def to_record(self) -> dict[str, str]:
        return {"name": self.name, "id": self.id, "result": self.result.value}


# One (approval name, result) per transition an operation made: what the metric counts.
Event = tuple[str, State]


def events_of(name: str, made: tuple[State, ...]) -> tuple[Event, ...]:
    return tuple((name, state) for state in made)


# Told each (approval name, result) an operation made: the approvals_total metric. No caller.
Observe = Callable[[str, str], None]
Count = Callable[[Iterable[Event]], None]  # each result an operation made, to the metric


def counting(observe: Observe | None) -> Count:
    """What tells `observe` each result an operation made (None: nothing counts); counting never
    changes an answer, so a failing `observe` is logged and the rest are told."""
    def count(events: Iterable[Event]) -> None:
        if observe is None:
            return
        for name, state in events:
            try:
                observe(name, state.value)
            except Exception:
                log.exception("approval %s: counting %s failed", name, state.value)
    return count
