"""Capability tiers (`capabilityHints`): a tool list as a small, medium or large model would see it.

Each field of a tier (description, inputSchema) falls back to the tool's top-level one on its own,
never to another tier. Tools are grouped by category and ordered by priority. The lint checks that
a tier's schema can still call the full tool.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..requirements import Finding

TIERS = ("small", "medium", "large")


def _tool_name(tool: Mapping[str, Any], index: int) -> str:
    name = tool.get("name")
    return name if isinstance(name, str) else f"#{index}"


def _hints(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    hints = tool.get("capabilityHints")
    return hints if isinstance(hints, Mapping) else {}


def _tier(tool: Mapping[str, Any], tier: str) -> Mapping[str, Any]:
    tiers = _hints(tool).get("tiers")
    chosen = tiers.get(tier) if isinstance(tiers, Mapping) else None
    return chosen if isinstance(chosen, Mapping) else {}


def category_of(tool: Mapping[str, Any]) -> str | None:
    """The tool's `capabilityHints.category`, None when absent or not a string."""
    category = _hints(tool).get("category")
    return category if isinstance(category, str) else None


def priority_of(tool: Mapping[str, Any]) -> float | None:
    """The tool's `capabilityHints.priority`, None when absent or not a finite number."""
    value = _hints(tool).get("priority")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _properties(schema: Any) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def _required(schema: Any) -> list[str]:
    required = schema.get("required") if isinstance(schema, Mapping) else None
    return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []


def callability_problems(tier_schema: Any, full_schema: Any) -> list[str]:
    """Why a tier's inputSchema cannot call the full tool: each as a phrase, empty when it can."""
    full_props, tier_props = _properties(full_schema), _properties(tier_schema)
    tier_required = _required(tier_schema)
    problems = [f"has property {p!r} that the full inputSchema lacks"
                for p in tier_props if p not in full_props]
    problems += [f"requires {r!r}, which the full inputSchema lacks"
                 for r in tier_required if r not in full_props and r not in tier_props]
    problems += [f"does not require {r!r}, which the full inputSchema requires"
                 for r in _required(full_schema) if r not in tier_required]
    return problems


@dataclass(frozen=True, slots=True)
class Presentation:
    """A tool list as one tier sees it, grouped and ordered, with its size."""

    tier: str
    tools: tuple[dict[str, Any], ...]
    groups: tuple[tuple[str | None, tuple[str, ...]], ...]  # (category, tool names), in order
    chars: int
    approx_tokens: int
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "tools": list(self.tools), "chars": self.chars,
                "approx_tokens": self.approx_tokens,
                "groups": [{"category": c, "tools": list(names)} for c, names in self.groups],
                "warnings": list(self.warnings)}


