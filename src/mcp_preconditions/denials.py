"""How a refused call looks on the wire, hosted and gateway alike (SPEC §3, §10): the `isError`
result (its payload under `_meta` for a tool with an `outputSchema`), or the data of the JSON-RPC
error in `[guard] denial = "jsonrpc"` mode, with the step-up hint. Plain dicts, no MCP SDK: the
gateway relays them, and the SDK adapters wrap the same dicts in the SDK's types.
"""

from __future__ import annotations

from typing import Any

from .client import (
    ARGUMENT_DEPENDENT_META_KEY,
    DENIAL_ERRORS_META_KEY,
    DENIAL_META_KEY,
    TRANSIENT_META_KEY,
)
from .outcomes import Decision, Refused, Status

# JSON-RPC error code of a denied call in `[guard] denial = "jsonrpc"` mode (implementation-defined
# server error range; clear of the codes the MCP specification assigns).
DENIAL_CODE = -32003
STEP_UP_META_KEY = "io.github.mcp-preconditions/step-up"
SCOPE_PREFIX = "auth:scope:"


def missing_scopes(decision: Decision) -> tuple[str, ...]:
    """The scopes a step-up would add: disclosed `auth:scope:` requirements that were unsatisfied
    (not `error`: a backend failure is not fixed by asking for more scopes)."""
    out: list[str] = []
    for outcome in decision.outcomes:
        req = outcome.requirement
        if (outcome.status is Status.UNSATISFIED and req.startswith(SCOPE_PREFIX)
                and req not in decision.confidential and req[len(SCOPE_PREFIX):] not in out):
            out.append(req[len(SCOPE_PREFIX):])
    return tuple(out)


def denial_text(decision: Decision) -> str:
    """The denial's text, plus every missing scope on one line so a client can ask for all at once."""
    text = decision.denial_text()
    scopes = missing_scopes(decision)
    return f"{text} Missing scopes: {' '.join(scopes)}." if scopes else text


def disclosed_errors(decision: Decision) -> tuple[str, ...]:
    """The unmet requirements that ended as `error` (backend down, timeout), confidential ones
    left out: a client must not learn these as unsatisfiable (SPEC §6)."""
    return tuple(r for r in decision.errors if r not in decision.confidential)


def denial_meta(decision: Decision) -> dict[str, Any] | None:
    """The denial's `_meta`: the step-up hint, the requirements that ended as `error`, those whose
    outcome depended on the call's arguments and those that hold only for now (quotas), each only
    when there are some: a client learns none of them. Kept out of structuredContent, which stays
    exactly SPEC §3. Both forms of every denial carry it: the one place for a key all carry."""
    meta: dict[str, Any] = {}
    scopes = missing_scopes(decision)
    if scopes:
        meta[STEP_UP_META_KEY] = {"error": "insufficient_scope", "scope": " ".join(scopes)}
    errors = disclosed_errors(decision)
    if errors:
        meta[DENIAL_ERRORS_META_KEY] = list(errors)
    dependent = [r for r in decision.disclosed_unmet if r in decision.argument_dependent]
    if dependent:
        meta[ARGUMENT_DEPENDENT_META_KEY] = dependent
    transient = decision.transient
    passing = [r for r in decision.disclosed_unmet if r in transient] if transient else []
    if passing:
        meta[TRANSIENT_META_KEY] = passing
    return meta or None


def denial_result(decision: Decision, *, typed: bool = False) -> dict[str, Any]:
    """The `isError` result of a refused call: its text, the denial payload as structuredContent,
    and `denial_meta`. For a tool that declares an `outputSchema` (`typed`) the payload goes under
    `_meta[DENIAL_META_KEY]` instead: strict clients (the MCP Inspector, most desktop apps)
    validate structuredContent against the schema even on an error, and would show a schema error
    instead of the denial. A policy unusable for the server's tools is the service's fault, not
    the caller's: its text alone."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": denial_text(decision)}],
                              "isError": True}
    refusal = decision.refusal
    if refusal is not None and refusal.kind is Refused.UNUSABLE:
        return result
    payload = decision.denial_payload()
    meta = denial_meta(decision)
    if typed:
        meta = {**(meta or {}), DENIAL_META_KEY: payload}
    else:
        result["structuredContent"] = payload
    if meta is not None:
        result["_meta"] = meta
    return result


def denial_error_data(decision: Decision) -> dict[str, Any] | None:
    """The `data` of a denial's JSON-RPC error (`[guard] denial = "jsonrpc"`): the same payload,
    plus the result's `_meta` under `data["_meta"]` when there is one. None for a refusal that is
    never a JSON-RPC error: a policy unusable for the server is a tool error, like a server fault."""
    refusal = decision.refusal
    if refusal is not None and refusal.kind is Refused.UNUSABLE:
        return None
    data = decision.denial_payload()
    meta = denial_meta(decision)
    if meta:
        data["_meta"] = meta
    return data
