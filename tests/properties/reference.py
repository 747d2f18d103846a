"""A tiny, obviously-correct reference evaluator of SPEC §4: the executable specification the compiled
guard is checked against. It imports nothing from the library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class World:
    """A policy as plain data, the caller's verified claims (None: anonymous) and which requirements
    of custom namespaces hold."""

    labels: set[str] = field(default_factory=set)
    flags: dict[str, Any] = field(default_factory=dict)
    state: dict[str, bool] = field(default_factory=dict)
    # (capabilities, when), (capabilities, when, {JSON Pointer: allowed values}) or
    # (capabilities, when, {JSON Pointer: allowed values}, {JSON Pointer: claim name})
    grants: list[tuple[Any, ...]] = field(default_factory=list)
    capability_claim: str | None = None
    aliases: dict[str, list[str]] = field(default_factory=dict)  # alias -> path of keys
    implications: dict[str, list[str]] = field(default_factory=dict)
    claims: dict[str, Any] | None = None
    custom: set[str] = field(default_factory=set)
    arguments: dict[str, Any] = field(default_factory=dict)  # the call's arguments


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def text(value: Any) -> str | None:
    """Strings as they are, booleans and integers as JSON text; nothing else ever compares equal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else None


def claim(claims: Mapping[str, Any], name: str, aliases: dict[str, list[str]]) -> Any:
    node: Any = claims
    for key in aliases.get(name, [name]):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node  # None when missing, and None never matches


def scopes(claims: Mapping[str, Any], implications: dict[str, list[str]]) -> set[str]:
    scope, scp = claims.get("scope"), claims.get("scp")
    held = set(scope.split(" ")) if isinstance(scope, str) else set()
    held |= {s for s in scp if isinstance(s, str)} if isinstance(scp, list) else set()
    todo = list(held)
    while todo:
        new = [s for s in implications.get(todo.pop(), []) if s not in held]
        held.update(new)
        todo.extend(new)
    return held - {""}


_MISSING = object()


def pointed(document: Any, pointer: str) -> Any:
    """RFC 6901, read literally: '/'-separated tokens, `~1` is '/', `~0` is '~', array indexes in
    plain decimal."""
    node = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif (isinstance(node, list) and token.isascii() and token.isdigit()
              and str(int(token)) == token and int(token) < len(node)):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def arguments_hold(conditions: dict[str, list[Any]], arguments: dict[str, Any]) -> bool:
    """Each pointer's value is one of its listed values: same JSON type, same value."""
    return all(any(type(pointed(arguments, p)) is type(v) and pointed(arguments, p) == v
                   for v in values) for p, values in conditions.items())


def claims_hold(conditions: dict[str, str], w: World) -> bool:
    """Each pointer's value is the caller's claim it names: both a string, an integer or a boolean,
    of the same type and value. An anonymous caller has no claims."""
    for pointer, name in conditions.items():
        held = claim(w.claims, name, w.aliases) if w.claims is not None else None
        value = pointed(w.arguments, pointer)
        if type(held) not in (str, int, bool) or type(value) is not type(held) or value != held:
            return False
    return True


def grant_applies(grant: tuple[Any, ...], body: str, w: World) -> bool:
    caps, when = grant[0], grant[1]
    conditions = grant[2] if len(grant) > 2 else {}
    claimed = grant[3] if len(grant) > 3 else {}
    return (body in caps and all(holds(c, w) for c in when)
            and arguments_hold(conditions, w.arguments) and claims_hold(claimed, w))


def holds(requirement: str, w: World) -> bool:
    namespace, _, body = requirement.partition(":")
    if namespace == "env":
        return body in w.labels
    if namespace in ("feature", "state"):
        return (w.flags if namespace == "feature" else w.state).get(body) is True
    if namespace == "capability":
        if w.claims is not None and w.capability_claim is not None and body in [
                v for v in listed(w.claims.get(w.capability_claim)) if isinstance(v, str)]:
            return True
        return any(grant_applies(g, body, w) for g in w.grants)
    if namespace != "auth":
        return requirement in w.custom
    if w.claims is None:
        return False
    if body == "oauth2":
        return True
    if body.startswith("scope:"):
        return body[len("scope:"):] in scopes(w.claims, w.implications)
    name, _, expected = body[len("claim:"):].partition(":")
    return any(text(v) == expected for v in listed(claim(w.claims, name, w.aliases)))


def decide(requirements: list[str], w: World) -> tuple[bool, tuple[str, ...]]:
    """(allowed, the unmet requirements in first-seen order, each once)."""
    unmet = tuple(r for r in dict.fromkeys(requirements) if not holds(r, w))
    return not unmet, unmet
