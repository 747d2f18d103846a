"""What every server adapter shares: who is calling (from the MCP SDK's request context) and how a
denied call looks on the wire (SPEC §3 `isError` result, or a JSON-RPC error), with the step-up hint.

The guard decides; this module only reads SDK state and shapes results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from ..auth.header import credentials_from_authorization_header
from ..client import ARGUMENT_DEPENDENT_META_KEY, DENIAL_ERRORS_META_KEY, TRANSIENT_META_KEY
from ..outcomes import Decision, Status
from ..principal import ANONYMOUS, Credentials, Principal

# JSON-RPC error code of a denied call in `[guard] denial = "jsonrpc"` mode (implementation-defined
# server error range; clear of the codes the MCP specification assigns).
DENIAL_CODE = -32003
STEP_UP_META_KEY = "io.github.mcp-preconditions/step-up"
SCOPE_PREFIX = "auth:scope:"
# RFC 6749 §3.3 scope-token characters: anything else cannot be put in a WWW-Authenticate challenge.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]+")


def principal_from_access_token(token: AccessToken) -> Principal:
    """A principal from a token the MCP SDK (or fastmcp) already verified: its claims, plus the
    client id, subject, expiry and scopes the SDK reports."""
    claims: dict[str, Any] = dict(token.claims or {})
    claims.setdefault("client_id", token.client_id)
    if token.subject is not None:
        claims.setdefault("sub", token.subject)
    if token.expires_at is not None:
        claims.setdefault("exp", token.expires_at)
    return Principal.from_claims(claims, kind="sdk", scopes=frozenset(token.scopes))


def credentials_from_request(request: Any) -> Credentials:
    """The call's credentials: a token verified by the SDK's auth, else the raw `Authorization`
    header (a bearer token for the guard's own verifier, or a malformed header, which is denied),
    else anonymous. `request` is the HTTP request (None on stdio and in-process)."""
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    verified = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    if verified is not None:
        return Credentials(principal=principal_from_access_token(verified))
    headers = getattr(request, "headers", None)
    if not isinstance(headers, Mapping):
        return ANONYMOUS
    return credentials_from_authorization_header(headers.get("authorization"))


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


def denial_result(decision: Decision) -> CallToolResult:
    """SPEC §3: an `isError` result whose structuredContent is exactly the denial payload."""
    return CallToolResult(content=[TextContent(type="text", text=denial_text(decision))],
                          structured_content=decision.denial_payload(), is_error=True,
                          _meta=denial_meta(decision))


def denial_error(decision: Decision) -> MCPError:
    """The JSON-RPC error form of a denial: `data` is the same payload, plus the result's `_meta`
    (step-up hint, `error` requirements) under `data["_meta"]` when there is one."""
    data = decision.denial_payload()
    meta = denial_meta(decision)
    if meta:
        data["_meta"] = meta
    return MCPError(DENIAL_CODE, denial_text(decision), data)


def only_scopes_missing(decision: Decision) -> bool:
    """True when more scopes alone would turn this denial into an allow: every unmet requirement is
    a disclosed `auth:scope:` one that was unsatisfied (not `error`)."""
    unmet = [o for o in decision.outcomes if not o.ok]
    return bool(unmet) and all(
        o.status is Status.UNSATISFIED and o.requirement.startswith(SCOPE_PREFIX)
        and o.requirement not in decision.confidential for o in unmet)


def insufficient_scope_challenge(decision: Decision) -> str | None:
    """`WWW-Authenticate` value for a 403 step-up (MCP auth spec), or None unless missing scopes
    are the only reason for the denial."""
    scopes = missing_scopes(decision)
    if not only_scopes_missing(decision) or not all(_SCOPE_TOKEN.fullmatch(s) for s in scopes):
        return None
    return (f'Bearer error="insufficient_scope", scope="{" ".join(scopes)}", '
            f'error_description="tool \'{_quoted(decision.tool)}\' needs more scopes"')


def _quoted(text: str) -> str:
    """Text safe inside a quoted-string of an HTTP header (no quotes, backslashes or controls)."""
    return "".join(c for c in text if c.isascii() and c.isprintable() and c not in '"\\')
