"""Policy analysis for `lint --policy`: rules that can never match, decided from the same static
facts the guard compiles (environment labels, static flags and state, grants), never restated.

Every finding is a warning naming the file, the tool or grant, and the reason: a tool no caller can
ever be allowed, a grant whose `when` can never hold, and an argument condition whose pointer or
values (or, for `argument_claims`, any claim's type) the tool's `inputSchema` rules out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .arguments import ArgumentCondition, ClaimCondition
from .outcomes import Outcome, Status
from .requirements import Finding, body_of, namespace_of
from .snapshot import Snapshot

_JSON_TYPES = {"string": (str,), "integer": (int,), "boolean": (bool,), "number": (int,),
               "null": (), "array": (), "object": ()}


def never_match_findings(snapshot: Snapshot, tools: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Warnings about what can never be allowed under this snapshot, for these tool definitions."""
    source = snapshot.source.source
    found: list[Finding] = []
    for i, grant in enumerate(snapshot.source.policy.capabilities.grants):
        why = _never_holds(snapshot, grant.when)
        if why is not None:
            found.append(Finding("warning", f"(policy capabilities.grants[{i}])",
                                 f"this grant can never apply: {why}", None, source))
    for tool in tools:
        name = str(tool.get("name"))
        compiled = snapshot.tools.get(name)
        if compiled is None:
            continue
        why = _never_holds(snapshot, compiled.requirements)
        if why is not None:
            found.append(Finding("warning", name, f"no caller can ever be allowed: {why}", None,
                                 source))
        found += _schema_findings(snapshot, name, compiled.requirements, tool.get("inputSchema"))
    return found


def _never_holds(snapshot: Snapshot, requirements: Sequence[str]) -> str | None:
    """Why one of `requirements` is unsatisfied whoever calls, or None."""
    for requirement in requirements:
        why = _never(snapshot, requirement)
        if why is not None:
            return why
    return None


def _never(snapshot: Snapshot, requirement: str) -> str | None:
    static = _static(snapshot, requirement)
    if static is not None and static.status is not Status.SATISFIED:
        return f"{requirement} ({static.reason})"
    if namespace_of(requirement) != "capability" or snapshot.source.policy.capabilities.claim:
        return None
    name = body_of(requirement)
    grants = [g for g in snapshot.source.policy.capabilities.grants if name in g.capabilities]
    reasons = [_never_holds(snapshot, g.when) for g in grants]
    if grants and all(reasons):
        return f"{requirement} (every grant of it needs something that never holds: {reasons[0]})"
    return None


def _static(snapshot: Snapshot, requirement: str) -> Outcome | None:
    """The snapshot's own pre-decided outcome of a requirement (None when decided per call)."""
    check = snapshot.check_of(requirement)
    return check.static if check is not None else None


def _schema_findings(snapshot: Snapshot, tool: str, requirements: Sequence[str],
                     schema: Any) -> list[Finding]:
    """Argument conditions of the grants this tool depends on that its inputSchema rules out."""
    if not isinstance(schema, Mapping):
        return []
    capabilities = {body_of(r) for r in requirements if namespace_of(r) == "capability"}
    found: list[Finding] = []
    for i, grant in enumerate(snapshot.source.policy.capabilities.grants):
        if not capabilities & set(grant.capabilities):
            continue
        checks = [("arguments", pointer, _ruled_out(schema, ArgumentCondition.of(pointer, values)))
                  for pointer, values in grant.arguments.items()]
        checks += [("argument_claims", pointer, _claim_ruled_out(schema, ClaimCondition.of(
            pointer, claim))) for pointer, claim in grant.argument_claims.items()]
        found += [Finding("warning", tool, f"capabilities.grants[{i}].{key} {pointer!r} can never "
                          f"match: {why}", None, snapshot.source.source)
                  for key, pointer, why in checks if why is not None]
    return found


def _schema_node(schema: Mapping[str, Any], tokens: Sequence[str]) -> tuple[Any, str | None]:
    """The inputSchema node a pointer's tokens lead to, or (None, why none does)."""
    node: Any = schema
    for depth, token in enumerate(tokens):
        place = "/" + "/".join(tokens[:depth + 1])
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if isinstance(properties, Mapping) and token in properties:
            node = properties[token]
        elif isinstance(node, Mapping) and isinstance(node.get("items"), Mapping) and token.isdigit():
            node = node["items"]
        else:
            return None, f"{place} names no property of the tool's inputSchema"
    return node, None


def _ruled_out(schema: Mapping[str, Any], condition: ArgumentCondition) -> str | None:
    node, why = _schema_node(schema, condition.tokens)
    allowed = _types(node) if why is None else None
    if allowed is not None and not any(_fits(value, allowed) for value in condition.values):
        names = ", ".join(sorted(allowed))
        return f"the inputSchema says {condition.pointer} is {names}, and no listed value is"
    return why


def _claim_ruled_out(schema: Mapping[str, Any], condition: ClaimCondition) -> str | None:
    """A claim compares as a string, an integer or a boolean: an argument the schema gives none of
    those types never equals one."""
    node, why = _schema_node(schema, condition.tokens)
    allowed = _types(node) if why is None else None
    if allowed is not None and not allowed & {"string", "integer", "number", "boolean"}:
        names = ", ".join(sorted(allowed))
        return (f"the inputSchema says {condition.pointer} is {names}, and the claim "
                f"'{condition.claim}' is compared as a string, an integer or a boolean")
    return why


def _types(node: Any) -> set[str] | None:
    kind = node.get("type") if isinstance(node, Mapping) else None
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and all(isinstance(k, str) for k in kind):
        return set(kind)
    return None


def _fits(value: Any, allowed: set[str]) -> bool:
    for name in allowed:
        types = _JSON_TYPES.get(name, ())
        if isinstance(value, bool) and name != "boolean":
            continue  # JSON has no boolean that is also a number
        if isinstance(value, types):
            return True
    return False
