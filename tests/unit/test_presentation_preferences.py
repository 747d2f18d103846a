"""Reading and validating SEP-2417 model preferences (presentation/preferences.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from mcp_preconditions.errors import InputError
from mcp_preconditions.presentation import (
    ModelPreferences,
    parse_preferences,
    read_preferences,
    validate_preferences,
)

COST = "CostPriority must be between 0 and 1"
SPEED = "SpeedPriority must be between 0 and 1"
INTEL = "IntelligencePriority must be between 0 and 1"


def tool_with(**places: dict[str, Any]) -> dict[str, Any]:
    return {"name": "t", **places}


# --- where preferences are read from ---------------------------------------------------------------

def test_reads_annotations_model_preferences() -> None:
    reading = read_preferences(tool_with(annotations={"modelPreferences": {"intelligencePriority": 0.9}}))
    assert reading.preferences == ModelPreferences(intelligence_priority=0.9)
    assert reading.source == "annotations.modelPreferences"
    assert reading.problems == () and reading.notes == ()


def test_reads_sep_demo_meta_key() -> None:
    reading = read_preferences(tool_with(_meta={"com.example/model-preferences": {"costPriority": 0.9}}))
    assert reading.preferences == ModelPreferences(cost_priority=0.9)
    assert reading.source == '_meta["com.example/model-preferences"]'


def test_reads_angie_meta_key_and_angie_annotation() -> None:
    angie = {"hints": [{"name": "claude-sonnet"}, {"name": "gpt-4.1"}], "intelligencePriority": 0.9}
    from_meta = read_preferences(tool_with(_meta={"angie/modelPreferences": angie}))
    from_ann = read_preferences(tool_with(annotations={"angie/modelPreferences": angie}))
    expected = ModelPreferences(hints=("claude-sonnet", "gpt-4.1"), intelligence_priority=0.9)
    assert from_meta.preferences == expected and from_ann.preferences == expected
    assert from_meta.source == '_meta["angie/modelPreferences"]'
    assert from_ann.source == 'annotations["angie/modelPreferences"]'


def test_annotations_take_precedence_over_meta_and_differences_are_noted() -> None:
    tool = tool_with(annotations={"modelPreferences": {"speedPriority": 0.1}},
                     _meta={"com.example/model-preferences": {"speedPriority": 0.9},
                            "angie/modelPreferences": {"speedPriority": 0.1}})
    reading = read_preferences(tool)
    assert reading.preferences == ModelPreferences(speed_priority=0.1)
    # the identical angie copy is not worth a note; the differing demo copy is
    assert reading.notes == ('model preferences in _meta["com.example/model-preferences"] ignored: '
                             "annotations.modelPreferences takes precedence",)


def test_demo_meta_key_beats_angie_meta_key() -> None:
    tool = tool_with(_meta={"angie/modelPreferences": {"hints": [{"name": "a"}]},
                            "com.example/model-preferences": {"hints": [{"name": "b"}]}})
    assert read_preferences(tool).preferences == ModelPreferences(hints=("b",))


def test_sources_are_not_merged_and_an_invalid_first_source_wins() -> None:
    tool = tool_with(annotations={"modelPreferences": {"costPriority": 2}},
                     _meta={"com.example/model-preferences": {"costPriority": 0.5}})
    reading = read_preferences(tool)
    assert reading.preferences is None
    assert reading.problems == (COST,)
    assert reading.source == "annotations.modelPreferences"


@pytest.mark.parametrize("tool", [
    {"name": "t"},
    {"name": "t", "annotations": {"modelPreferences": None}},
    {"name": "t", "annotations": "not an object", "_meta": None},
    {"name": "t", "annotations": {"readOnlyHint": True}},
])
def test_absent_preferences(tool: dict[str, Any]) -> None:
    reading = read_preferences(tool)
    assert reading.preferences is None and reading.source is None and reading.problems == ()


# --- validation, the C# SDK's messages --------------------------------------------------------------

@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, 0.5, 1e-9])
def test_valid_priorities(value: float) -> None:
    raw = {"costPriority": value, "speedPriority": value, "intelligencePriority": value}
    assert validate_preferences(raw) == []
    assert parse_preferences(raw).priorities == {"intelligence": value, "cost": value, "speed": value}


@pytest.mark.parametrize("value", [-0.1, 1.0000001, 2, -1, math.nan, math.inf, -math.inf,
                                   True, False, "0.5", [0.5], {"v": 1}])
def test_invalid_priority_message(value: Any) -> None:
    assert validate_preferences({"costPriority": value}) == [COST]
    assert validate_preferences({"speedPriority": value}) == [SPEED]
    assert validate_preferences({"intelligencePriority": value}) == [INTEL]


def test_messages_in_csharp_order_joined_with_comma() -> None:
    raw = {"intelligencePriority": 1.5, "speedPriority": -1, "costPriority": math.nan}
    assert validate_preferences(raw) == [COST, SPEED, INTEL]
    with pytest.raises(InputError) as err:
        parse_preferences(raw)
    assert str(err.value) == f"{COST}, {SPEED}, {INTEL}"
    reading = read_preferences(tool_with(annotations={"modelPreferences": raw}))
    assert reading.message == ("CostPriority must be between 0 and 1, SpeedPriority must be between "
                               "0 and 1, IntelligencePriority must be between 0 and 1")


def test_null_priority_is_absent() -> None:
    assert parse_preferences({"costPriority": None}) == ModelPreferences()


def test_unknown_keys_are_ignored() -> None:
    assert parse_preferences({"costPriority": 0.2, "temperature": 9}) == ModelPreferences(cost_priority=0.2)


# --- hints in their several spellings ---------------------------------------------------------------

def test_bare_model_name_is_one_hint() -> None:
    assert parse_preferences("claude-sonnet") == ModelPreferences(hints=("claude-sonnet",))


def test_list_of_names_and_hint_objects() -> None:
    assert parse_preferences(["opus", {"name": "sonnet"}]).hints == ("opus", "sonnet")


def test_hints_as_objects_or_a_single_name() -> None:
    assert parse_preferences({"hints": [{"name": "a"}, {"name": "b", "x": 1}]}).hints == ("a", "b")
    assert parse_preferences({"hints": "a"}).hints == ("a",)


@pytest.mark.parametrize(("raw", "problems"), [
    ({"hints": [{"name": ""}]}, ["Hints[0] must be a model name or an object with a non-empty string name"]),
    ({"hints": ["ok", {"nom": "x"}]},
     ["Hints[1] must be a model name or an object with a non-empty string name"]),
    ({"hints": [{"name": 3}]}, ["Hints[0] must be a model name or an object with a non-empty string name"]),
    ({"hints": {"name": "x"}}, ["Hints must be a list"]),
    ({"hints": ""}, ["Hints[0] must be a model name or an object with a non-empty string name"]),
    ({"hints": 5, "costPriority": 3}, [COST, "Hints must be a list"]),
    ("", ["Hints[0] must be a model name or an object with a non-empty string name"]),
    ([None], ["Hints[0] must be a model name or an object with a non-empty string name"]),
    (0.5, ["ModelPreferences must be an object, a model name or a list of model names"]),
    (True, ["ModelPreferences must be an object, a model name or a list of model names"]),
])
def test_bad_shapes(raw: Any, problems: list[str]) -> None:
    assert validate_preferences(raw) == problems
    with pytest.raises(InputError, match="must be"):
        parse_preferences(raw)


def test_priorities_listed_in_display_order() -> None:
    prefs = parse_preferences({"speedPriority": 0.3, "costPriority": 0.2, "intelligencePriority": 0.9})
    assert list(prefs.priorities) == ["intelligence", "cost", "speed"]
    assert prefs.priority("cost") == 0.2 and ModelPreferences().priority("cost") is None
