"""The gateway's HTTP app, a bare ASGI app: streamable HTTP at `/mcp`, `/healthz`, `/readyz`,
`/metrics` (unless served on a listener of their own), and, when the policy's `[auth]` verifies
tokens, a 401 with `WWW-Authenticate` for a request without a valid bearer token, plus RFC 9728
protected-resource metadata. A verified caller owns the sessions it opens: anyone else gets 404 for
them, as for an unknown session (SPEC §10). On a loopback listener every path but `/healthz` checks
Host and Origin first (DNS rebinding). Each refusal made before a decision is counted by reason.
The gateway's pages (`Pages`: connect links and callbacks, SPEC §14) are an app of their own
mounted at their paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ...auth.header import credentials_from_authorization_header
from ...owner import Owner
from ...policy.model import Policy
from ...principal import Principal
from ...protected_resource import METADATA_PATH, resource_metadata, sign_in_challenge
from ...rebinding import Security
from ...telemetry.metrics import Metrics
from ..dispatch import Dispatch
from ..gateway import Gateway
from .exchange import text
from .sessions import Sessions
from .streamable import Streamable

METRICS_PATH = "/metrics"  # telemetry.METRICS_PATH (its module brings Starlette; this app needs none)
MCP_PATH = "/mcp"
HEALTHZ_PATH = "/healthz"  # the one path answered whatever the Host: it says "up" and nothing else
READY_PING_SECONDS = 2.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # (scope, receive, send): any ASGI app (Starlette)


class Pages(NamedTuple):
    """The gateway's pages: an ASGI app, and the paths it answers (a path ending in "/" is a
    prefix; any other is that path and what lies under it)."""

    paths: tuple[str, ...]
    app: ASGIApp

    def serves(self, path: str) -> bool:
        return any(path.startswith(p) if p.endswith("/") else path == p or path.startswith(p + "/")
                   for p in self.paths)


def build_app(gateway: Gateway, host: str, base_url: str, metrics: Metrics | None = None,
              sessions: Sessions | None = None, pages: Pages | None = None) -> App:
    """The ASGI app; `base_url` (`http://HOST:PORT`) names the resource in the auth metadata.
    `metrics` are served at `/metrics`, outside the bearer gate like the health checks (no token,
    label, or confidential requirement is in them; docs/operations.md says why). `sessions` holds
    the per-principal bounds (default: SPEC §10's). `pages`: the gateway's pages, outside the
    bearer gate too (each checks its own caller: a signed-in person, or a bearer token)."""
    sessions = sessions if sessions is not None else Sessions()
    refused = gateway.telemetry.refused
    return App(gateway, Streamable(Dispatch(gateway), sessions, refused), sessions, base_url,
               metrics, Security.for_host(host), pages)


class App:
    """Routes a request to its endpoint (the ones above; anything else is 404)."""

    def __init__(self, gateway: Gateway, streamable: Streamable, sessions: Sessions,
                 base_url: str, metrics: Metrics | None = None,
                 security: Security | None = None, pages: Pages | None = None) -> None:
        self.gateway = gateway
        self.pages = pages
        self.metrics = metrics
        self.security = security
        self.refused = gateway.telemetry.refused
        self.streamable = streamable
        self.sessions = sessions
        self.base_url = base_url
        self.metadata_url = f"{base_url}{METADATA_PATH}{MCP_PATH}"
        self._metadata_of: tuple[Policy, dict[str, Any] | None] | None = None

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The protected-resource metadata of the policy in force, None when it verifies no tokens.
        Read per request: a reload that adds `[auth]` starts challenging callers and binding sessions
        at once, and one that removes it stops answering every request with 401."""
        policy = self.gateway.policy()
        if self._metadata_of is None or self._metadata_of[0] is not policy:
            self._metadata_of = (policy, resource_metadata(policy, self.base_url + MCP_PATH))
        return self._metadata_of[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path != HEALTHZ_PATH and await self._rebound(scope, send):
            return
        if path == MCP_PATH:
            owner: Owner | None = None
            if self.metadata is not None and method != "OPTIONS":
                principal, header = await self._verified(scope)
                if principal is None:
                    self.refused("token_missing" if header is None else "token_invalid")
                    await self._challenge(send, header)
                    return
                owner = Owner.of(principal)
            await self.streamable(scope, receive, send, owner)
            return
        if path == METRICS_PATH and self.metrics is not None and method in ("GET", "HEAD"):
            await self._scrape(scope, send)
            return
        if self.pages is not None and self.pages.serves(path):
            await self.pages.app(scope, receive, send)
            return
        endpoints: dict[str, Callable[[], Awaitable[tuple[int, Any, list[tuple[bytes, bytes]]]]]] = {
            HEALTHZ_PATH: _healthz, "/readyz": self._readyz}
        if self.metadata is not None:
            endpoints[METADATA_PATH] = endpoints[METADATA_PATH + MCP_PATH] = self._metadata
        endpoint = endpoints.get(path)
        if endpoint is None:
            if path.endswith("/") and (path[:-1] in endpoints or path[:-1] == MCP_PATH):
                await _respond(send, 307, b"", [(b"location", path[:-1].encode())])
            else:
                await _respond(send, 404, b"Not Found", [(b"content-type", b"text/plain; charset=utf-8")])
            return
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, b"Method Not Allowed", [
                (b"content-type", b"text/plain; charset=utf-8"), (b"allow", b"GET, HEAD")])
            return
        status, body, headers = await endpoint()
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        await _respond(send, status, b"" if method == "HEAD" else data,
                       [(b"content-type", b"application/json"), *headers], length=len(data))

    async def _rebound(self, scope: Scope, send: Send) -> bool:
        """Whether the request was refused for its Host or Origin (on a loopback listener). `/mcp`
        refuses a request without Host, as the MCP SDK does; a health check or a scrape without
        one (an HTTP/1.0 probe) is answered: no browser page can omit it."""
        if self.security is None:
            return False
        refused = self.security.refuse_headers(scope["headers"], hostless=scope["path"] != MCP_PATH)
        if refused is None:
            return False
        self.refused("host")
        await text(send, *refused)
        return True

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        chores: list[asyncio.Task[None]] = []
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                loop = asyncio.get_running_loop()
                chores = [loop.create_task(self.sessions.expire()),
                          loop.create_task(self.streamable.unanswered.keep_alive())]
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                for chore in chores:
                    chore.cancel()
                self.sessions.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _verified(self, scope: Scope) -> tuple[Principal | None, str | None]:
        """The caller's principal when its bearer token is accepted (the token is read here and by
        the guard only; nothing passes it on), and the raw header."""
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if header is None:
            return None, None
        identity = await self.gateway.guard.authenticate(credentials_from_authorization_header(header))
        return identity.principal, header

    async def _challenge(self, send: Send, header: str | None) -> None:
        """401 for a missing or refused token, naming the metadata document (MCP authorization)."""
        challenge = sign_in_challenge(self.metadata_url, refused=header is not None)
        await _respond(send, 401, challenge.body, [(b"content-type", b"application/json"),
                                                   (b"www-authenticate", challenge.header.encode())])

    async def _scrape(self, scope: Scope, send: Send) -> None:
        """The metrics, in the format the scraper asks for (Prometheus text, or OpenMetrics)."""
        from prometheus_client.exposition import choose_encoder

        assert self.metrics is not None
        accept = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"accept"), "")
        encode, content_type = choose_encoder(accept)
        body = encode(self.metrics.registry)
        await _respond(send, 200, b"" if scope["method"] == "HEAD" else body,
                       [(b"content-type", content_type.encode())], length=len(body))

    async def _readyz(self) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        body = await readiness(self.gateway)
        return (200 if body["status"] != "not ready" else 503), body, []

    async def _metadata(self) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        return 200, self.metadata, [(b"cache-control", b"public, max-age=3600")]


async def _healthz() -> tuple[int, Any, list[tuple[bytes, bytes]]]:
    return 200, {"status": "up"}, []


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], *,
                   length: int | None = None) -> None:
    size = len(body) if length is None else length
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(size).encode())]})
    with contextlib.suppress(Exception):
        await send({"type": "http.response.body", "body": body})


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
    if routes.prompt_collisions:  # known once the servers' prompts are listed
        body["prompt_collisions"] = {name: list(keys) for name, keys in routes.prompt_collisions.items()}
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
        "problem" in e for e in servers.values()) or bool(routes.collisions or routes.prompt_collisions)
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
