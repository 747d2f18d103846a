"""Argument conditions on capability grants (listed values, and arguments equal to a claim of the
caller), against the reference evaluator: the guard decides exactly as the reference for random
grants, callers and arguments on every entry point; and a client that learns from the guard's
denials never hides a tool for arguments the server would allow.
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
from tests.properties.reference import World, claim, decide
from tests.properties.test_guard_props import (
    CLAIM_NAMES,
    TOOLS,
    VALUES,
    identity_of,
    policy_source,
    requirement,
    worlds,
)

SETTINGS = settings(max_examples=200, deadline=None)
POINTERS = ["/v", "/V", "/p/kind", "/list/0", "/list/1", "/a~1b", "/t~0", "/missing"]
SCALARS = ["falcon9", "Falcon9", "falcon9 ", "f\u0430lcon9", "1", "true", "", 1, 0, 42, True, False]
# Some of the claims' values too (tests/properties/test_guard_props.py), so that an argument often
# equals a claim of the caller, and sometimes nearly (the same text as another type).
argument_value = st.one_of(st.sampled_from(SCALARS), st.sampled_from([1.0, None, 10**20]),
                           st.sampled_from(VALUES), st.sampled_from([-1, {"a": 1}, ["ops"]]))


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




def claim_conditions(w: World) -> st.SearchStrategy[dict[str, str]]:
    """Arguments that must equal a claim: most often one the caller has."""
    names = sorted({*CLAIM_NAMES, *(w.claims or {})} - {"sub"})
    held = [n for n in names if w.claims is not None
            and type(claim(w.claims, n, w.aliases)) in (str, int, bool)] or names
    pointers = st.sampled_from(["/v", "/V", "/p/kind", "/a~1b", "/missing"])
    return st.one_of(st.just({}), st.dictionaries(pointers, st.sampled_from(held), min_size=1,
                                                  max_size=1),
                     st.dictionaries(pointers, st.sampled_from(names), max_size=2))


def near(value: Any) -> list[Any]:
    """A claim's value (half the time) and its near misses: the same text as another JSON type, or
    other text."""
    if isinstance(value, bool):
        return [value] * 3 + [int(value), "true" if value else "false", not value]
    if isinstance(value, int):
        return [value] * 3 + [str(value), value == 1, value + 1]
    if isinstance(value, str):
        return [value] * 3 + [value + " ", value.upper(),
                              int(value) if value.lstrip("-").isdigit() else value]
    return [value, "ops"]


def put(arguments: dict[str, Any], pointer: str, value: Any) -> None:
    """Set the argument `pointer` names (a top-level one, /p/kind or /list/N) to `value`."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
    if len(tokens) == 1:
        arguments[tokens[0]] = value
    elif tokens[0] == "p":
        arguments["p"] = {"kind": value}
    elif tokens[0] == "list":
        listed = arguments["list"] = list(arguments.get("list") or [])[:2]
        listed += [None] * (int(tokens[1]) + 1 - len(listed))
        listed[int(tokens[1])] = value


@st.composite
def echoing(draw: st.DrawFn, w: World) -> dict[str, Any]:
    """A call's arguments where an argument a condition reads is often one of its listed values, or
    the caller's claim (or nearly), so that those conditions hold and fail about as often."""
    arguments = draw(call_arguments())
    for grant in w.grants:
        for pointer, values in (grant[2] if len(grant) > 2 else {}).items():
            if draw(st.booleans()):
                put(arguments, pointer, draw(st.sampled_from(values)))
        for pointer, name in (grant[3] if len(grant) > 3 else {}).items():
            if w.claims is not None and draw(st.sampled_from([True, True, True, False])):
                put(arguments, pointer, draw(st.sampled_from(near(claim(w.claims, name, w.aliases)))))
    return arguments


@st.composite
def argument_worlds(draw: st.DrawFn) -> World:
    w = draw(worlds())
    w.grants = [(caps, when, draw(conditions), draw(claim_conditions(w))) for caps, when in w.grants]
    w.arguments = draw(echoing(w))
    return w


@st.composite
def claim_worlds(draw: st.DrawFn) -> World:
    """Grants of `capability:a` that any caller (or any verified one) meets: their claim
    conditions, and sometimes listed values too, decide them."""
    w = draw(worlds())
    opened = st.sampled_from([[], ["auth:oauth2"]])
    w.grants = [*draw(st.lists(st.tuples(st.just(["a"]), opened, st.one_of(st.just({}), conditions),
                                         claim_conditions(w)), min_size=1, max_size=3)),
                *((caps, when) for caps, when in w.grants)]
    w.arguments = draw(echoing(w))
    return w


any_world = st.one_of(argument_worlds(), claim_worlds())


# "capability:a" often, sometimes alone (a tool a client may then judge): the capability the
# grants of `claim_worlds` give
tool_lists = st.dictionaries(st.sampled_from(TOOLS), st.one_of(st.lists(st.one_of(
    requirement(), st.just("capability:a")), max_size=4), st.just(["capability:a"])), min_size=1)


@SETTINGS
@given(any_world, tool_lists)
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
@given(any_world, tool_lists, st.data())
def test_learning_never_hides_a_tool_some_arguments_would_run(
        w: World, code: dict[str, list[str]], data: st.DataObject) -> None:
    earlier = data.draw(st.lists(echoing(w), min_size=1, max_size=4))
    later = data.draw(echoing(w))
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

