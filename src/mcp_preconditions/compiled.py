"""The compiled form of a policy's tools (what a Snapshot holds): one `Check` per requirement, each
tool's checks (`CompiledTool`), its late requirements (credentials, quotas: `late.py`) kept apart
(`Staged`); and how a resolver's answer becomes an Outcome (`coerce`), anything unexpected an
`error`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .late import Found, LateStage, Quick
from .memo import Reads
from .outcomes import Outcome, Ruling, Status
from .resolvers import Resolver

_REASON_MAX = 300


@dataclass(frozen=True, slots=True)
class Check:
    """One requirement of one tool: pre-decided for the snapshot (`static`) or decided per call by
    `resolver`."""

    requirement: str
    static: Outcome | None
    resolver: Resolver | None


@dataclass(frozen=True, slots=True)
class CompiledTool:
    name: str
    requirements: tuple[str, ...]
    checks: tuple[Check, ...]
    dynamic: bool  # True when some check needs a resolver call (and so the caller's identity)
    # What `tools/list` shows: `requirements` less the snapshot's confidential ones (SPEC §3).
    advertised: tuple[str, ...]
    # Set when the caller alone decides every check (see memo.py): what they read of the arguments.
    # Its outcomes are then remembered per caller.
    reads: Reads | None = None
    # Set when the tool has late requirements: decided after the other checks (`Staged`).
    late: Staged | None = None


@dataclass(frozen=True, slots=True)
class Staged:
    """A tool's late requirements, kept apart (late.py): `rest` is the tool without them
    (remembered per caller when the caller alone decides it; a late outcome never is), `stages`
    in the order they are decided, `positions[i]` where stage i's requirements sit in the tool's
    order."""

    rest: CompiledTool
    stages: tuple[LateStage, ...]
    positions: tuple[tuple[int, ...], ...]
    size: int  # how many requirements the tool has
    last: bool  # one stage, after every other requirement: its outcomes simply follow the others'
    # The one stage's `quick` answer (late.py), when it is the tool's only stage and offers one.
    quick: Quick | None = None
    # The last (others' outcomes, one stage's outcomes, merged ruling): a caller's memo answers the
    # same outcomes each call, and a quota unit taken the same outcomes, so most calls merge
    # nothing.
    merged: list[tuple[Found, Found, Ruling]] = field(default_factory=list)


def short_reason(exc: BaseException) -> str:
    """An exception as one bounded line for an outcome's reason."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 1] + "…"


def coerce(requirement: str, result: Any, namespace: str) -> Outcome:
    """A resolver's return value as an Outcome; anything unexpected is an `error` (fail closed)."""
    if isinstance(result, Outcome):
        if result.requirement == requirement and result.status.__class__ is Status:
            return result
        return Outcome.error(requirement, f"resolver '{namespace}' returned an outcome for "
                                          f"{result.requirement!r}")
    if result is True:
        return Outcome.satisfied(requirement, f"resolver '{namespace}' said yes")
    if result is False:
        return Outcome.unsatisfied(requirement, f"resolver '{namespace}' said no")
    return Outcome.error(requirement, f"resolver '{namespace}' returned {type(result).__name__}, "
                                      "not an Outcome or bool")


def being_cancelled() -> bool:
    """True when the current task has been asked to cancel (as opposed to an awaited callee raising
    CancelledError of its own accord)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
