"""`Guard.check_now`'s own fast path (a remembered ruling read by the one argument's listed string,
the decision made without a sidecar) decides, remembers and records exactly as `Snapshot.evaluate`
and `Guard._finish` do: the same memo entries, afresh for anything else, every decision recorded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mcp_preconditions import Guard, Outcome, Principal, parse_policy
from mcp_preconditions.arguments import ArgumentCondition
from mcp_preconditions.memo import CallerMemo, reads_of
from mcp_preconditions.outcomes import Decision, new_decision
from mcp_preconditions.principal import Credentials
from mcp_preconditions.resolvers.base import CallContext, Dependencies

VEHICLE = ArgumentCondition.of("/vehicle", ["falcon", 1])


class Ext:
    """A namespace the caller and `/vehicle` alone decide: pilots may fly a listed vehicle."""

    namespace = "ext"

    def __init__(self) -> None:
        self.calls = 0

    def validate(self, requirement: str) -> str | None:
        return None

    def dependencies(self, requirement: str) -> Dependencies:
        return Dependencies(("auth:oauth2",), (VEHICLE,))

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        self.calls += 1
        principal = context.identity.principal
        pilot = principal is not None and principal.claims.get("role") == "pilot"
        if pilot and context.arguments.get("vehicle") in ("falcon", 1):
            return Outcome.satisfied(requirement)
        return Outcome.unsatisfied(requirement, "not this caller or vehicle")


class Kept:
    def __init__(self) -> None:
        self.records: list[Decision] = []

    def record(self, decision: Decision) -> None:
        self.records.append(decision)


def setup() -> tuple[Guard, Ext, Kept]:
    ext, kept = Ext(), Kept()
    guard = Guard(parse_policy(b"", "p.toml"), {"t": ["ext:fly"]}, resolvers=[ext],
                  entry_points=False, recorder=kept)
    return guard, ext, kept


def caller(role: str) -> Credentials:
    return Credentials(principal=Principal.from_claims({"sub": role, "role": role}))


def now(guard: Guard, who: Credentials, arguments: Any, record: bool = True) -> Decision:
    decided = guard.check_now("t", who, arguments, record=record)
    assert isinstance(decided, Decision)  # every lookup here is synchronous
    return decided


def test_reads_say_their_one_top_level_argument_and_equal_ones_are_one_object() -> None:
    one = reads_of([VEHICLE])
    assert (one.argument, one.listed) == ("vehicle", frozenset({"falcon", (int, 1)}))
    assert one == ((("vehicle",), frozenset({"falcon", (int, 1)})),)  # still the plain tuple
    assert reads_of([ArgumentCondition.of("/vehicle", ["falcon", 1])]) is one
    nested = reads_of([ArgumentCondition.of("/a/b", ["x"])])
    two = reads_of([VEHICLE, ArgumentCondition.of("/pad", ["39A"])])
    assert nested.argument is None and two.argument is None and reads_of([]).argument is None


def test_a_remembered_ruling_is_the_memo_entry_evaluate_makes_and_reads() -> None:
    guard, ext, kept = setup()
    pilot = caller("pilot")
    decisions = [now(guard, pilot, {"vehicle": "falcon", "n": i}) for i in range(3)]
    assert [d.allowed for d in decisions] == [True, True, True] and ext.calls == 1
    reads = guard.snapshot.tools["t"].reads
    assert reads is not None and pilot.principal is not None
    key = CallerMemo.key("t", reads, pilot.principal, {"vehicle": "falcon"})
    assert list(guard.snapshot.memo.entries) == [key]
    assert now(guard, pilot, {"vehicle": 1}).allowed and ext.calls == 2  # its own entry
    assert now(guard, pilot, {"vehicle": 1}).allowed and ext.calls == 2
    assert not now(guard, pilot, {"vehicle": "Falcon"}).allowed  # unlisted: decided afresh
    assert not now(guard, pilot, {"vehicle": "Falcon"}).allowed and ext.calls == 4
    twin = caller("pilot")  # equal claims, another principal: not served the entry
    assert now(guard, twin, {"vehicle": "falcon"}).allowed and ext.calls == 5
    assert len(kept.records) == 8 and kept.records[-1].subject == "pilot"


def test_a_remembered_denial_is_denied_recorded_and_given_a_fresh_context_id() -> None:
    guard, ext, kept = setup()
    crew = caller("crew")
    denials = [now(guard, crew, {"vehicle": "falcon"}) for _ in range(2)]
    assert ext.calls == 1 and [d.allowed for d in denials] == [False, False]
    assert denials[0].outcomes == denials[1].outcomes and denials[1].unmet == ("ext:fly",)
    ids = [d.context_id for d in denials]
    assert None not in ids and ids[0] != ids[1]
    assert kept.records == denials and all(d.revision == guard.revision for d in denials)
    allowed = now(guard, caller("pilot"), {"vehicle": "falcon"})
    assert allowed.context_id is None and allowed.subject == "pilot" and allowed.duration_ns >= 0
    assert not now(guard, crew, {"vehicle": "falcon"}, record=False).allowed
    assert len(kept.records) == 3  # record=False: not recorded


def test_new_decision_is_an_ordinary_immutable_decision() -> None:
    outcomes = (Outcome.satisfied("auth:oauth2"),)
    fields: tuple[Any, ...] = ("t", True, outcomes, "pilot", "rev", 7, frozenset({"x"}), None,
                               {"credential": "kept"}, "authzctx_1", "authzctx_0")
    built, constructed = new_decision(*fields), Decision(*fields)
    assert type(built) is Decision and built == constructed and repr(built) == repr(constructed)
    assert new_decision(*fields[:7]) == Decision(*fields[:7])  # the rest default to None
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.allowed = False  # type: ignore[misc]
    assert built.allowed


def test_a_tool_with_a_late_stage_never_answers_from_the_memo() -> None:
    """The memo read `check_now` makes itself is for tools the caller alone decides; a tool with a
    late requirement (here a quota of one call) keeps its caller-decided rest in the memo, but
    each call still reaches its late stage: the second call is refused by the quota."""
    ext, kept = Ext(), Kept()
    policy = b"[quotas.once]\ncalls = 1\nper_seconds = 3600\n"
    guard = Guard(parse_policy(policy, "p.toml"), {"t": ["ext:fly", "quota:once"]},
                  resolvers=[ext], entry_points=False, recorder=kept)
    assert guard.snapshot.tools["t"].reads is None  # so check_now's own memo read is skipped
    pilot = caller("pilot")
    first = guard.check_now("t", pilot, {"vehicle": "falcon"})
    second = guard.check_now("t", pilot, {"vehicle": "falcon"})
    assert isinstance(first, Decision) and isinstance(second, Decision)
    assert first.allowed and not second.allowed and second.unmet == ("quota:once",)
    assert ext.calls == 1  # the rest was remembered; the quota was asked both times
