"""How a denied call looks on the wire, as plain dicts (SPEC §3): the `isError` result, or the data of
the JSON-RPC error in `[guard] denial = "jsonrpc"` mode, with the step-up hint. No MCP SDK needed:
the gateway relays dicts, and the SDK adapters wrap the same dicts in the SDK's types.
"""

from __future__ import annotations

from typing import Any

from .client import ARGUMENT_DEPENDENT_META_KEY, DENIAL_ERRORS_META_KEY, TRANSIENT_META_KEY
from .outcomes import Decision, Status

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
    exactly SPEC §3."""
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


def denial_result(decision: Decision) -> dict[str, Any]:
    """SPEC §3: an `isError` result whose structuredContent is exactly the denial payload."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": denial_text(decision)}],
                              "structuredContent": decision.denial_payload(), "isError": True}
    meta = denial_meta(decision)
    if meta is not None:
        result["_meta"] = meta
    return result


def denial_error_data(decision: Decision) -> dict[str, Any]:
    """The `data` of a denial's JSON-RPC error: the same payload, plus the result's `_meta`
    (step-up hint, `error` requirements) under `data["_meta"]` when there is one."""
    data = decision.denial_payload()
    meta = denial_meta(decision)
    if meta:
        data["_meta"] = meta
    return data
