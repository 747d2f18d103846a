"""Model routing (SPEC §7): which catalog model serves each tool, and a sentence saying why.

Precedence: the user's explicit model, then the tool's hints in order, then the weighted score of
its priorities, then the catalog's default. A RoutingPolicy switches steps off (Angie's order is one
such configuration) and caps priorities; priorities identical across a server's tools are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from .preferences import DISPLAY_ORDER, WIRE_NAMES, ModelPreferences, is_unit, read_preferences

SCORES = ("intelligence", "cost", "speed")


@dataclass(frozen=True, slots=True)
class Model:
    """One catalog model; each score is 0..1, higher is better for that priority (cost 1 = cheapest)."""

    name: str
    intelligence: float
    cost: float
    speed: float

    def score(self, priority: str) -> float:
        value: float = getattr(self, priority)
        return value


@dataclass(frozen=True, slots=True)
class Catalog:
    """The models a client can route to, and the one it uses when nothing else decides."""

    default: str
    models: tuple[Model, ...]
    source: str = "catalog"

    def find(self, name: str) -> Model | None:
        """The model named exactly `name`, or None."""
        return next((m for m in self.models if m.name == name), None)

    def require(self, name: str) -> Model:
        """The model named exactly `name`; InputError naming the catalog when there is none."""
        model = self.find(name)
        if model is None:
            known = ", ".join(m.name for m in self.models)
            raise InputError(f"{self.source}: no model named {name!r} (models: {known})")
        return model


def _model_problems(i: int, raw: Any, seen: set[str]) -> list[str]:
    if not isinstance(raw, Mapping):
        return [f"models[{i}]: must be an object"]
    problems: list[str] = []
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"models[{i}].name: must be a non-empty string")
    elif name in seen:
        problems.append(f"models[{i}].name: duplicate model name {name!r}")
    else:
        seen.add(name)
    problems += [f"models[{i}].{score}: must be a number between 0 and 1"
                 for score in SCORES if not is_unit(raw.get(score))]
    return problems


def catalog_problems(raw: Any) -> list[str]:
    """Every problem with a raw catalog, each as `place: what is wrong`."""
    if not isinstance(raw, Mapping):
        return ['(top level): must be an object {"default": NAME, "models": [...]}']
    models = raw.get("models")
    if not isinstance(models, list) or not models:
        return ["models: must be a non-empty list"]
    seen: set[str] = set()
    problems = [p for i, m in enumerate(models) for p in _model_problems(i, m, seen)]
    default = raw.get("default")
    if not isinstance(default, str):
        problems.append("default: must be the name of a model in models")
    elif seen and default not in seen:
        problems.append(f"default: {default!r} is not in models (models: {', '.join(sorted(seen))})")
    return problems


def parse_catalog(raw: Any, source: str = "catalog") -> Catalog:
    """A Catalog from its JSON form; InputError listing every problem (one per line) otherwise."""
    problems = catalog_problems(raw)
    if problems:
        raise InputError("\n".join(f"{source}: {p}" for p in problems))
    models = tuple(Model(m["name"], float(m["intelligence"]), float(m["cost"]), float(m["speed"]))
                   for m in raw["models"])
    return Catalog(raw["default"], models, source)


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """Which routing steps run, and the client's cap on each priority (0..1)."""

    use_hints: bool = True
    only_first_hint: bool = False
    use_scores: bool = True
    user_model_ignored_if_default: bool = False
    ignore_flat_priorities: bool = True  # the guard against "everything maximal"
    max_intelligence: float = 1.0
    max_cost: float = 1.0
    max_speed: float = 1.0

    def __post_init__(self) -> None:
        for name in SCORES:
            if not is_unit(self.cap(name)):
                raise InputError(f"max_{name} must be a number between 0 and 1")

    def cap(self, priority: str) -> float:
        value: float = getattr(self, f"max_{priority}")
        return value


STANDARD = RoutingPolicy()
# Angie: a non-default user preference > hints[0] > the default; priorities are not used.
ANGIE = RoutingPolicy(only_first_hint=True, use_scores=False, user_model_ignored_if_default=True)


@dataclass(frozen=True, slots=True)
class Route:
    """The model chosen for one tool, the reason, and anything the user should know."""

    tool: str
    model: str
    reason: str
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "model": self.model, "reason": self.reason,
                "warnings": list(self.warnings)}


def _fmt(value: float) -> str:
    return f"{value:g}"


def weighted_score(model: Model, weights: Mapping[str, float]) -> float:
    """Sum of priority × the model's score for that priority."""
    return sum(weight * model.score(name) for name, weight in weights.items())


def capped_weights(prefs: ModelPreferences, policy: RoutingPolicy) -> tuple[dict[str, float], list[str]]:
    """The tool's priorities bounded by the client's caps, and a warning for each one capped."""
    weights: dict[str, float] = {}
    warnings: list[str] = []
    for name, value in prefs.priorities.items():
        cap = policy.cap(name)
        if value > cap:
            warnings.append(f"{WIRE_NAMES[name]} {_fmt(value)} capped to {_fmt(cap)} by the client")
            value = cap
        weights[name] = value
    return weights, warnings