def measure(presented: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(characters, approximate tokens) of a presented tool list.

    Characters: code points of the compact JSON (separators "," and ":", ensure_ascii=False).
    Tokens: characters / 4, rounded up (a common rule of thumb for English text and JSON).
    """
    chars = len(json.dumps(list(presented), separators=(",", ":"), ensure_ascii=False))
    return chars, math.ceil(chars / 4)


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise InputError(f"unknown tier {tier!r} (tiers: {', '.join(TIERS)})")


def present_tool(tool: Mapping[str, Any], tier: str) -> tuple[dict[str, Any], list[str]]:
    """(the tool as `tier` sees it: name, description, inputSchema; warnings).

    A tier schema that cannot call the full tool is not presented: the full one is, with a warning.
    """
    _check_tier(tier)
    declared = _tier(tool, tier)
    out: dict[str, Any] = {"name": tool.get("name")}
    warnings: list[str] = []
    description = declared.get("description")
    if not isinstance(description, str):
        description = tool.get("description")
    if description is not None:
        out["description"] = description
    schema = declared.get("inputSchema")
    if isinstance(schema, Mapping):
        problems = callability_problems(schema, tool.get("inputSchema"))
        if problems:
            warnings.append(f"tool {tool.get('name')!r}: tier {tier!r} inputSchema "
                            f"{'; '.join(problems)}; presenting the full inputSchema")
            schema = None
    if not isinstance(schema, Mapping):
        schema = tool.get("inputSchema")
    if schema is not None:
        out["inputSchema"] = schema
    return out, warnings


def order_tools(tools: Sequence[Mapping[str, Any]]) -> list[tuple[str | None, list[int]]]:
    """Tool indexes grouped by category, groups and members by priority (higher first, stable).

    A group ranks by its highest priority; groups with no priority, and tools with none, come last;
    ties keep the order of first appearance.
    """
    groups: dict[str | None, list[int]] = {}
    for i, tool in enumerate(tools):
        groups.setdefault(category_of(tool), []).append(i)

    def rank(i: int) -> tuple[bool, float]:
        priority = priority_of(tools[i])
        return (priority is None, -(priority or 0.0))

    ordered = [(category, sorted(members, key=rank)) for category, members in groups.items()]
    ordered.sort(key=lambda group: rank(group[1][0]))
    return ordered


def present(tools: Sequence[Mapping[str, Any]], tier: str) -> Presentation:
    """The whole tool list as `tier` sees it, grouped by category, ordered by priority, measured."""
    _check_tier(tier)
    presented: list[dict[str, Any]] = []
    groups: list[tuple[str | None, tuple[str, ...]]] = []
    warnings: list[str] = []
    for category, members in order_tools(tools):
        names: list[str] = []
        for i in members:
            shown, notes = present_tool(tools[i], tier)
            presented.append(shown)
            warnings += notes
            names.append(_tool_name(tools[i], i))
        groups.append((category, tuple(names)))
    chars, tokens = measure(presented)
    return Presentation(tier, tuple(presented), tuple(groups), chars, tokens, tuple(warnings))


def _tier_problems(name: str, raw: Any, full_schema: Any) -> list[str]:
    where = f"capabilityHints.tiers.{name}"
    if name not in TIERS:
        return [f"capabilityHints.tiers: unknown tier {name!r} (tiers: {', '.join(TIERS)})"]
    if not isinstance(raw, Mapping):
        return [f"{where} must be an object"]
    problems: list[str] = []
    if "description" in raw and not isinstance(raw["description"], str):
        problems.append(f"{where}.description must be a string")
    schema = raw.get("inputSchema")
    if schema is not None and not isinstance(schema, Mapping):
        problems.append(f"{where}.inputSchema must be an object")
    elif schema is not None:
        problems += [f"{where}.inputSchema {p}" for p in callability_problems(schema, full_schema)]
    return problems


def tier_problems(tool: Mapping[str, Any]) -> list[str]:
    """Every problem with one tool's `capabilityHints` (empty when absent or sound)."""
    hints = tool.get("capabilityHints")
    if hints is None:
        return []
    if not isinstance(hints, Mapping):
        return ["capabilityHints must be an object"]
    problems: list[str] = []
    if "category" in hints and not isinstance(hints["category"], str):
        problems.append("capabilityHints.category must be a string")
    if "priority" in hints and priority_of(tool) is None:
        problems.append("capabilityHints.priority must be a number")
    tiers = hints.get("tiers")
    if tiers is not None and not isinstance(tiers, Mapping):
        problems.append("capabilityHints.tiers must be an object")
    elif tiers is not None:
        for name, raw in tiers.items():
            problems += _tier_problems(str(name), raw, tool.get("inputSchema"))
    return problems


def tier_lint_findings(tools: list[dict[str, Any]], source: str) -> list[Finding]:
    """Lint errors for every tool's capabilityHints, for the `lint` command."""
    return [Finding("error", _tool_name(tool, i), problem, None, source)
            for i, tool in enumerate(tools) for problem in tier_problems(tool)]
