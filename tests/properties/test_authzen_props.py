"""The decision point against the reference evaluator (tests/properties/reference.py): for random
policies, callers, argument conditions (listed values and claims) and tools, an AuthZEN request
about a tool is decided as the reference decides that call, and a denial names exactly the unmet
requirements; the same through an action mapped to the tool, with `resource.properties` as the
arguments. The decision point has no evaluator of its own: this checks its reading of a request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mcp_preconditions import Guard
from mcp_preconditions.authzen import Action, DecisionPoint, Entity, Evaluation
from mcp_preconditions.authzen.reading import TOOL_TYPE
from tests.properties.reference import World, decide
from tests.properties.test_argument_props import any_world, claim_worlds, tool_lists
from tests.properties.test_guard_props import policy_source

SETTINGS = settings(max_examples=150, deadline=None)
# Half of them: grants of capability:a decided by their argument conditions (claim_worlds)
worlds = st.one_of(any_world, claim_worlds())


def answered(point: DecisionPoint, request: Evaluation) -> tuple[bool, Any]:
    answer = asyncio.run(point.evaluation(request))
    unmet = None if answer.context is None else answer.context["reason_admin"]["unmet"]
    return answer.decision, unmet


@SETTINGS
@given(worlds, tool_lists)
def test_a_request_is_decided_as_the_reference_decides_its_call(
        w: World, code: dict[str, list[str]]) -> None:
    assume(w.claims is not None)  # an AuthZEN request always names its subject
    assert w.claims is not None
    guard = Guard(policy_source(w, code), entry_points=False)
    point = DecisionPoint(guard)
    subject = Entity("user", str(w.claims["sub"]), {k: v for k, v in w.claims.items() if k != "sub"})
    for tool, requirements in code.items():
        allowed, unmet = decide(requirements, w)
        request = Evaluation(subject, Action("tools/call"),
                             Entity(TOOL_TYPE, tool, {"arguments": w.arguments}))
        assert answered(point, request) == (allowed, None if allowed else list(unmet))


@SETTINGS
@given(worlds, tool_lists)
def test_an_action_reads_the_resource_properties_as_the_arguments(
        w: World, code: dict[str, list[str]]) -> None:
    assume(w.claims is not None)
    assert w.claims is not None
    resource_arguments = {**w.arguments, "resource_id": "r-1", "resource_type": "thing"}
    w.arguments = resource_arguments  # what the reference sees: the properties, id and type
    guard = Guard(policy_source(w, code), entry_points=False)
    point = DecisionPoint(guard)
    subject = Entity("user", str(w.claims["sub"]), {k: v for k, v in w.claims.items() if k != "sub"})
    properties = {k: v for k, v in resource_arguments.items() if k not in ("resource_id",
                                                                           "resource_type")}
    for tool, requirements in code.items():
        allowed, unmet = decide(requirements, w)
        request = Evaluation(subject, Action(tool), Entity("thing", "r-1", properties))
        assert answered(point, request) == (allowed, None if allowed else list(unmet))
