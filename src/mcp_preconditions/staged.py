"""Deciding a tool's late stages for one call (late.py), once its other requirements held: each stage
in order, each only while every stage before it held; a stage that refuses ends the call (the
stages after it are not asked: no exchange, no quota unit), and the stages before it give back
what they took. The outcomes go back in the tool's order and the one rule decides.

A stage answered at once stays synchronous (a memory quota: the hot path of every metered call);
an awaited one is bounded by its own timeout, or the snapshot's.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from .compiled import Staged, short_reason
from .late import Found, LateCall, LateStage
from .outcomes import Outcome, Ruling, Status, ruling

# The snapshot's bounded await: (namespace, pending, timeout or None) -> (result, None) or
# (None, why it failed).
Bounded = Callable[[str, Awaitable[Any], float | None], Awaitable[tuple[Any, str | None]]]


def settle(staged: Staged, others: tuple[Outcome, ...], call: LateCall, bounded: Bounded
           ) -> Ruling | Awaitable[Ruling]:
    """The ruling on a call whose other requirements all held, with these `others` outcomes."""
    if len(staged.stages) == 1:  # the usual tool: one stage (a quota; a forwarded call's own)
        stage = staged.stages[0]
        try:
            found = stage.decide(call)
        except Exception as exc:  # a failing stage is `error` for each of its requirements
            found = _errors(stage, f"resolver '{stage.namespace}' raised {short_reason(exc)}")
        if found.__class__ is tuple:
            return merged_one(staged, others, found)
        if not inspect.isawaitable(found):
            return _one(staged, others, _checked(stage, found))
        return _later(staged, others, call, bounded, 0, (), found)
    return _from(staged, others, call, bounded, 0, ())


def merged_one(staged: Staged, others: tuple[Outcome, ...], found: Any) -> Ruling:
    """A one-stage tool's ruling from its stage's answer given at once (`decide`'s, or `quick`'s:
    snapshot.py asks it before building a call for `settle`)."""
    slot = staged.merged
    seen = slot[0] if slot else None  # one slot, replaced whole: threads may race
    if seen is not None and seen[0] is others and seen[1] is found:
        return seen[2]  # a memo's outcomes and a unit taken: the same objects, checked
    found = _checked(staged.stages[0], found)
    merged = _one(staged, others, found)
    slot[:] = [(others, found, merged)]
    return merged


def _one(staged: Staged, others: tuple[Outcome, ...], found: Found) -> Ruling:
    """A one-stage tool's ruling: its outcomes after the others' (`last`), before them (first, as
    a gateway puts what reaches its server), else each at its place (nothing to give back
    either way: no stage came before it)."""
    if staged.last:
        return ruling(others + found)
    positions = staged.positions[0]
    if positions[0] == 0 and positions[-1] == len(positions) - 1:  # 0, 1, ...: ascending, distinct
        return ruling(found + others)
    return _merged(staged, others, (found,))


def _from(staged: Staged, others: tuple[Outcome, ...], call: LateCall, bounded: Bounded,
          start: int, decided: tuple[Found, ...]) -> Ruling | Awaitable[Ruling]:
    """Stages `start` on, in order (`decided`: the outcomes of those before it, all satisfied)."""
    stages = staged.stages
    for i in range(start, len(stages)):
        found = _decide(stages[i], call)
        if found.__class__ is not tuple:
            return _later(staged, others, call, bounded, i, decided, found)  # type: ignore[arg-type]
        decided = (*decided, found)
        if not _held(found):
            return _refused(staged, others, call, decided)
    return _merged(staged, others, decided)


async def _later(staged: Staged, others: tuple[Outcome, ...], call: LateCall, bounded: Bounded,
                 i: int, decided: tuple[Found, ...], pending: Awaitable[Found]) -> Ruling:
    stage = staged.stages[i]
    result, failure = await bounded(stage.namespace, pending, stage.timeout)
    found = _checked(stage, result) if failure is None else _errors(stage, failure)
    decided = (*decided, found)
    rest = _refused(staged, others, call, decided) if not _held(found) else \
        _from(staged, others, call, bounded, i + 1, decided)
    return rest if isinstance(rest, tuple) else await rest


def _decide(stage: LateStage, call: LateCall) -> Found | Awaitable[Found]:
    try:
        found = stage.decide(call)
    except Exception as exc:  # (as in `settle`)
        return _errors(stage, f"resolver '{stage.namespace}' raised {short_reason(exc)}")
    if found.__class__ is tuple:
        return _checked(stage, found)
    return found if inspect.isawaitable(found) else _checked(stage, found)


def _checked(stage: LateStage, found: Any) -> Found:
    """A stage's answer when it is one Outcome per requirement, each for that requirement; else
    `error` for all (a stage's garbage never allows a call)."""
    requirements = stage.requirements
    if found.__class__ is tuple and len(found) == len(requirements):
        for outcome, requirement in zip(found, requirements, strict=True):
            if outcome.__class__ is not Outcome or outcome.requirement != requirement:
                break
        else:
            return found
    return _errors(stage, f"resolver '{stage.namespace}' answered {type(found).__name__}, not one "
                          "outcome per requirement")


def _held(found: Found) -> bool:
    for outcome in found:  # noqa: SIM110 - a loop, not all(): no generator on every metered call
        if outcome.status is not Status.SATISFIED:
            return False
    return True


def _refused(staged: Staged, others: tuple[Outcome, ...], call: LateCall,
             decided: tuple[Found, ...]) -> Ruling | Awaitable[Ruling]:
    """The last stage decided refused the call: the ones before it give back what they took."""
    pending = []
    for stage in staged.stages[:len(decided) - 1]:
        try:
            given = stage.release(call)
        except Exception:  # nothing it failed to give back can allow the call: it stays refused
            continue
        if given is not None:
            pending.append(given)
    decision = _merged(staged, others, decided)
    return _after(pending, decision) if pending else decision


async def _after(pending: list[Awaitable[None]], decision: Ruling) -> Ruling:
    for given in pending:
        try:
            await given
        except Exception:  # as above: the call is refused whatever the release does
            continue
    return decision


def _merged(staged: Staged, others: tuple[Outcome, ...], decided: tuple[Found, ...]) -> Ruling:
    """Every outcome in the tool's order (each late one back at its place; stages not asked have
    none), ruled by the one rule."""
    late: dict[int, Outcome] = {}
    for positions, found in zip(staged.positions, decided, strict=False):
        late.update(zip(positions, found, strict=True))
    rest = iter(others)
    late_positions = {i for positions in staged.positions for i in positions}
    out = [late[i] if i in late_positions else next(rest) for i in range(staged.size)
           if i in late or i not in late_positions]
    return ruling(tuple(out))


def _errors(stage: LateStage, reason: str) -> Found:
    return tuple(Outcome(r, Status.ERROR, reason, transient=True) for r in stage.requirements)
