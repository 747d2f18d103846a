"""What every server adapter shares: who is calling and what its client declared (from the MCP SDK's
request context), and how a denied call looks on the wire (SPEC §3 `isError` result, or a JSON-RPC
error, each with its SEP-2643 envelope), in the SDK's types.

The guard decides; this module only reads SDK state and shapes results (denials.py builds them).
"""

from __future__ import annotations

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
    STEP_UP_META_KEY,
    denial_error_data,
    denial_meta,
    denial_text,
    disclosed_errors,
    insufficient_scope_challenge,
    missing_scopes,
    only_scopes_missing,
)
from ..denials import denial_result as denial_wire
from ..outcomes import Decision
from ..principal import ANONYMOUS, Credentials, Principal
from ..remedies import NOBODY, SCOPE_PREFIX, Recipient
from ._sessions import SessionOwner


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


def url_elicitation_of(session: Any) -> bool:
    """Whether the client of an SDK session (`ctx.session`) declared URL-mode elicitation
    (`capabilities.elicitation.url`): at 2025-11-25 in its `initialize`, at 2026-07-28 in the
    request's own `_meta` (the SDK keeps both as the session's `client_capabilities`)."""
    capabilities = getattr(session, "client_capabilities", None)
    elicitation = getattr(capabilities, "elicitation", None)
    return getattr(elicitation, "url", None) is not None


def denial_result(decision: Decision, typed: bool = False,
                  recipient: Recipient = NOBODY) -> CallToolResult:
    """`denials.denial_result` as the SDK's type: the denial every server gives (its payload
    under `_meta` for a `typed` tool, one that declares an `outputSchema`)."""
    return CallToolResult.model_validate(denial_wire(decision, typed=typed, recipient=recipient))


def denial_error(decision: Decision, recipient: Recipient = NOBODY) -> MCPError | None:
    """The JSON-RPC error form of a denial (see `denials.denial_error_data`); None for a refusal
    that is never one (a policy unusable for the server)."""
    data = denial_error_data(decision, recipient)
    return MCPError(DENIAL_CODE, denial_text(decision, recipient), data) if data is not None else None


__all__ = ["DENIAL_CODE", "SCOPE_PREFIX", "STEP_UP_META_KEY", "credentials_from_request", "denial_error",
           "denial_meta", "denial_result", "denial_text", "disclosed_errors", "insufficient_scope_challenge",
           "missing_scopes", "only_scopes_missing", "principal_from_access_token", "url_elicitation_of"]
