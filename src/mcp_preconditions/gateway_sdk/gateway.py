"""The gateway's client side: an MCP SDK lowlevel `Server` whose one middleware takes every client
request through the pipeline: `decide` for tools, `route` to find the server, `forward` to send it,
and back. One gateway serves any number of servers (SPEC §12); one server is the case with no prefix.

Results are returned from the middleware as the servers' own wire dicts (only the envelope bridged),
so the SDK's per-version result sieve never re-models or drops a field.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from pydantic import ValidationError

from .. import __version__
from ..guard import Guard
from ..policy.model import Policy
from ..principal import Credentials
from ..telemetry.gateway import GatewayTelemetry
from . import bridge
from .config import ServerSpec
from .decide import Decide
from .fleet import Fleet, Member
from .forward import Forward
from .listings import Listings
from .rounds import Rounds
from .session import Downstream, http_headers

log = logging.getLogger("mcp_preconditions.gateway")

SERVER_NAME = "mcp-preconditions-gateway"
# Client requests routed to one server (tools/*, listings and the handshake are handled below).
ROUTED = frozenset({"prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe",
                    "completion/complete"})
LISTED = frozenset({"prompts/list", "resources/list", "resources/templates/list"})
LIST_CHANGED = frozenset({"notifications/tools/list_changed", "notifications/prompts/list_changed",
                          "notifications/resources/list_changed"})
# How long the handshake waits for servers that are still starting (an npx download) before
# answering with what it has; `server/discover` waits less, well inside the SDK client's 10 s probe
# timeout (a timed-out probe strands the client: the connection has already chosen 2026-07-28).
CONNECT_WAIT_SECONDS = 20.0
DISCOVER_WAIT_SECONDS = 5.0

CredentialsOf = Callable[[ServerRequestContext[Any, Any]], Credentials]


class Gateway:
    """The guard in front of a fleet of servers, served to any number of clients."""

    def __init__(self, guard: Guard, servers: Sequence[ServerSpec], credentials: CredentialsOf, *,
                 environment: Mapping[str, str] | None = None,
                 telemetry: GatewayTelemetry | None = None) -> None:
        self.guard = guard
        self.credentials = credentials
        self.telemetry = telemetry if telemetry is not None else GatewayTelemetry()
        self.bus = InMemorySubscriptionBus()
        self.rounds = Rounds()
        env = dict(os.environ if environment is None else environment)
        self.fleet = Fleet(guard, servers, env, self.policy, self._list_changed, self.telemetry)
        self.downstream = Downstream(self.bus, self.rounds, lambda: [m.subscriptions for m in self.fleet])
        self.forward = Forward(self.downstream, self.rounds,
                               lambda: self.policy().gateway.call_timeout_seconds, credentials,
                               guard.authenticate, self.telemetry)
        self.decide = Decide(guard, self.fleet, self.policy, self._connect_wait, self.telemetry)
        self.listings = Listings(self.fleet, self.forward, self._connect_wait)
        self.server: Server[Any] = Server(SERVER_NAME, version=__version__,
                                          on_subscriptions_listen=ListenHandler(self.bus))
        # The only middleware: the SDK's own span opener is replaced by `telemetry.message`, which
        # also continues an HTTP `traceparent` header and costs nothing without a tracer provider.
        self.server.middleware[:] = [self]
        for member in self.fleet:
            self._attach(member)

    def policy(self) -> Policy:
        """The policy in force (a reload swaps it)."""
        return self.guard.snapshot.source.policy

    async def run(self) -> None:
        """Every server, started in parallel and supervised on its own, until cancelled."""
        async with anyio.create_task_group() as tg:
            for member in self.fleet:
                tg.start_soon(member.upstream.run)

    async def policy_changed(self) -> None:
        """A reload swapped the policy: names checked again, clients told to list again."""
        self.fleet.policy_changed()
        await self.fleet.flush()

    def server_labels(self, tool: str) -> dict[str, str]:
        """What a decision record about `tool` says of its server: `{"server": KEY}`."""
        routes = self.fleet.routes
        target = routes.tools.get(tool)
        if target is not None:
            return {"server": target.server}
        if tool in routes.collisions:
            return {"server": ",".join(routes.collisions[tool])}
        return {}

    # -- the servers' side -------------------------------------------------------------------------
    def _attach(self, member: Member) -> None:
        upstream = member.upstream

        async def on_connect() -> None:
            await self.fleet.connected(member)

        async def on_notification(method: str, params: dict[str, Any]) -> None:
            if method in LIST_CHANGED:  # that server alone is listed again; clients hear of it
                await self.fleet.changed(member, method)
                return
            await self.downstream.notify(member.key, method, params)

        async def on_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self.downstream.ask(member.key, method, params,
                                             self.policy().gateway.call_timeout_seconds)

        upstream.on_connect = on_connect
        upstream.on_notification = on_notification
        upstream.on_request = on_request

    async def _list_changed(self, kind: str) -> None:
        await self.downstream.notify("", f"notifications/{kind}/list_changed", {})

    # -- the clients' side: the ServerMiddleware ---------------------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        span = self.telemetry.message(ctx.method, ctx.params, http_headers(ctx), ctx.request_id,
                                      ctx.protocol_version)
        if span is None:
            return await self._handle(ctx, call_next)
        with span:
            return await self._handle(ctx, call_next)

    async def _handle(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "tools/call":
            return await self._tracked(ctx, self._call_tool)
        if method == "tools/list":
            return await self._tracked(ctx, self._list_tools)
        if method in ROUTED:
            return await self._tracked(ctx, self._routed)
        if method in LISTED:
            return await self._tracked(ctx, self._listed)
        if method == "logging/setLevel":
            return await self._tracked(ctx, self._set_level)
        if method == "initialize":
            return await self._initialize(ctx, call_next)
        if method == "server/discover":
            return await self._discover(ctx, call_next)
        if method == "subscriptions/listen":
            return await self.downstream.listen(ctx, call_next, self.listings.holder)
        if method == "notifications/roots/list_changed":
            for member in self.fleet:
                await member.upstream.notify(method, bridge.upstream_params(ctx.params))
        return await call_next(ctx)

    async def _tracked(self, ctx: ServerRequestContext[Any, Any],
                       handle: Callable[[ServerRequestContext[Any, Any]], Any]) -> HandlerResult:
        check_request(ctx)
        self.downstream.seen(ctx)
        result: HandlerResult = await handle(ctx)
        return result

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
        params = ctx.params or {}
        return await self.decide.call(ctx, params["name"], params.get("arguments"),
                                      self.credentials(ctx), self.forward)

    def _connect_wait(self) -> float:
        """How long a handshake or a listing waits for servers that are not connected: bounded
        like a call, never longer."""
        return min(CONNECT_WAIT_SECONDS, self.policy().gateway.call_timeout_seconds)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        fleet = self.fleet
        if not all(m.catalog.listings["tools"].loaded for m in fleet):
            await fleet.first_listing(self._connect_wait())
        if not any(m.catalog.listings["tools"].loaded for m in fleet):
            raise MCPError(types.INTERNAL_ERROR, "no server is available")
        result = {"tools": await self.decide.tools(self.credentials(ctx))}
        return bridge.downstream_result(ctx.method, result, ctx.protocol_version)

    async def _listed(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        result = await self.listings.list(ctx)
        return bridge.downstream_result(ctx.method, result, ctx.protocol_version)

    async def _routed(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        result = await self.listings.routed(ctx, self.downstream)
        return bridge.downstream_result(ctx.method, result, ctx.protocol_version)

    async def _set_level(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """Each server's session is shared: it is set to the most verbose level any client asked
        for, and each client is filtered here."""
        level = self.downstream.set_level(ctx)
        params = {**(ctx.params or {}), "level": level}
        for member in self.fleet:
            current = member.upstream.current
            if current is None or "logging" not in current.capabilities:
                continue
            try:
                await self.forward.send(ctx, member, "logging/setLevel", params,
                                        self.policy().gateway.call_timeout_seconds)
            except MCPError as exc:
                log.warning("server %s: logging/setLevel: %s", member.key, exc.error.message)
        return bridge.downstream_result(ctx.method, {}, ctx.protocol_version)

    # -- the handshake: the servers' capabilities, the gateway's own session -----------------------
    async def _initialize(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        await self.fleet.first_connection(self._connect_wait())
        version = str(result.get("protocolVersion", ctx.protocol_version))
        self._describe(result, version, in_meta=False)
        return result

    async def _discover(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        await self.fleet.first_connection(DISCOVER_WAIT_SECONDS)
        self._describe(result, ctx.protocol_version, in_meta=True)
        return result

    def _describe(self, result: dict[str, Any], version: str, *, in_meta: bool) -> None:
        """The servers' capabilities (their union), and, for one server, its own name and
        instructions (the discover result names it in `_meta`)."""
        connected = [m.upstream.current for m in self.fleet if m.upstream.current is not None]
        if not connected:
            return
        result["capabilities"] = bridge.union_capabilities(
            [bridge.downstream_capabilities(c.capabilities, version) for c in connected])
        if len(self.fleet.members) == 1:
            only = connected[0]
            if only.instructions is not None:
                result["instructions"] = only.instructions
            if only.server_info is not None:
                if in_meta:
                    meta = result.get("_meta")
                    result["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                                       SERVER_INFO_META_KEY: only.server_info}
                else:
                    result["serverInfo"] = only.server_info
            return
        parts = [f"{m.key}: {m.upstream.current.instructions}" for m in self.fleet
                 if m.upstream.current is not None and m.upstream.current.instructions]
        if parts:
            result["instructions"] = "\n\n".join(parts)


def check_request(ctx: ServerRequestContext[Any, Any]) -> None:
    """The SDK's own per-version check of a client request (it runs in the handler step, which
    forwarded requests never reach): unknown at this version, or malformed, is refused here."""
    try:
        _methods.validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
    except KeyError:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method) from None
    except ValidationError:
        raise MCPError(types.INVALID_PARAMS, "Invalid request parameters", "") from None
