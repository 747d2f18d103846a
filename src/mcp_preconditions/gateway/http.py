"""The gateway's HTTP listener: the MCP SDK's streamable-HTTP app at `/mcp`, `/healthz` and `/readyz`,
and, when the policy's `[auth]` verifies tokens, a 401 with `WWW-Authenticate` for a request without
a valid bearer token, plus RFC 9728 protected-resource metadata.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.build import verification_configured
from ..auth.header import credentials_from_authorization_header
from .server import Gateway

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
READY_PING_SECONDS = 2.0


def build_app(gateway: Gateway, host: str, base_url: str) -> ASGIApp:
    """The ASGI app; `base_url` (`http://HOST:PORT`) names the resource in the auth metadata."""
    routes = [Route("/healthz", _healthz, methods=["GET"]),
              Route("/readyz", _readyz(gateway), methods=["GET"])]
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
        connected = await gateway.upstream.reachable(READY_PING_SECONDS)
        problem = gateway.tools.problem
        body: dict[str, Any] = {"policy": gateway.guard.revision, "upstream": gateway.upstream.label,
                                "upstream_connected": connected, "tools_loaded": gateway.tools.loaded}
        backends = await _backends(gateway)
        if backends:
            body["backends"] = backends
        if problem is not None:
            body["problem"] = problem
        # A shared backend that is down is every replica's problem at once: taking them all out of
        # rotation would turn an outage of `state:` calls into an outage of every call. So it
        # degrades readiness (reported here, and each call needing it is denied with `error`);
        # only this replica's own faults make it not ready.
        ready = connected and gateway.tools.loaded and problem is None
        status = "not ready" if not ready else "ready" if all(backends.values()) else "degraded"
        return JSONResponse({"status": status, **body}, status_code=200 if ready else 503)
    return readyz


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


class BearerGate:
    """Answers a `/mcp` request whose bearer token is missing or not accepted by the policy's
    verifier with 401 (MCP authorization spec), naming the metadata document. The token is only
    read here and by the guard; nothing passes it on."""

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
        problem = await self._problem(header)
        if problem is None:
            await self.app(scope, receive, send)
            return
        challenge = f'Bearer resource_metadata="{self.metadata_url}"'
        if header is not None:
            challenge += ', error="invalid_token", error_description="the access token was not accepted"'
        response = Response(json.dumps({"error": "invalid_token" if header else "unauthorized",
                                        "error_description": problem}),
                            status_code=401, media_type="application/json",
                            headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)

    async def _problem(self, header: str | None) -> str | None:
        if header is None:
            return "this server needs a bearer token"
        identity = await self.gateway.guard.authenticate(credentials_from_authorization_header(header))
        return None if identity.principal is not None else "the access token was not accepted"
