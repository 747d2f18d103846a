"""The gateway's HTTP app: the MCP SDK's streamable-HTTP app at `/mcp`, `/healthz`, `/readyz`,
`/metrics` (unless served on a listener of their own), and, when the policy's `[auth]` verifies
tokens, a 401 with `WWW-Authenticate` for a request without a valid bearer token, plus RFC 9728
protected-resource metadata. A verified caller is put where the SDK's session manager looks
(`scope["user"]`), so each session belongs to the principal that opened it: anyone else gets 404
for it, as for an unknown session (SPEC §10).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.build import verification_configured
from ..auth.header import credentials_from_authorization_header
from ..principal import Principal
from ..telemetry.exposition import metrics_route
from ..telemetry.metrics import Metrics
from .gateway import Gateway

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
READY_PING_SECONDS = 2.0


def build_app(gateway: Gateway, host: str, base_url: str, metrics: Metrics | None = None) -> ASGIApp:
    """The ASGI app; `base_url` (`http://HOST:PORT`) names the resource in the auth metadata.
    `metrics` are served at `/metrics`, outside the bearer gate like the health checks (no token,
    label, or confidential requirement is in them; docs/operations.md says why)."""
    routes = [Route("/healthz", _healthz, methods=["GET"]),
              Route("/readyz", _readyz(gateway), methods=["GET"])]
    if metrics is not None:
        routes.append(metrics_route(metrics))
    metadata = _metadata(gateway, base_url)
    if metadata is not None:
        endpoint = _metadata_endpoint(metadata)
        routes += [Route(METADATA_PATH, endpoint, methods=["GET"]),
                   Route(METADATA_PATH + MCP_PATH, endpoint, methods=["GET"])]
    app: ASGIApp = gateway.server.streamable_http_app(host=host, custom_starlette_routes=routes)
    if metadata is not None:
        app = BearerGate(app, gateway, f"{base_url}{METADATA_PATH}{MCP_PATH}")
    return app


async def _healthz(_request: Request) -> Response:
    return JSONResponse({"status": "up"})


def _readyz(gateway: Gateway) -> Any:
    async def readyz(_request: Request) -> Response:
        body = await readiness(gateway)
        return JSONResponse(body, status_code=200 if body["status"] != "not ready" else 503)
    return readyz


async def readiness(gateway: Gateway) -> dict[str, Any]:
    """Ready while the policy is loaded and at least one server is connected, listed and usable
    (every replica has the same servers: one server down must not take them all out of rotation).
    The servers that are down, and why calls to some are refused, are named by key; never a
    command line, a policy path or a policy entry (those are in the log)."""
    servers: dict[str, Any] = {}
    for member, up in zip(gateway.fleet, await asyncio.gather(
            *(m.upstream.reachable(READY_PING_SECONDS) for m in gateway.fleet)), strict=True):
        entry: dict[str, Any] = {"connected": up,
                                 "tools_loaded": member.catalog.listings["tools"].loaded}
        if member.problem is not None:
            entry["problem"] = ("the policy names a near miss of one of this server's tools: every "
                                "call to it is refused (details in the gateway's log)")
        servers[member.key] = entry
    routes = gateway.fleet.routes
    body: dict[str, Any] = {"policy": gateway.guard.revision, "servers": servers,
                            "down": [k for k, e in servers.items() if not e["connected"]]}
    if routes.collisions:
        body["collisions"] = {name: list(keys) for name, keys in routes.collisions.items()}
    if routes.duplicates:
        body["listed_twice"] = dict(routes.duplicates)
    backends = await _backends(gateway)
    if backends:
        body["backends"] = backends
    ready = any(e["connected"] and e["tools_loaded"] and "problem" not in e
                for e in servers.values())
    # A shared backend that is down is every replica's problem at once: taking them all out of
    # rotation would turn an outage of `state:` calls into an outage of every call. So it degrades
    # readiness (reported here, and each call needing it is denied with `error`).
    degraded = not all(backends.values()) or bool(body["down"]) or any(
        "problem" in e for e in servers.values()) or bool(routes.collisions)
    status = "not ready" if not ready else "degraded" if degraded else "ready"
    return {"status": status, **body}


async def _backends(gateway: Gateway) -> dict[str, bool]:
    """The live backends the policy configures (Redis state), each reachable or not."""
    state = gateway.guard.snapshot.registry.get("state")
    ping = getattr(getattr(state, "source", None), "ping", None)
    if ping is None:
        return {}
    try:
        async with asyncio.timeout(READY_PING_SECONDS):
            await ping()
    except Exception:  # down, slow, or refusing: not ready (the reason is in the guard's records)
        return {"redis": False}
    return {"redis": True}


def _metadata(gateway: Gateway, base_url: str) -> dict[str, Any] | None:
    auth = gateway.policy().auth
    if not verification_configured(auth):
        return None
    out: dict[str, Any] = {"resource": f"{base_url}{MCP_PATH}", "bearer_methods_supported": ["header"]}
    if auth.issuer:
        out["authorization_servers"] = [auth.issuer]
    scopes = sorted({r.removeprefix("auth:scope:") for t in gateway.policy().tools.values()
                     for r in t.requirements if r.startswith("auth:scope:")})
    if scopes:
        out["scopes_supported"] = scopes
    return out


def _metadata_endpoint(metadata: dict[str, Any]) -> Any:
    async def endpoint(_request: Request) -> Response:
        return JSONResponse(metadata, headers={"Cache-Control": "public, max-age=3600"})
    return endpoint


def session_user(principal: Principal) -> AuthenticatedUser:
    """The SDK's user for a verified principal: what its session manager compares to bind a
    session to its owner (client id, issuer, subject). It carries no token."""
    claims = principal.claims
    client = claims.get("client_id", claims.get("azp"))
    issuer = claims.get("iss")
    return AuthenticatedUser(AccessToken(
        token="", client_id=str(client) if client is not None else "", scopes=sorted(principal.scopes),
        subject=principal.subject, claims={"iss": str(issuer)} if issuer is not None else None))


class BearerGate:
    """Answers a `/mcp` request whose bearer token is missing or not accepted by the policy's
    verifier with 401 (MCP authorization spec), naming the metadata document; an accepted one
    goes on with its principal as the request's user. The token is only read here and by the
    guard; nothing passes it on."""

    def __init__(self, app: ASGIApp, gateway: Gateway, metadata_url: str) -> None:
        self.app = app
        self.gateway = gateway
        self.metadata_url = metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != MCP_PATH or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        principal = None
        if header is not None:
            identity = await self.gateway.guard.authenticate(
                credentials_from_authorization_header(header))
            principal = identity.principal
        if principal is not None:
            await self.app({**scope, "user": session_user(principal)}, receive, send)
            return
        challenge = f'Bearer resource_metadata="{self.metadata_url}"'
        if header is not None:
            challenge += ', error="invalid_token", error_description="the access token was not accepted"'
        problem = ("this server needs a bearer token" if header is None
                   else "the access token was not accepted")
        response = Response(json.dumps({"error": "invalid_token" if header else "unauthorized",
                                        "error_description": problem}),
                            status_code=401, media_type="application/json",
                            headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)
