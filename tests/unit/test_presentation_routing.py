"""Model routing over a catalog (presentation/routing.py)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from mcp_preconditions.errors import InputError
from mcp_preconditions.presentation import (
    ANGIE,
    STANDARD,
    Catalog,
    Model,
    ModelPreferences,
    Route,
    RoutingPolicy,
    choose_model,
    flat_priorities,
    parse_catalog,
    route_tools,
    weighted_score,
)

CATALOG_RAW: dict[str, Any] = {
    "default": "claude-sonnet-4",
    "models": [
        {"name": "claude-haiku-4", "intelligence": 0.35, "cost": 0.9, "speed": 0.75},
        {"name": "claude-sonnet-4", "intelligence": 0.75, "cost": 0.6, "speed": 0.7},
        {"name": "Claude-Opus-4", "intelligence": 0.95, "cost": 0.25, "speed": 0.4},
        {"name": "gpt-4.1", "intelligence": 0.8, "cost": 0.5, "speed": 0.6},
    ],
}
CATALOG = parse_catalog(CATALOG_RAW, "cat.json")


def tool(name: str, prefs: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if prefs is not None:
        out["annotations"] = {"modelPreferences": prefs}
    return out


def prefs(**kw: Any) -> ModelPreferences:
    return ModelPreferences(**kw)


# --- catalog --------------------------------------------------------------------------------------

def test_parse_catalog() -> None:
    assert CATALOG.default == "claude-sonnet-4"
    assert CATALOG.models[0] == Model("claude-haiku-4", 0.35, 0.9, 0.75)
    assert CATALOG.find("gpt-4.1") is not None and CATALOG.find("GPT-4.1") is None


@pytest.mark.parametrize(("raw", "message"), [
    ([], 'c.json: (top level): must be an object {"default": NAME, "models": [...]}'),
    ({"default": "a", "models": []}, "c.json: models: must be a non-empty list"),
    ({"default": "a"}, "c.json: models: must be a non-empty list"),
    ({"default": "a", "models": ["a"]}, "c.json: models[0]: must be an object"),
    ({"default": "a", "models": [{"name": "a", "intelligence": 1, "cost": 0, "speed": 0},
                                 {"name": "b", "intelligence": 1, "cost": 0, "speed": 0},
                                 {"name": "c", "intelligence": 1, "cost": 1.5, "speed": 0}]},
     "c.json: models[2].cost: must be a number between 0 and 1"),
    ({"default": "a", "models": [{"name": "a", "intelligence": True, "cost": 0, "speed": math.nan}]},
     "c.json: models[0].intelligence: must be a number between 0 and 1\n"
     "c.json: models[0].speed: must be a number between 0 and 1"),
    ({"default": "a", "models": [{"name": "", "intelligence": 1, "cost": 0, "speed": 0}]},
     "c.json: models[0].name: must be a non-empty string"),
    ({"default": "a", "models": [{"name": "a", "intelligence": 1, "cost": 0, "speed": 0},
                                 {"name": "a", "intelligence": 1, "cost": 0, "speed": 0}]},
     "c.json: models[1].name: duplicate model name 'a'"),
    ({"default": "z", "models": [{"name": "a", "intelligence": 1, "cost": 0, "speed": 0}]},
     "c.json: default: 'z' is not in models (models: a)"),
    ({"models": [{"name": "a", "intelligence": 1, "cost": 0, "speed": 0}]},
     "c.json: default: must be the name of a model in models"),
])
def test_bad_catalog(raw: Any, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_catalog(raw, "c.json")
    assert str(err.value) == message


def test_unknown_model_is_named_with_the_catalog() -> None:
    with pytest.raises(InputError) as err:
        route_tools([tool("t")], CATALOG, user_model="gpt-5")
    assert str(err.value) == ("cat.json: no model named 'gpt-5' (models: claude-haiku-4, "
                              "claude-sonnet-4, Claude-Opus-4, gpt-4.1)")


# --- 1. the user's choice ---------------------------------------------------------------------------

def test_user_choice_beats_hints_and_scores() -> None:
    p = prefs(hints=("opus",), intelligence_priority=1.0)
    assert choose_model(p, CATALOG, user_model="claude-haiku-4") == ("claude-haiku-4", "user choice", [])


def test_user_choice_of_the_default_counts_in_the_standard_policy() -> None:
    p = prefs(hints=("opus",))
    assert choose_model(p, CATALOG, user_model="claude-sonnet-4")[:2] == ("claude-sonnet-4", "user choice")


# --- 2. hints -------------------------------------------------------------------------------------

def test_first_matching_hint_wins_case_insensitively() -> None:
    p = prefs(hints=("gemini", "OPUS", "haiku"))
    assert choose_model(p, CATALOG) == ("Claude-Opus-4", "hint 'OPUS' matched Claude-Opus-4", [])


def test_hint_beats_priorities() -> None:
    p = prefs(hints=("haiku",), intelligence_priority=1.0)
    assert choose_model(p, CATALOG)[0] == "claude-haiku-4"


def test_several_matches_take_the_best_weighted_score() -> None:
    p = prefs(hints=("claude",), intelligence_priority=0.9, cost_priority=0.2, speed_priority=0.3)
    assert choose_model(p, CATALOG)[:2] == (
        "Claude-Opus-4", "hint 'claude' matched Claude-Opus-4 (best weighted score 1.02 of 3 matches)")


def test_several_matches_without_priorities_take_catalog_order() -> None:
    assert choose_model(prefs(hints=("claude",)), CATALOG)[:2] == (
        "claude-haiku-4", "hint 'claude' matched claude-haiku-4 (first of 3 matches in catalog order)")


def test_weighted_ties_among_matches_go_to_catalog_order() -> None:
    twins = Catalog("a-1", (Model("a-1", 0.5, 0.5, 0.5), Model("a-2", 0.5, 0.5, 0.5)))
    assert choose_model(prefs(hints=("a",), cost_priority=1.0), twins)[0] == "a-1"


def test_no_hint_matches_falls_to_scores_then_default() -> None:
    scored = prefs(hints=("gemini",), cost_priority=1.0)
    assert choose_model(scored, CATALOG)[:2] == ("claude-haiku-4", "weighted score 0.90 (cost 1)")
    assert choose_model(prefs(hints=("gemini",)), CATALOG)[:2] == (
        "claude-sonnet-4", "default: no hint matched a model in the catalog")


# --- 3. weighted score ----------------------------------------------------------------------------

def test_weighted_score_reason() -> None:
    p = prefs(intelligence_priority=0.9, cost_priority=0.2, speed_priority=0.3)
    assert choose_model(p, CATALOG) == (
        "Claude-Opus-4", "weighted score 1.02 (intelligence 0.9, cost 0.2, speed 0.3)", [])
    assert weighted_score(CATALOG.models[2], {"intelligence": 0.9, "cost": 0.2, "speed": 0.3}) \
        == pytest.approx(0.9 * 0.95 + 0.2 * 0.25 + 0.3 * 0.4)


def test_weighted_ties_go_to_catalog_order() -> None:
    flat = Catalog("b", (Model("a", 0.5, 0.5, 0.5), Model("b", 0.5, 0.5, 0.5)))
    assert choose_model(prefs(speed_priority=0.7), flat)[0] == "a"


def test_all_zero_priorities_use_the_default() -> None:
    p = prefs(intelligence_priority=0, cost_priority=0.0)
    assert choose_model(p, CATALOG)[:2] == ("claude-sonnet-4", "default: all priorities are 0")


# --- 4. default -----------------------------------------------------------------------------------

def test_default_without_preferences() -> None:
    assert choose_model(None, CATALOG) == ("claude-sonnet-4", "default: no preferences", [])
    assert choose_model(prefs(), CATALOG)[1] == "default: no preferences"


def test_invalid_preferences_use_the_default_with_the_validation_messages() -> None:
    routes = route_tools([tool("t", {"costPriority": 1.2, "intelligencePriority": -1, "hints": ["opus"]})],
                         CATALOG)
    assert routes == [Route("t", "claude-sonnet-4", "default: invalid preferences in annotations."
                            "modelPreferences",
                            ("CostPriority must be between 0 and 1, IntelligencePriority must be between "
                             "0 and 1",))]


def test_invalid_preferences_do_not_stop_the_user_choice() -> None:
    [route] = route_tools([tool("t", {"speedPriority": "fast"})], CATALOG, user_model="gpt-4.1")
    assert (route.model, route.reason) == ("gpt-4.1", "user choice")
    assert route.warnings == ("SpeedPriority must be between 0 and 1",)


# --- the guard against "everything maximal" --------------------------------------------------------

def test_identical_priorities_on_every_tool_carry_no_signal() -> None:
    maximal = {"intelligencePriority": 1.0}
    routes = route_tools([tool("a", maximal), tool("b", maximal), tool("c")], CATALOG)
    warning = ("priorities are the same on all 2 tools that set them (intelligencePriority 1): "
               "they carry no signal and are not weighed")
    assert routes[0] == Route("a", "claude-sonnet-4", "default: priorities carry no signal (the same on "
                              "every tool that sets them)", (warning,))
    assert routes[1].model == "claude-sonnet-4" and routes[1].warnings == (warning,)
    assert routes[2] == Route("c", "claude-sonnet-4", "default: no preferences", ())


def test_flat_priorities_still_let_hints_choose() -> None:
    same = {"intelligencePriority": 1.0, "hints": ["haiku"]}
    routes = route_tools([tool("a", same), tool("b", {"intelligencePriority": 1.0})], CATALOG)
    assert routes[0].model == "claude-haiku-4" and routes[0].reason == "hint 'haiku' matched claude-haiku-4"


def test_one_tool_or_differing_priorities_are_signal() -> None:
    assert flat_priorities([prefs(intelligence_priority=1.0), None]) is None
    assert flat_priorities([prefs(intelligence_priority=1.0), prefs(intelligence_priority=0.9)]) is None
    assert flat_priorities([prefs(cost_priority=0.5), prefs(cost_priority=0.5, speed_priority=0.5)]) is None
    routes = route_tools([tool("a", {"intelligencePriority": 1.0}), tool("b", {"costPriority": 1.0})],
                         CATALOG)
    assert [r.model for r in routes] == ["Claude-Opus-4", "claude-haiku-4"]


def test_guard_can_be_switched_off() -> None:
    maximal = {"intelligencePriority": 1.0}
    policy = RoutingPolicy(ignore_flat_priorities=False)
    routes = route_tools([tool("a", maximal), tool("b", maximal)], CATALOG, policy=policy)
    assert [r.model for r in routes] == ["Claude-Opus-4", "Claude-Opus-4"]
    assert all(r.warnings == () for r in routes)


def test_client_cap_bounds_a_priority() -> None:
    p = prefs(intelligence_priority=0.9, speed_priority=0.3)
    assert choose_model(p, CATALOG)[0] == "Claude-Opus-4"
    capped = RoutingPolicy(max_intelligence=0.2)
    assert choose_model(p, CATALOG, policy=capped) == (
        "claude-sonnet-4", "weighted score 0.36 (intelligence 0.2, speed 0.3)",
        ["intelligencePriority 0.9 capped to 0.2 by the client"])


@pytest.mark.parametrize("cap", [-0.1, 1.5, math.nan])
def test_bad_cap(cap: float) -> None:
    with pytest.raises(InputError) as err:
        RoutingPolicy(max_cost=cap)
    assert str(err.value) == "max_cost must be a number between 0 and 1"


# --- Angie's configuration --------------------------------------------------------------------------

def test_angie_policy_flags() -> None:
    expected = dataclasses.replace(STANDARD, only_first_hint=True, use_scores=False,
                                   user_model_ignored_if_default=True)
    assert expected == ANGIE


def test_angie_non_default_user_model_wins() -> None:
    p = prefs(hints=("opus",))
    assert choose_model(p, CATALOG, user_model="gpt-4.1", policy=ANGIE)[:2] == ("gpt-4.1", "user choice")


def test_angie_default_user_model_gives_way_to_first_hint() -> None:
    p = prefs(hints=("opus", "haiku"))
    assert choose_model(p, CATALOG, user_model="claude-sonnet-4", policy=ANGIE)[:2] == (
        "Claude-Opus-4", "hint 'opus' matched Claude-Opus-4")


def test_angie_uses_only_the_first_hint() -> None:
    p = prefs(hints=("gemini", "haiku"))
    assert choose_model(p, CATALOG, policy=ANGIE)[:2] == (
        "claude-sonnet-4", "default: no hint matched a model in the catalog")
    assert choose_model(p, CATALOG)[0] == "claude-haiku-4"  # the standard policy tries them all


def test_angie_ignores_priorities() -> None:
    p = prefs(intelligence_priority=0.9)
    assert choose_model(p, CATALOG, policy=ANGIE)[:2] == (
        "claude-sonnet-4", "default: this routing policy does not use the preferences given")


def test_hints_switched_off() -> None:
    p = prefs(hints=("opus",))
    policy = RoutingPolicy(use_hints=False)
    assert choose_model(p, CATALOG, policy=policy)[:2] == (
        "claude-sonnet-4", "default: this routing policy does not use the preferences given")


def test_route_to_dict_and_order() -> None:
    routes = route_tools([tool("z"), tool("a", "haiku")], CATALOG)
    assert [r.to_dict() for r in routes] == [
        {"tool": "z", "model": "claude-sonnet-4", "reason": "default: no preferences", "warnings": []},
        {"tool": "a", "model": "claude-haiku-4", "reason": "hint 'haiku' matched claude-haiku-4",
         "warnings": []},
    ]
