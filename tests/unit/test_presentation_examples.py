"""The shipped examples: reproducible, lint-clean, and routed/presented as docs/presentation.md says."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from mcp_preconditions.files import read_tools as load_tools
from mcp_preconditions.presentation import (
    load_catalog,
    present,
    read_preferences,
    route_tools,
    tier_lint_findings,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_registry_is_what_make_registry_produces() -> None:
    script = runpy.run_path(str(EXAMPLES / "make_registry.py"))
    committed = (EXAMPLES / "registry-80.json").read_text(encoding="utf-8")
    assert script["render"]() == committed
    assert script["main"](["make_registry.py", "--check"]) == 0


def test_registry_shape() -> None:
    tools = load_tools(EXAMPLES / "registry-80.json")
    families = {t["capabilityHints"]["category"] for t in tools}
    assert len(tools) == 80 and len({t["name"] for t in tools}) == 80 and len(families) == 10
    assert all(set(t["capabilityHints"]["tiers"]) == {"small", "medium"} for t in tools)
    assert all(isinstance(t["capabilityHints"]["priority"], float) for t in tools)


def test_examples_are_lint_clean() -> None:
    for name in ("registry-80.json", "demo-tools.json", "agriculture-tools.json"):
        assert tier_lint_findings(load_tools(EXAMPLES / name), name) == []


def test_registry_tiers_shrink_the_list() -> None:
    tools = load_tools(EXAMPLES / "registry-80.json")
    small, medium, large = (present(tools, tier) for tier in ("small", "medium", "large"))
    assert small.chars < medium.chars < large.chars
    assert small.warnings == medium.warnings == large.warnings == ()
    # the registry is written in group and priority order, so presenting keeps its order
    assert large.tools == tuple({"name": t["name"], "description": t["description"],
                                 "inputSchema": t["inputSchema"]} for t in tools)


def test_demo_tools_use_the_sep_demo_meta_key_with_the_sep_numbers() -> None:
    tools = load_tools(EXAMPLES / "demo-tools.json")
    got = {t["name"]: read_preferences(t) for t in tools}
    assert {r.source for r in got.values()} == {'_meta["com.example/model-preferences"]'}
    assert {n: r.preferences.priorities if r.preferences else None for n, r in got.items()} == {
        "list_items": {"intelligence": 0.1, "cost": 0.9, "speed": 0.8},
        "summarize_data": {"intelligence": 0.5, "cost": 0.5, "speed": 0.5},
        "deep_analysis": {"intelligence": 0.9, "cost": 0.2, "speed": 0.3},
    }


def test_agriculture_routes_follow_the_seps_ideal_models() -> None:
    tools = load_tools(EXAMPLES / "agriculture-tools.json")
    routes = {r.tool: r.model for r in route_tools(tools, load_catalog(EXAMPLES / "catalog.json"))}
    assert routes == {
        "list_organizations": "claude-haiku-4", "list_fields": "claude-haiku-4",
        "get_field_boundary": "claude-haiku-4", "get_equipment_status": "claude-sonnet-4",
        "search_operations": "claude-sonnet-4", "diagnose_field": "claude-opus-4",
        "yield_analysis": "claude-opus-4",
    }
    by_name = {t["name"]: t for t in tools}
    assert by_name["diagnose_field"]["annotations"]["modelPreferences"] == {
        "intelligencePriority": 0.9, "costPriority": 0.2, "speedPriority": 0.3}
    assert json.loads(json.dumps(by_name["list_organizations"]["annotations"]["modelPreferences"])) == {
        "costPriority": 0.9, "speedPriority": 0.8, "intelligencePriority": 0.1}