def _best(models: Sequence[Model], weights: Mapping[str, float]) -> tuple[Model, float]:
    """The highest weighted score; ties go to the earlier model (catalog order)."""
    best, best_score = models[0], weighted_score(models[0], weights)
    for model in models[1:]:
        score = weighted_score(model, weights)
        if score > best_score:
            best, best_score = model, score
    return best, best_score


def _by_hint(prefs: ModelPreferences, catalog: Catalog, weights: Mapping[str, float],
             policy: RoutingPolicy) -> tuple[str, str] | None:
    """(model, reason) from the first hint that is a case-insensitive substring of a model name."""
    hints = prefs.hints[:1] if policy.only_first_hint else prefs.hints
    for hint in hints:
        needle = hint.casefold()
        matches = [m for m in catalog.models if needle in m.name.casefold()]
        if not matches:
            continue
        reason = f"hint {hint!r} matched {{}}"
        if len(matches) == 1:
            return matches[0].name, reason.format(matches[0].name)
        if weights:
            model, score = _best(matches, weights)
            detail = f" (best weighted score {score:.2f} of {len(matches)} matches)"
        else:
            model, detail = matches[0], f" (first of {len(matches)} matches in catalog order)"
        return model.name, reason.format(model.name) + detail
    return None


def _default_reason(prefs: ModelPreferences, policy: RoutingPolicy, flat: bool) -> str:
    if prefs.hints and policy.use_hints:
        return "default: no hint matched a model in the catalog"
    if prefs.priorities and flat and policy.ignore_flat_priorities:
        return "default: priorities carry no signal (the same on every tool that sets them)"
    if prefs.priorities and policy.use_scores:
        return "default: all priorities are 0"
    if prefs.priorities or prefs.hints:
        return "default: this routing policy does not use the preferences given"
    return "default: no preferences"


def choose_model(prefs: ModelPreferences | None, catalog: Catalog, *, user_model: str | None = None,
                 policy: RoutingPolicy = STANDARD, flat: bool = False) -> tuple[str, str, list[str]]:
    """(model, reason, warnings) for one tool. `flat`: its server's priorities carry no signal."""
    if user_model is not None:
        catalog.require(user_model)
        if not (policy.user_model_ignored_if_default and user_model == catalog.default):
            return user_model, "user choice", []
    if prefs is None:
        return catalog.default, "default: no preferences", []
    weights, warnings = capped_weights(prefs, policy)
    scored = policy.use_scores and not (flat and policy.ignore_flat_priorities)
    if not scored or not any(weights.values()):
        weights = {}
    chosen = _by_hint(prefs, catalog, weights, policy) if policy.use_hints else None
    if chosen is not None:
        return chosen[0], chosen[1], warnings
    if weights:
        model, score = _best(catalog.models, weights)
        given = ", ".join(f"{name} {_fmt(weights[name])}" for name in DISPLAY_ORDER if name in weights)
        return model.name, f"weighted score {score:.2f} ({given})", warnings
    return catalog.default, _default_reason(prefs, policy, flat), warnings


def flat_priorities(preferences: Sequence[ModelPreferences | None]) -> str | None:
    """A warning when at least two tools set priorities and all set exactly the same ones."""
    triples = {tuple(p.priorities.items()) for p in preferences if p is not None and p.priorities}
    count = sum(1 for p in preferences if p is not None and p.priorities)
    if count < 2 or len(triples) != 1:
        return None
    given = ", ".join(f"{WIRE_NAMES[n]} {_fmt(v)}" for n, v in next(iter(triples)))
    return (f"priorities are the same on all {count} tools that set them ({given}): "
            "they carry no signal and are not weighed")


def route_tools(tools: Sequence[Mapping[str, Any]], catalog: Catalog, *, user_model: str | None = None,
                policy: RoutingPolicy = STANDARD) -> list[Route]:
    """One Route per tool, in the tools' order. Invalid preferences: the default, with warnings."""
    if user_model is not None:
        catalog.require(user_model)
    readings = [read_preferences(tool) for tool in tools]
    flat_warning = flat_priorities([r.preferences for r in readings])
    if not (policy.ignore_flat_priorities and policy.use_scores):
        flat_warning = None
    routes: list[Route] = []
    for i, (tool, reading) in enumerate(zip(tools, readings, strict=True)):
        name = tool.get("name")
        warnings = [*reading.notes, *([reading.message] if reading.problems else [])]
        flat = flat_warning is not None and reading.preferences is not None \
            and bool(reading.preferences.priorities)
        model, reason, extra = choose_model(reading.preferences, catalog, user_model=user_model,
                                            policy=policy, flat=flat)
        if reading.problems and reason == "default: no preferences":
            reason = f"default: invalid preferences in {reading.source}"
        if flat and flat_warning and reason != "user choice":
            warnings.append(flat_warning)
        routes.append(Route(name if isinstance(name, str) else f"#{i}", model, reason,
                            tuple(warnings + extra)))
    return routes
