"""Client-side presentation: SEP-2417 model preferences, model routing, and capability tiers.

Pure functions over tool definitions (dicts as they come from `tools/list`); no MCP SDK needed.
"""

from __future__ import annotations

from ._files import load_catalog
from .preferences import (
    SOURCES,
    ModelPreferences,
    PreferencesReading,
    parse_preferences,
    read_preferences,
    validate_preferences,
)
from .routing import (
    ANGIE,
    STANDARD,
    Catalog,
    Model,
    Route,
    RoutingPolicy,
    catalog_problems,
    choose_model,
    flat_priorities,
    parse_catalog,
    route_tools,
    weighted_score,
)
from .tiers import (
    TIERS,
    Presentation,
    callability_problems,
    measure,
    order_tools,
    present,
    present_tool,
    tier_lint_findings,
    tier_problems,
)

__all__ = [
    "ANGIE",
    "SOURCES",
    "STANDARD",
    "TIERS",
    "Catalog",
    "Model",
    "ModelPreferences",
    "PreferencesReading",
    "Presentation",
    "Route",
    "RoutingPolicy",
    "callability_problems",
    "catalog_problems",
    "choose_model",
    "flat_priorities",
    "load_catalog",
    "measure",
    "order_tools",
    "parse_catalog",
    "parse_preferences",
    "present",
    "present_tool",
    "read_preferences",
    "route_tools",
    "tier_lint_findings",
    "tier_problems",
    "validate_preferences",
    "weighted_score",
]
