"""The per-caller memo (memo.py) never changes a decision: one guard, a few principal objects reused
across many calls with different arguments, every decision equal to the reference evaluator's for
that caller and those arguments (so a remembered outcome is only ever one the checks gave)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import Guard, Identity, Principal
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from tests.properties.reference import World, decide
from tests.properties.test_argument_props import SCALARS, argument_worlds, call_arguments, tool_lists
from tests.properties.test_guard_props import claims, policy_source, requirement

SETTINGS = settings(max_examples=150, deadline=None)


# Where the memo could go wrong: one capability whose grant reads `/v`, called with values that are
# listed, unlisted, equal but of another type (1 and true), or absent.
VALUES = st.sampled_from([*SCALARS, 1.0, None, [1], {"k": 1}])
call_v: st.SearchStrategy[dict[str, Any]] = st.one_of(st.just({}), VALUES.map(lambda v: {"v": v}))


@st.composite
def conditioned(draw: st.DrawFn) -> tuple[World, dict[str, list[str]]]:
    w = draw(argument_worlds())
    when = draw(st.lists(st.sampled_from(["auth:oauth2", "auth:claim:role:ops", "auth:scope:s"]),
                         max_size=2))
    w.grants = [*w.grants, (["cond"], when, {"/v": draw(st.lists(st.sampled_from(SCALARS),
                                                                   min_size=1, max_size=3))})]
    code = {"t0": ["capability:cond", *draw(st.lists(requirement(), max_size=2))]}
    return w, code


def identity(claims_: dict[str, Any] | None) -> Identity:
    return ANONYMOUS_IDENTITY if claims_ is None else Identity(principal=Principal.from_claims(claims_))


@SETTINGS
@given(argument_worlds(), tool_lists, st.lists(claims(), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 2), call_arguments()), min_size=2, max_size=10))
def test_remembered_decisions_are_the_reference_decisions(
        w: World, code: dict[str, list[str]], callers: list[dict[str, Any] | None],
        calls: list[tuple[int, dict[str, Any]]]) -> None:
    guard = Guard(policy_source(w, {}), code, entry_points=False)
    identities = [identity(c) for c in callers]  # one object per caller, reused on every call
    for who, arguments in [*calls, *calls]:  # each call twice: the second may come from the memo
        index = who % len(callers)
        world = dataclasses.replace(w, claims=callers[index], arguments=arguments)
        for tool, reqs in code.items():
            decision = guard.decide(tool, identities[index], arguments, record=False)
            assert (decision.allowed, decision.unmet) == decide(reqs, world), (tool, arguments)


@SETTINGS
@given(conditioned(), st.lists(claims(), min_size=1, max_size=2),
       st.lists(st.tuples(st.integers(0, 1), call_v), min_size=2, max_size=12))
def test_argument_values_are_never_confused_in_the_memo(
        tool: tuple[World, dict[str, list[str]]], callers: list[dict[str, Any] | None],
        calls: list[tuple[int, dict[str, Any]]]) -> None:
    w, code = tool
    guard = Guard(policy_source(w, {}), code, entry_points=False)
    identities = [identity(c) for c in callers]
    for who, arguments in [*calls, *reversed(calls)]:
        index = who % len(callers)
        world = dataclasses.replace(w, claims=callers[index], arguments=arguments)
        decision = guard.decide("t0", identities[index], arguments, record=False)
        assert (decision.allowed, decision.unmet) == decide(code["t0"], world), arguments
