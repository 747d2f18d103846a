"""Argument conditions on capability grants, against the reference evaluator: the guard decides
exactly as the reference for random grants, callers and arguments on every entry point; and a client
that learns from the guard's denials never hides a tool for arguments the server would allow.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import Credentials, Guard, Knowledge, verdict_for
from mcp_preconditions.integrations._calls import denial_meta
from mcp_preconditions.principal import ANONYMOUS
from mcp_preconditions.wire import with_requirements
from tests.properties.reference import World, decide
from tests.properties.test_guard_props import TOOLS, identity_of, policy_source, requirement, worlds

SETTINGS = settings(max_examples=200, deadline=None)
POINTERS = ["/v", "/V", "/p/kind", "/list/0", "/list/1", "/a~1b", "/t~0", "/missing"]
SCALARS = ["falcon9", "Falcon9", "falcon9 ", "f\u0430lcon9", "1", "true", "", 1, 0, 42, True, False]
argument_value = st.one_of(st.sampled_from(SCALARS), st.sampled_from([1.0, None, 10**20]))


@st.composite
def call_arguments(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(["v", "V", "p", "list", "a/b", "t~"]), unique=True)):
        if key == "p":
            out[key] = draw(st.one_of(st.fixed_dictionaries({}, optional={"kind": argument_value}),
                                      argument_value))
        elif key == "list":
            out[key] = draw(st.lists(argument_value, max_size=3))
        else:
            out[key] = draw(argument_value)
    return out


conditions = st.dictionaries(st.sampled_from(POINTERS),
                             st.lists(st.sampled_from(SCALARS), min_size=1, max_size=3), max_size=2)


@st.composite
def argument_worlds(draw: st.DrawFn) -> World:
    w = draw(worlds())
    w.grants = [(caps, when, draw(conditions)) for caps, when in w.grants]
    w.arguments = draw(call_arguments())
    return w


tool_lists = st.dictionaries(st.sampled_from(TOOLS), st.lists(requirement(), max_size=4), min_size=1)


@SETTINGS
@given(argument_worlds(), tool_lists)
def test_the_guard_decides_argument_conditions_as_the_reference(w: World,
                                                                code: dict[str, list[str]]) -> None:
    guard = Guard(policy_source(w, {}), code, entry_points=False)
    identity = identity_of(w)
    credentials = ANONYMOUS if identity.principal is None else Credentials(principal=identity.principal)
    for tool, reqs in code.items():
        expected = decide(reqs, w)
        for decision in (guard.decide(tool, identity, w.arguments, record=False),
                         asyncio.run(guard.check(tool, credentials, w.arguments, record=False)),
                         asyncio.run(guard.check_identity(tool, identity, w.arguments, record=False))):
            assert (decision.allowed, decision.unmet, decision.errors) == (*expected, ())


@SETTINGS
@given(argument_worlds(), tool_lists, st.lists(call_arguments(), min_size=1, max_size=4),
       call_arguments())
def test_learning_never_hides_a_tool_some_arguments_would_run(
        w: World, code: dict[str, list[str]], earlier: list[dict[str, Any]],
        later: dict[str, Any]) -> None:
    guard = Guard(policy_source(w, {}), code, entry_points=False)
    identity = identity_of(w)
    knowledge = Knowledge()
    for arguments in earlier:  # the client calls every tool, and learns from each denial
        for tool in code:
            decision = guard.decide(tool, identity, arguments, record=False)
            if not decision.allowed:
                knowledge.learn_denial(decision.denial_payload(), meta=denial_meta(decision))
    for tool in code:
        if guard.decide(tool, identity, later, record=False).allowed:
            listed = with_requirements({"name": tool}, guard.requirements_for(tool))
            assert not verdict_for(listed, knowledge).will_fail, (tool, later)

