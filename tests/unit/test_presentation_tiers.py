"""Capability tiers: presentation, ordering, size and the callability lint (presentation/tiers.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from mcp_preconditions.errors import InputError
from mcp_preconditions.presentation import (
    callability_problems,
    measure,
    present,
    present_tool,
    tier_lint_findings,
    tier_problems,
)
from mcp_preconditions.requirements import Finding

FULL = {"type": "object",
        "properties": {"path": {"type": "string"}, "encoding": {"type": "string"},
                       "offset": {"type": "integer"}},
        "required": ["path"]}
SMALL = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
MEDIUM = {"type": "object", "properties": {"path": {"type": "string"}, "encoding": {"type": "string"}},
          "required": ["path"]}


def file_read(**hints: Any) -> dict[str, Any]:
    return {"name": "file_read", "description": "Read file contents with line numbers and offsets",
            "inputSchema": FULL, "annotations": {"readOnlyHint": True},
            "capabilityHints": {"tiers": {"small": {"description": "Read file", "inputSchema": SMALL},
                                          "medium": {"description": "Read a file from disk",
                                                     "inputSchema": MEDIUM}},
                                "category": "filesystem", "priority": 0.8, **hints}}


# --- which tier's fields are shown ------------------------------------------------------------------

def test_declared_tiers_are_presented() -> None:
    assert present_tool(file_read(), "small") == (
        {"name": "file_read", "description": "Read file", "inputSchema": SMALL}, [])
    assert present_tool(file_read(), "medium")[0]["description"] == "Read a file from disk"
    assert present_tool(file_read(), "medium")[0]["inputSchema"] == MEDIUM


def test_large_is_the_top_level_and_other_fields_are_dropped() -> None:
    shown, _ = present_tool(file_read(), "large")
    assert shown == {"name": "file_read", "description": "Read file contents with line numbers and offsets",
                     "inputSchema": FULL}


def test_explicit_large_tier_is_used() -> None:
    tool = file_read(tiers={"large": {"description": "Everything"}})
    assert present_tool(tool, "large")[0]["description"] == "Everything"


def test_missing_small_falls_back_to_top_level_not_medium() -> None:
    tool = file_read(tiers={"medium": {"description": "Read a file from disk", "inputSchema": MEDIUM}})
    shown, _ = present_tool(tool, "small")
    assert shown["description"] == "Read file contents with line numbers and offsets"
    assert shown["inputSchema"] == FULL


def test_each_field_falls_back_on_its_own() -> None:
    tool = file_read(tiers={"small": {"description": "Read file"}})
    assert present_tool(tool, "small")[0] == {"name": "file_read", "description": "Read file",
                                              "inputSchema": FULL}
    tool = file_read(tiers={"small": {"inputSchema": SMALL, "description": 7}})
    assert present_tool(tool, "small")[0]["description"] == "Read file contents with line numbers and offsets"


def test_tool_without_hints_or_description() -> None:
    assert present_tool({"name": "x", "inputSchema": SMALL}, "small") == (
        {"name": "x", "inputSchema": SMALL}, [])


def test_uncallable_tier_schema_is_replaced_by_the_full_one() -> None:
    bad = {"type": "object", "properties": {"file": {"type": "string"}}}
    shown, warnings = present_tool(file_read(tiers={"small": {"description": "Read", "inputSchema": bad}}),
                                   "small")
    assert shown == {"name": "file_read", "description": "Read", "inputSchema": FULL}
    assert warnings == ["tool 'file_read': tier 'small' inputSchema has property 'file' that the full "
                        "inputSchema lacks; does not require 'path', which the full inputSchema "
                        "requires; presenting the full inputSchema"]


def test_unknown_tier() -> None:
    with pytest.raises(InputError) as err:
        present([], "tiny")
    assert str(err.value) == "unknown tier 'tiny' (tiers: small, medium, large)"


# --- grouping and ordering --------------------------------------------------------------------------

def t(name: str, category: Any = None, priority: Any = None) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    if category is not None:
        hints["category"] = category
    if priority is not None:
        hints["priority"] = priority
    return {"name": name, "inputSchema": {"type": "object"}, "capabilityHints": hints}


def test_grouped_by_category_ordered_by_priority_stable_missing_last() -> None:
    tools = [t("g1", "git", 0.2), t("f1", "fs", 0.5), t("f2", "fs"), t("f3", "fs", 0.9),
             t("f4", "fs", 0.5), t("g2", "git", 0.95), t("n1"), t("n2", None, 0.1), t("x", "misc")]
    result = present(tools, "small")
    assert [(c, list(names)) for c, names in result.groups] == [
        ("git", ["g2", "g1"]), ("fs", ["f3", "f1", "f4", "f2"]), (None, ["n2", "n1"]), ("misc", ["x"])]
    assert [tool["name"] for tool in result.tools] == ["g2", "g1", "f3", "f1", "f4", "f2", "n2", "n1", "x"]


def test_bad_priority_and_category_count_as_missing() -> None:
    result = present([t("a", 5, "high"), t("b", "c", math.inf), t("c", "c", True), t("d", "c", 1)], "large")
    assert [(c, list(n)) for c, n in result.groups] == [("c", ["d", "b", "c"]), (None, ["a"])]


# --- size -------------------------------------------------------------------------------------------

def test_measure_is_compact_json_characters_and_a_quarter_of_them_rounded_up() -> None:
    tools = [{"name": "é", "description": "ü"}]
    text = '[{"name":"é","description":"ü"}]'
    assert measure(tools) == (len(text), math.ceil(len(text) / 4)) == (32, 8)
    assert measure([]) == (2, 1)


def test_presentation_size_matches_its_tools() -> None:
    result = present([file_read(), t("x", "misc", 0.1)], "small")
    text = json.dumps(list(result.tools), separators=(",", ":"), ensure_ascii=False)
    assert result.chars == len(text) and result.approx_tokens == -(-len(text) // 4)
    assert result.to_dict()["chars"] == result.chars
    assert set(result.to_dict()) == {"tier", "tools", "chars", "approx_tokens", "groups", "warnings"}
    assert present([file_read()], "small").chars < present([file_read()], "large").chars


# --- lint -------------------------------------------------------------------------------------------

def test_callability_problems() -> None:
    assert callability_problems(SMALL, FULL) == []
    assert callability_problems({"properties": {"path": {}}, "required": ["path", "mode"]}, FULL) == [
        "requires 'mode', which the full inputSchema lacks"]
    assert callability_problems({}, {"required": ["a", 3]}) == [
        "does not require 'a', which the full inputSchema requires"]
    assert callability_problems({"properties": {"a": {}}}, None) == [
        "has property 'a' that the full inputSchema lacks"]


@pytest.mark.parametrize(("hints", "problems"), [
    (None, []),
    ("x", ["capabilityHints must be an object"]),
    ({"category": 3, "priority": "high"},
     ["capabilityHints.category must be a string", "capabilityHints.priority must be a number"]),
    ({"tiers": []}, ["capabilityHints.tiers must be an object"]),
    ({"tiers": {"tiny": {}}}, ["capabilityHints.tiers: unknown tier 'tiny' (tiers: small, medium, large)"]),
    ({"tiers": {"small": "Read"}}, ["capabilityHints.tiers.small must be an object"]),
    ({"tiers": {"small": {"description": 1, "inputSchema": "x"}}},
     ["capabilityHints.tiers.small.description must be a string",
      "capabilityHints.tiers.small.inputSchema must be an object"]),
    ({"tiers": {"medium": {"inputSchema": {"properties": {"path": {}, "mode": {}}}}}},
     ["capabilityHints.tiers.medium.inputSchema has property 'mode' that the full inputSchema lacks",
      "capabilityHints.tiers.medium.inputSchema does not require 'path', which the full inputSchema "
      "requires"]),
])
def test_tier_problems(hints: Any, problems: list[str]) -> None:
    tool: dict[str, Any] = {"name": "file_read", "inputSchema": FULL}
    if hints is not None:
        tool["capabilityHints"] = hints
    assert tier_problems(tool) == problems


def test_tier_lint_findings_name_tool_and_file() -> None:
    good = file_read()
    bad = {"name": "b", "inputSchema": FULL, "capabilityHints": {"tiers": {"small": {"inputSchema": {}}}}}
    findings = tier_lint_findings([good, bad], "tools.json")
    assert findings == [Finding("error", "b", "capabilityHints.tiers.small.inputSchema does not require "
                                "'path', which the full inputSchema requires", None, "tools.json")]
    assert str(findings[0]) == ("tools.json: tool 'b': capabilityHints.tiers.small.inputSchema does not "
                                "require 'path', which the full inputSchema requires")
