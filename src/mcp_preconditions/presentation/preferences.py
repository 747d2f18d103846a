"""SEP-2417 model preferences on a tool: where they are read from, their shape, their validation.

Validation follows the C# SDK's `ModelPreferences.Validate`: the same messages in the same order
(Cost, Speed, Intelligence) joined with ", ". Unlike C#, NaN is invalid here (C#'s range test lets it
through), and so are booleans and non-numbers (C# rejects those while deserialising).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError

# The C# SDK validates (and reports) in this order.
VALIDATION_ORDER = ("cost", "speed", "intelligence")
# Reasons and tables list priorities in this order (SEP-2417's examples lead with intelligence).
DISPLAY_ORDER = ("intelligence", "cost", "speed")
WIRE_NAMES = {"cost": "costPriority", "speed": "speedPriority", "intelligence": "intelligencePriority"}
_RANGE_MESSAGES = {
    "cost": "CostPriority must be between 0 and 1",
    "speed": "SpeedPriority must be between 0 and 1",
    "intelligence": "IntelligencePriority must be between 0 and 1",
}
SHAPE_MESSAGE = "ModelPreferences must be an object, a model name or a list of model names"
HINTS_MESSAGE = "Hints must be a list"

# Where preferences are looked for, first found wins: (container key, key inside it, label).
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("annotations", "modelPreferences", "annotations.modelPreferences"),
    ("_meta", "com.example/model-preferences", '_meta["com.example/model-preferences"]'),
    ("_meta", "angie/modelPreferences", '_meta["angie/modelPreferences"]'),
    ("annotations", "angie/modelPreferences", 'annotations["angie/modelPreferences"]'),
)


@dataclass(frozen=True, slots=True)
class ModelPreferences:
    """A tool's validated model preferences: hint names in order, and 0..1 priorities."""

    hints: tuple[str, ...] = ()
    cost_priority: float | None = None
    speed_priority: float | None = None
    intelligence_priority: float | None = None

    def priority(self, name: str) -> float | None:
        """The priority called `name` ("cost", "speed" or "intelligence"), None when not given."""
        value: float | None = getattr(self, f"{name}_priority")
        return value

    @property
    def priorities(self) -> dict[str, float]:
        """The priorities that were given, in display order (intelligence, cost, speed)."""
        out: dict[str, float] = {}
        for name in DISPLAY_ORDER:
            value = self.priority(name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class PreferencesReading:
    """What one tool says about models: the preferences (None if absent or invalid) and why."""

    preferences: ModelPreferences | None
    source: str | None = None  # the label of the place they were read from
    problems: tuple[str, ...] = ()  # validation messages; non-empty means `preferences` is None
    notes: tuple[str, ...] = ()  # e.g. other sources that were present and ignored

    @property
    def message(self) -> str:
        """The validation messages joined as the C# SDK joins them ("" when valid)."""
        return ", ".join(self.problems)


def is_unit(value: Any) -> bool:
    """A JSON number (not a boolean) within 0..1; NaN is not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not math.isnan(value) and 0 <= value <= 1


def _hint_problems(items: list[Any]) -> list[str]:
    return [f"Hints[{i}] must be a model name or an object with a non-empty string name"
            for i, item in enumerate(items) if _hint_name(item) is None]


def _hint_name(item: Any) -> str | None:
    """The name of one hint: a `{"name": str}` object or (leniently) a bare name; None if neither."""
    name = item.get("name") if isinstance(item, Mapping) else item
    return name if isinstance(name, str) and name else None


def validate_preferences(raw: Any) -> list[str]:
    """Every problem with a raw preferences value; C#'s range messages come first, in C#'s order."""
    if isinstance(raw, str):
        return [] if raw else ["Hints[0] must be a model name or an object with a non-empty string name"]
    if isinstance(raw, list):
        return _hint_problems(raw)
    if not isinstance(raw, Mapping):
        return [SHAPE_MESSAGE]
    problems = [_RANGE_MESSAGES[name] for name in VALIDATION_ORDER
                if raw.get(WIRE_NAMES[name]) is not None and not is_unit(raw[WIRE_NAMES[name]])]
    hints = raw.get("hints")
    if isinstance(hints, list):
        problems += _hint_problems(hints)
    elif hints is not None and not isinstance(hints, str):
        problems.append(HINTS_MESSAGE)
    elif hints == "":
        problems += _hint_problems([hints])
    return problems


def _build(raw: Any) -> ModelPreferences:
    """Preferences from a value that `validate_preferences` accepted."""
    if isinstance(raw, str):
        return ModelPreferences(hints=(raw,))
    if isinstance(raw, list):
        return ModelPreferences(hints=tuple(n for n in map(_hint_name, raw) if n))
    hints = raw.get("hints")
    items = [hints] if isinstance(hints, str) else (hints or [])
    values = {name: raw.get(WIRE_NAMES[name]) for name in VALIDATION_ORDER}
    return ModelPreferences(
        hints=tuple(n for n in map(_hint_name, items) if n),
        cost_priority=None if values["cost"] is None else float(values["cost"]),
        speed_priority=None if values["speed"] is None else float(values["speed"]),
        intelligence_priority=None if values["intelligence"] is None else float(values["intelligence"]),
    )


def parse_preferences(raw: Any) -> ModelPreferences:
    """Validated preferences from their wire form: an object, a model name, or a list of names.

    Raises InputError with the joined validation messages when the value is invalid.
    """
    problems = validate_preferences(raw)
    if problems:
        raise InputError(", ".join(problems))
    return _build(raw)


def _found(tool: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every (label, raw value) present on the tool, in precedence order; null counts as absent."""
    found: list[tuple[str, Any]] = []
    for container, key, label in SOURCES:
        holder = tool.get(container)
        if isinstance(holder, Mapping) and holder.get(key) is not None:
            found.append((label, holder[key]))
    return found


def read_preferences(tool: Mapping[str, Any]) -> PreferencesReading:
    """A tool's model preferences from the first place that has them (see SOURCES).

    Places are not merged: mixing fields from two sources could build preferences no server wrote.
    Later places that hold different preferences are named in `notes`.
    """
    found = _found(tool)
    if not found:
        return PreferencesReading(None)
    label, raw = found[0]
    notes = tuple(f"model preferences in {other} ignored: {label} takes precedence"
                  for other, value in found[1:] if value != raw)
    problems = validate_preferences(raw)
    if problems:
        return PreferencesReading(None, label, tuple(problems), notes)
    return PreferencesReading(_build(raw), label, (), notes)
