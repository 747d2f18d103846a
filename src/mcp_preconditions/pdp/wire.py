"""The OpenID AuthZEN Authorization API 1.0 on the wire: the Access Evaluation request (subject,
action, resource, context), the decision, the Access Evaluations batch with its defaults and its
three `evaluations_semantic` values, and the decision point's metadata document.

Pure values and strict readers, no I/O: the decision point (`mcp-preconditions pdp`) reads requests
and writes decisions with it, and an enforcement point writes requests and reads decisions with
the same module. A reader raises `Malformed` with one line naming the key path; unknown keys are
ignored, as AuthZEN 1.0 requires of a receiver ("MUST ignore unknown fields").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Malformed

EVALUATION_PATH = "/access/v1/evaluation"
EVALUATIONS_PATH = "/access/v1/evaluations"
METADATA_PATH = "/.well-known/authzen-configuration"
MAX_EVALUATIONS = 1024  # items of one batch: more is a malformed request, never a long wait

Json = dict[str, Any]


class Semantic(enum.StrEnum):
    """`options.evaluations_semantic`: answer every item, or stop after the first deny / permit."""

    EXECUTE_ALL = "execute_all"
    DENY_ON_FIRST_DENY = "deny_on_first_deny"
    PERMIT_ON_FIRST_PERMIT = "permit_on_first_permit"

    def stops_after(self, decision: bool) -> bool:
        """Whether a batch ends with an item decided `decision` (it is answered, the rest are not)."""
        return (self is Semantic.DENY_ON_FIRST_DENY and not decision) or (
            self is Semantic.PERMIT_ON_FIRST_PERMIT and decision)


@dataclass(frozen=True, slots=True)
class Entity:
    """A Subject or a Resource: `type` and `id` (non-empty strings), optional `properties`."""

    type: str
    id: str
    properties: Mapping[str, Any] | None = None

    def to_json(self) -> Json:
        out: Json = {"type": self.type, "id": self.id}
        if self.properties is not None:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True, slots=True)
class Action:
    """An Action: its `name` (a non-empty string), optional `properties`."""

    name: str
    properties: Mapping[str, Any] | None = None

    def to_json(self) -> Json:
        out: Json = {"name": self.name}
        if self.properties is not None:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One Access Evaluation request: may `subject` do `action` on `resource` in `context`?"""

    subject: Entity
    action: Action
    resource: Entity
    context: Mapping[str, Any] | None = None

    def to_json(self) -> Json:
        out: Json = {"subject": self.subject.to_json(), "action": self.action.to_json(),
                     "resource": self.resource.to_json()}
        if self.context is not None:
            out["context"] = dict(self.context)
        return out


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """A Decision: `decision` (true permits, false denies) and an optional `context` object."""

    decision: bool
    context: Mapping[str, Any] | None = None

    def to_json(self) -> Json:
        if self.context is None:
            return {"decision": self.decision}
        return {"decision": self.decision, "context": dict(self.context)}


@dataclass(frozen=True, slots=True)
class Evaluations:
    """An Access Evaluations request. `items`: each item with the top-level defaults filled in, or
    the `Malformed` that says why it is not an evaluation (decided false, the rest still answered).
    `single`: the request read as one evaluation when it has no `evaluations` (AuthZEN 1.0: then it
    behaves as the Access Evaluation request)."""

    items: tuple[Evaluation | Malformed, ...]
    semantic: Semantic = Semantic.EXECUTE_ALL
    single: Evaluation | Malformed | None = None


@dataclass(frozen=True, slots=True)
class Metadata:
    """The decision point's metadata (`/.well-known/authzen-configuration`)."""

    policy_decision_point: str
    access_evaluation_endpoint: str
    access_evaluations_endpoint: str | None = None

    @classmethod
    def at(cls, base: str, batches: bool = True) -> Metadata:
        """The metadata of a decision point whose identifier is `base` (no trailing slash)."""
        return cls(base, base + EVALUATION_PATH, base + EVALUATIONS_PATH if batches else None)

    def to_json(self) -> Json:
        out = {"policy_decision_point": self.policy_decision_point,
               "access_evaluation_endpoint": self.access_evaluation_endpoint}
        if self.access_evaluations_endpoint is not None:
            out["access_evaluations_endpoint"] = self.access_evaluations_endpoint
        return out


