"""Properties of model routing, preference validation and tier presentation (hypothesis)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from mcp_preconditions.presentation import (
    ANGIE,
    STANDARD,
    Catalog,
    Model,
    ModelPreferences,
    RoutingPolicy,
    choose_model,
    parse_preferences,
    present_tool,
    route_tools,
    tier_problems,
    validate_preferences,
)

MESSAGES = {"costPriority": "CostPriority must be between 0 and 1",
            "speedPriority": "SpeedPriority must be between 0 and 1",
            "intelligencePriority": "IntelligencePriority must be between 0 and 1"}

unit = st.floats(min_value=0, max_value=1, allow_nan=False)
names = st.text(alphabet="abcdefgh-.0123456789", min_size=1, max_size=8)


@st.composite
def catalogs(draw: st.DrawFn) -> Catalog:
    model_names = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    models = tuple(Model(n, draw(unit), draw(unit), draw(unit)) for n in model_names)
    return Catalog(draw(st.sampled_from(model_names)), models)


preferences = st.builds(
    ModelPreferences, hints=st.lists(names, max_size=4).map(tuple),
    cost_priority=st.none() | unit, speed_priority=st.none() | unit, intelligence_priority=st.none() | unit)
policies = st.builds(RoutingPolicy, use_hints=st.booleans(), only_first_hint=st.booleans(),
                     use_scores=st.booleans(), user_model_ignored_if_default=st.booleans(),
                     ignore_flat_priorities=st.booleans(), max_intelligence=unit, max_cost=unit,
                     max_speed=unit)


@given(catalogs(), preferences, policies, st.data())
def test_the_users_choice_always_wins(catalog: Catalog, prefs: ModelPreferences, policy: RoutingPolicy,
                                      data: st.DataObject) -> None:
    user = data.draw(st.sampled_from([m.name for m in catalog.models]))
    assume(not (policy.user_model_ignored_if_default and user == catalog.default))
    assert choose_model(prefs, catalog, user_model=user, policy=policy)[:2] == (user, "user choice")


@given(catalogs(), preferences, st.sampled_from([STANDARD, ANGIE]))
def test_the_first_matching_hint_wins(catalog: Catalog, prefs: ModelPreferences,
                                      policy: RoutingPolicy) -> None:
    hints = prefs.hints[:1] if policy.only_first_hint else prefs.hints
    matching = [h for h in hints if any(h.casefold() in m.name.casefold() for m in catalog.models)]
    model, reason, _ = choose_model(prefs, catalog, policy=policy)
    if matching:
        first = matching[0]
        assert first.casefold() in model.casefold()
        assert reason.startswith(f"hint {first!r} matched {model}")
    else:
        assert not reason.startswith("hint")


@given(catalogs(), st.lists(st.from_type(object) | st.floats() | st.text() | st.none(), max_size=4))
def test_routing_never_fails_on_garbage_preferences(catalog: Catalog, raws: list[Any]) -> None:
    tools = [{"name": f"t{i}", "annotations": {"modelPreferences": raw}} for i, raw in enumerate(raws)]
    routes = route_tools(tools, catalog)
    assert [r.tool for r in routes] == [t["name"] for t in tools]
    assert all(catalog.find(r.model) is not None for r in routes)


@given(st.dictionaries(st.sampled_from(sorted(MESSAGES)), unit | st.integers(0, 1)))
def test_valid_priorities_are_always_accepted(raw: dict[str, float]) -> None:
    assert validate_preferences(raw) == []
    assert parse_preferences(raw).priorities == {
        k: float(raw[w]) for k, w in (("intelligence", "intelligencePriority"), ("cost", "costPriority"),
                                      ("speed", "speedPriority")) if w in raw}


bad_numbers = (st.floats(allow_nan=True).filter(lambda x: math.isnan(x) or not 0 <= x <= 1)
               | st.integers().filter(lambda x: not 0 <= x <= 1) | st.booleans())


@given(st.sampled_from(sorted(MESSAGES)), bad_numbers,
       st.dictionaries(st.sampled_from(sorted(MESSAGES)), unit))
def test_out_of_range_or_nan_is_always_rejected_with_the_exact_message(
        key: str, value: float, others: dict[str, float]) -> None:
    raw = {**others, key: value}
    assert validate_preferences(raw) == [MESSAGES[key]]


props = st.lists(st.sampled_from("abcdefg"), unique=True, max_size=6)


@st.composite
def tiered_tools(draw: st.DrawFn) -> dict[str, Any]:
    full_props = draw(props)
    full_required = draw(st.lists(st.sampled_from(full_props), unique=True)) if full_props else []
    tier_props = draw(props)
    tier_required = draw(st.lists(st.sampled_from(tier_props), unique=True)) if tier_props else []
    schema = {"type": "object", "properties": {key: {} for key in full_props}, "required": full_required}
    tier = {"type": "object", "properties": {key: {} for key in tier_props}, "required": tier_required}
    return {"name": "t", "inputSchema": schema,
            "capabilityHints": {"tiers": {"small": {"description": "x", "inputSchema": tier}}}}


@given(tiered_tools())
def test_a_tier_never_requires_less_than_the_full_tool(tool: dict[str, Any]) -> None:
    shown, warnings = present_tool(tool, "small")
    required = set(shown["inputSchema"]["required"])
    assert set(tool["inputSchema"]["required"]) <= required
    assert set(shown["inputSchema"]["properties"]) <= set(tool["inputSchema"]["properties"])
    if not tier_problems(tool):  # lint passes: the tier's own schema is what is shown
        assert shown["inputSchema"] == tool["capabilityHints"]["tiers"]["small"]["inputSchema"]
        assert warnings == []
    else:
        assert shown["inputSchema"] == tool["inputSchema"] and len(warnings) == 1
