"""What an approval leaves behind (SPEC §15): the `approval` field of a decision record, and the
results the series `mcp_preconditions_approvals_total{approval,result}` counts. An approval's label
is its name in the policy (bounded); no caller appears in either.
"""

from __future__ import annotations

from typing import NamedTuple

from .lifecycle import State

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