# -- readers ----------------------------------------------------------------------------------------
def _object(value: Any, where: str, optional: bool = False) -> Mapping[str, Any] | None:
    if value is None and optional:  # AuthZEN: a null property is as good as an absent one
        return None
    if not isinstance(value, dict):
        raise Malformed(f"{where}: must be an object, got {_kind(value)}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        got = "an empty string" if value == "" else _kind(value)
        raise Malformed(f"{where}: must be a non-empty string, got {got}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def entity_of(value: Any, where: str) -> Entity:
    """A Subject or Resource object; Malformed names what is missing or mistyped."""
    body = _object(value, where)
    assert body is not None
    return Entity(_name(body.get("type"), f"{where}.type"), _name(body.get("id"), f"{where}.id"),
                  _object(body.get("properties"), f"{where}.properties", optional=True))


def action_of(value: Any, where: str = "action") -> Action:
    body = _object(value, where)
    assert body is not None
    return Action(_name(body.get("name"), f"{where}.name"),
                  _object(body.get("properties"), f"{where}.properties", optional=True))


def evaluation_of(body: Any, defaults: Mapping[str, Any] | None = None, where: str = "") -> Evaluation:
    """An Access Evaluation request; `defaults` (a batch's top level) fills in what `body` lacks."""
    item = _object(body, where or "(request)")
    assert item is not None
    merged = {**(defaults or {}), **{k: v for k, v in item.items() if v is not None}}
    at = f"{where}." if where else ""
    for key in ("subject", "action", "resource"):
        if key not in merged:
            raise Malformed(f"{at}{key}: required")
    return Evaluation(entity_of(merged["subject"], f"{at}subject"), action_of(merged["action"],
                      f"{at}action"), entity_of(merged["resource"], f"{at}resource"),
                      _object(merged.get("context"), f"{at}context", optional=True))


def evaluations_of(body: Any) -> Evaluations:
    """An Access Evaluations request. A malformed envelope (the body, `evaluations`, `options`, a
    top-level default) raises Malformed; a malformed item is that item's Malformed."""
    request = _object(body, "(request)")
    assert request is not None
    options = _object(request.get("options"), "options", optional=True) or {}
    semantic = options.get("evaluations_semantic")
    if semantic is not None and semantic not in Semantic.__members__.values():
        shown = repr(semantic) if isinstance(semantic, str) and len(semantic) <= 40 else _kind(semantic)
        raise Malformed(f"options.evaluations_semantic: must be one of execute_all, "
                        f"deny_on_first_deny, permit_on_first_permit, got {shown}")
    defaults = {key: request[key] for key in ("subject", "action", "resource", "context")
                if request.get(key) is not None}
    for key in ("subject", "resource"):  # a default is part of the envelope: checked once, here
        if key in defaults:
            entity_of(defaults[key], key)
    if "action" in defaults:
        action_of(defaults["action"])
    _object(defaults.get("context"), "context", optional=True)
    items = request.get("evaluations")
    if items is not None and not isinstance(items, list):
        raise Malformed(f"evaluations: must be an array, got {_kind(items)}")
    chosen = Semantic(semantic) if semantic is not None else Semantic.EXECUTE_ALL
    if not items:
        return Evaluations((), chosen, _item(request, None, ""))
    if len(items) > MAX_EVALUATIONS:
        raise Malformed(f"evaluations: at most {MAX_EVALUATIONS} items, got {len(items)}")
    return Evaluations(tuple(_item(item, defaults, f"evaluations[{i}]")
                             for i, item in enumerate(items)), chosen)


def _item(body: Any, defaults: Mapping[str, Any] | None, where: str) -> Evaluation | Malformed:
    try:
        return evaluation_of(body, defaults, where)
    except Malformed as problem:
        return problem


# -- an enforcement point's side: answers read strictly ----------------------------------------------
def decision_of(body: Any, where: str = "(answer)") -> AccessDecision:
    """A Decision object from a decision point; no boolean `decision` is Malformed (fail closed)."""
    answer = _object(body, where)
    assert answer is not None
    decision = answer.get("decision")
    if not isinstance(decision, bool):
        raise Malformed(f"{where}.decision: must be a boolean, got {_kind(decision)}")
    return AccessDecision(decision, _object(answer.get("context"), f"{where}.context", optional=True))


def decisions_of(body: Any, asked: int,
                 semantic: Semantic = Semantic.EXECUTE_ALL) -> tuple[AccessDecision, ...]:
    """An Access Evaluations answer to `asked` items, in order: one decision each under
    `execute_all`; under a short-circuiting semantic, up to the one that stopped it."""
    answer = _object(body, "(answer)")
    assert answer is not None
    found = answer.get("evaluations")
    least = asked if semantic is Semantic.EXECUTE_ALL else 1
    if not isinstance(found, list) or not least <= len(found) <= asked:
        wanted = f"{asked}" if least == asked else f"1 to {asked}"
        raise Malformed(f"evaluations: must be an array of {wanted} decision(s), got "
                        f"{_kind(found) if not isinstance(found, list) else len(found)}")
    decisions = tuple(decision_of(item, f"evaluations[{i}]") for i, item in enumerate(found))
    if any(semantic.stops_after(d.decision) for d in decisions[:-1]):
        raise Malformed(f"evaluations: answered past the first stop of {semantic.value}")
    return decisions


def metadata_of(body: Any) -> Metadata:
    """The metadata document; `access_evaluations_endpoint` absent means no batches."""
    answer = _object(body, "(metadata)")
    assert answer is not None
    batches = answer.get("access_evaluations_endpoint")
    if batches is not None:
        batches = _name(batches, "access_evaluations_endpoint")
    return Metadata(_name(answer.get("policy_decision_point"), "policy_decision_point"),
                    _name(answer.get("access_evaluation_endpoint"), "access_evaluation_endpoint"),
                    batches)


def batch_json(evaluations: Sequence[Evaluation], semantic: Semantic = Semantic.EXECUTE_ALL,
               defaults: Evaluation | None = None) -> Json:
    """An Access Evaluations request for `evaluations`: each item's subject, action, resource and
    context are left out where they equal the `defaults` (sent once, at the top level)."""
    out: Json = defaults.to_json() if defaults is not None else {}
    if semantic is not Semantic.EXECUTE_ALL:
        out["options"] = {"evaluations_semantic": semantic.value}
    out["evaluations"] = [{k: v for k, v in item.to_json().items() if out.get(k) != v}
                          for item in evaluations]
    return out
