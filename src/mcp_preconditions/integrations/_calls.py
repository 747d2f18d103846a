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
from mcp_types import CallToolResult

from ..auth.header import credentials_from_authorization_header
from ..denials import (
    DENIAL_CODE,
    SCOPE_PREFIX,
    STEP_UP_META_KEY,
    denial_error_data,
    denial_meta,
    denial_text,
    disclosed_errors,
    missing_scopes,
)
from ..denials import denial_result as denial_wire
from ..outcomes import Decision, Status
from ..principal import ANONYMOUS, Credentials, Principal
from ._sessions import SessionOwner

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
    if isinstance(user, SessionOwner):  # the guard verified its token: decided by that token again
        return user.credentials
    verified = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    if verified is not None:
        return Credentials(principal=principal_from_access_token(verified))
    headers = getattr(request, "headers", None)
    if not isinstance(headers, Mapping):
        return ANONYMOUS
    return credentials_from_authorization_header(headers.get("authorization"))


def denial_result(decision: Decision, typed: bool = False) -> CallToolResult:
    """`denials.denial_result` as the SDK's type: the denial every server gives (its payload
    under `_meta` for a `typed` tool, one that declares an `outputSchema`)."""
    return CallToolResult.model_validate(denial_wire(decision, typed=typed))


def denial_error(decision: Decision) -> MCPError | None:
    """The JSON-RPC error form of a denial (see `denials.denial_error_data`); None for a refusal
    that is never one (a policy unusable for the server)."""
    data = denial_error_data(decision)
    return MCPError(DENIAL_CODE, denial_text(decision), data) if data is not None else None


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


__all__ = ["DENIAL_CODE", "SCOPE_PREFIX", "STEP_UP_META_KEY", "credentials_from_request", "denial_error",
           "denial_meta", "denial_result", "denial_text", "disclosed_errors", "insufficient_scope_challenge",
           "missing_scopes", "only_scopes_missing", "principal_from_access_token"]
