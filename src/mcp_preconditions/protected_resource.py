"""The transport's answer to a caller who must sign in (MCP authorization: RFC 6750's challenge,
RFC 9728's protected-resource metadata): the metadata a policy's `[auth]` describes, and the 401
`WWW-Authenticate` challenge that names it. The gateway's HTTP app and `serve --transport http`
(integrations/step_up.py, `SignInChallenge`) answer with the same bytes. No MCP SDK here.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from .auth.build import verification_configured
from .policy.model import Policy

METADATA_PATH = "/.well-known/oauth-protected-resource"
_SCOPE = "auth:scope:"


def resource_metadata(policy: Policy, resource: str) -> dict[str, Any] | None:
    """The RFC 9728 metadata of `resource` (the MCP endpoint's URL) under `policy`; None when the
    policy verifies no tokens (no token could be accepted: there is nothing to sign in with)."""
    auth = policy.auth
    if not verification_configured(auth):
        return None
    out: dict[str, Any] = {"resource": resource, "bearer_methods_supported": ["header"]}
    if auth.issuer:
        out["authorization_servers"] = [auth.issuer]
    scopes = sorted({r.removeprefix(_SCOPE) for t in policy.tools.values()
                     for r in t.requirements if r.startswith(_SCOPE)})
    if scopes:
        out["scopes_supported"] = scopes
    return out


def metadata_url(resource_url: str, path: str) -> str:
    """Where the metadata of the endpoint at `path` is served: `BASE/.well-known/oauth-protected-
    resource/PATH` (RFC 9728 §3.1), `resource_url` being the endpoint's URL."""
    return resource_url.removesuffix(path) + METADATA_PATH + path


class Challenge(NamedTuple):
    """A 401: its `WWW-Authenticate` value and its JSON body."""

    header: str
    body: bytes


def sign_in_challenge(metadata_at: str, refused: bool) -> Challenge:
    """The 401 for a request without a bearer token (`refused` False) or with one that was not
    accepted (True), naming the metadata document (`metadata_at`)."""
    header = f'Bearer resource_metadata="{metadata_at}"'
    if refused:
        header += ', error="invalid_token", error_description="the access token was not accepted"'
    problem = "the access token was not accepted" if refused else "this server needs a bearer token"
    body = json.dumps({"error": "invalid_token" if refused else "unauthorized",
                       "error_description": problem}).encode()
    return Challenge(header, body)
