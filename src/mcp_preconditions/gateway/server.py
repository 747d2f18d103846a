"""The downstream side of the gateway: an MCP SDK lowlevel `Server` whose one middleware forwards
every request to the upstream, decides `tools/call` with the guard first, and rewrites `tools/list`
so each tool carries its effective requirements.

Forwarded results are returned from the middleware as the upstream's own wire dicts (only the
envelope bridged), so the SDK's per-version result sieve never re-models or drops a field.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required
from pydantic import ValidationError

from .. import __version__
from ..guard import Guard
from ..policy.model import Policy
from ..principal import Credentials
from ..wire import with_requirements
from . import bridge, rounds
from .calls import ToolCalls
from .clients import Downstream, client_capabilities
from .rounds import PendingCall, Rounds
from .tools import UpstreamTools
from .upstream import Upstream, UpstreamUnavailable

log = logging.getLogger("mcp_preconditions.gateway")

# Client requests passed through as they are (tools/* and the handshake are handled below).
FORWARDED = frozenset({"prompts/list", "prompts/get", "resources/list", "resources/templates/list",
                       "resources/read", "resources/subscribe", "resources/unsubscribe",
                       "completion/complete", "logging/setLevel"})
# Client notifications the upstream must see: a client's roots changed. (A client's progress
# concerns a request the gateway sent it, and its cancellations are applied by the SDK, which
# cancels the forwarded request upstream.)
FORWARDED_NOTIFICATIONS = frozenset({"notifications/roots/list_changed"})
SERVER_NAME = "mcp-preconditions-gateway"
# How long the handshake waits for an upstream that is still starting (an npx download) before
# answering with the gateway's own capabilities; `server/discover` waits less, well inside the SDK
# client's 10 s probe timeout (a timed-out probe strands the client: the connection has already
# chosen 2026-07-28).
CONNECT_WAIT_SECONDS = 20.0
DISCOVER_WAIT_SECONDS = 5.0
# A 2026-07-28 upstream's input rounds answered for a 2025-11-25 client (the SDK client's own cap is
# 10); a state-only round is retried after a short pause.
MAX_INPUT_ROUNDS = 8
STATE_ONLY_PAUSE = 0.05

CredentialsOf = Callable[[ServerRequestContext[Any, Any]], Credentials]


class Gateway:
    """The guard in front of one upstream, served to any number of downstream clients."""

    def __init__(self, guard: Guard, upstream: Upstream, credentials: CredentialsOf) -> None:
        self.guard = guard
        self.upstream = upstream
        self.credentials = credentials
        self.bus = InMemorySubscriptionBus()
        self.rounds = Rounds()
        self.downstream = Downstream(self.bus, self.rounds, upstream)
        self.tools = UpstreamTools(guard, upstream, self.policy)
        self.calls = ToolCalls(guard, upstream, self.tools, self.policy)
        self.server: Server[Any] = Server(SERVER_NAME, version=__version__,
                                          on_subscriptions_listen=ListenHandler(self.bus))
        self.server.middleware.append(self)
        upstream.on_connect = self.on_connect
        upstream.on_notification = self.on_notification
        upstream.on_request = self.on_request

    def policy(self) -> Policy:
        """The policy in force (a reload swaps it)."""
        return self.guard.snapshot.source.policy

    # -- the upstream's side ---------------------------------------------------------------------
    async def on_connect(self) -> None:
        """A new upstream session: learn its tools (the guard needs their own requirements). A
        server without tools has none; one whose list fails is asked again when a client needs it
        (until then no tool call is forwarded)."""
        connected = self.upstream.current
        if connected is not None and "tools" not in connected.capabilities:
            self.tools.apply([])
        else:
            await self.tools.reload_quietly()
        await self.downstream.subscriptions.renew()

    async def on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/tools/list_changed":
            await self.tools.reload_quietly()
        await self.downstream.notify(method, params)

    async def on_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.downstream.ask(method, params, self.policy().gateway.call_timeout_seconds)

    # -- the downstream's side: the ServerMiddleware ---------------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "tools/call":
            return await self._tracked(ctx, self._call_tool)
        if method == "tools/list":
            return await self._list_tools(ctx)
        if method in FORWARDED:
            return await self._tracked(ctx, self._forward)
        if method == "initialize":
            return await self._initialize(ctx, call_next)
        if method == "server/discover":
            return await self._discover(ctx, call_next)
        if method == "subscriptions/listen":
            return await self.downstream.listen(ctx, call_next)
        if method in FORWARDED_NOTIFICATIONS:
            await self.upstream.notify(method, bridge.upstream_params(ctx.params))
        return await call_next(ctx)

    async def _tracked(self, ctx: ServerRequestContext[Any, Any],
                       handle: Callable[[ServerRequestContext[Any, Any]], Any]) -> HandlerResult:
        self.downstream.seen(ctx)
        result: HandlerResult = await handle(ctx)
        return result

    async def _forward(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        _check_request(ctx)
        params = ctx.params
        if ctx.method == "logging/setLevel":  # the shared session's level; each client's is kept
            params = {**(params or {}), "level": self.downstream.set_level(ctx)}
        if ctx.method in ("resources/subscribe", "resources/unsubscribe"):
            result = await self.downstream.subscription(
                ctx, lambda: self.request(ctx, ctx.method, params))
        else:
            result = await self.request(ctx, ctx.method, params)
        return bridge.downstream_result(ctx.method, result, ctx.protocol_version)

    async def request(self, ctx: ServerRequestContext[Any, Any], method: str,
                      params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Forward one request upstream, and carry the upstream's requests for client input
        between the two protocol versions (see `rounds.py` and `answer_rounds`)."""
        timeout = self.policy().gateway.call_timeout_seconds
        if (bridge.is_modern(ctx.protocol_version) and method in INPUT_REQUIRED_METHODS
                and not self.upstream.modern):
            return await self._in_rounds(ctx, method, params, timeout)
        with self.downstream.in_flight(ctx):
            result = await self._send(ctx, method, params, timeout)
            if not bridge.is_modern(ctx.protocol_version) and is_input_required(result):
                result = await self._answer_rounds(ctx, method, params, result, timeout)
        return result

    async def _send(self, ctx: ServerRequestContext[Any, Any], method: str,
                    params: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
        """One request upstream, progress mapped back to the caller; upstream faults become
        JSON-RPC errors (never a crash, never a result the upstream did not send)."""
        token = bridge.progress_token(params)
        on_progress = None
        if token is not None:
            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                with contextlib.suppress(Exception):  # the caller's request may be answered already
                    await ctx.session.send_progress_notification(
                        token, progress, total, message,
                        related_request_id=cast(Any, ctx.request_id))
        try:
            return await self.upstream.request(
                method, bridge.upstream_params(params, modern=self.upstream.modern),
                timeout=timeout, on_progress=on_progress)
        except UpstreamUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, f"upstream unavailable: {exc}") from None
        except ValidationError:
            raise MCPError(types.INTERNAL_ERROR, "the upstream sent an invalid result") from None

    async def _in_rounds(self, ctx: ServerRequestContext[Any, Any], method: str,
                         params: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
        """A 2026-07-28 client's call to a 2025-11-25 upstream: the upstream's requests come back
        as `input_required`, and the retry carrying the answers continues the same upstream call
        (the retry was decided by the guard again before it got here)."""
        caller = rounds.caller_key(self.credentials(ctx))
        about = rounds.binding(method, params)
        p = dict(params or {})
        if p.get("requestState") is not None:
            return await self.rounds.resume(ctx, p["requestState"], caller, about,
                                            p.get("inputResponses"))
        p.pop("inputResponses", None)  # answers to nothing this upstream asked
        p.pop("requestState", None)

        def spawn(call: PendingCall) -> None:
            self.upstream.spawn(lambda: call.run(lambda: self._send(ctx, method, p, timeout)))
        return await self.rounds.start(ctx, caller, about, timeout, client_capabilities(ctx), spawn)

    async def _answer_rounds(self, ctx: ServerRequestContext[Any, Any], method: str,
                             params: Mapping[str, Any] | None, result: dict[str, Any],
                             timeout: float) -> dict[str, Any]:
        """A 2026-07-28 upstream's `input_required` for a 2025-11-25 client: each input request is
        put to the caller on its request's stream, and the call retried upstream with the answers."""
        for _ in range(MAX_INPUT_ROUNDS):
            if not is_input_required(result):
                return result
            asks = result.get("inputRequests")
            if asks is not None and not isinstance(asks, dict):
                raise MCPError(types.INTERNAL_ERROR, "the upstream sent an invalid result")
            answers: dict[str, Any] = {}
            for key, ask in (asks or {}).items():
                if not isinstance(ask, dict) or not isinstance(ask.get("method"), str):
                    raise MCPError(types.INTERNAL_ERROR, "the upstream sent an invalid result")
                answers[key] = await self.downstream.ask_caller(
                    ctx, ask["method"], dict(ask.get("params") or {}), timeout)
            if not answers:
                await anyio.sleep(STATE_ONLY_PAUSE)  # the upstream is working: ask again shortly
            retry = {k: v for k, v in (params or {}).items()
                     if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            result = await self._send(ctx, method, retry, timeout)
        raise MCPError(types.INTERNAL_ERROR,
                       f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times")

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
        _check_request(ctx)
        params = ctx.params or {}
        return await self.calls.call(ctx, params["name"], params.get("arguments"),
                                     self.credentials(ctx), self.request)

    def _connect_wait(self) -> float:
        """How long a handshake or a listing waits for an upstream that is not connected: bounded
        like a call, never longer."""
        return min(CONNECT_WAIT_SECONDS, self.policy().gateway.call_timeout_seconds)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        _check_request(ctx)
        self.downstream.seen(ctx)
        try:
            tools = await self.tools.current(self._connect_wait())
        except UpstreamUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, f"upstream unavailable: {exc}") from None
        names = list(tools)
        if self.policy().guard.list_filtering:
            allowed = set(await self.guard.callable_tools(self.credentials(ctx), names))
            names = [n for n in names if n in allowed and self.calls.listed(n)]
        requirements_for = self.guard.requirements_for
        result = {"tools": [with_requirements(tools[n], requirements_for(n)) for n in names]}
        return bridge.downstream_result(ctx.method, result, ctx.protocol_version)

    # -- the handshake: the upstream's capabilities, the gateway's own session --------------------
    async def _initialize(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        connected = await self.upstream.wait_connected(self._connect_wait())
        if connected is not None:
            version = str(result.get("protocolVersion", ctx.protocol_version))
            result["capabilities"] = bridge.downstream_capabilities(connected.capabilities, version)
            if connected.server_info is not None:
                result["serverInfo"] = connected.server_info
            if connected.instructions is not None:
                result["instructions"] = connected.instructions
        return result

    async def _discover(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        connected = await self.upstream.wait_connected(DISCOVER_WAIT_SECONDS)
        if isinstance(result, dict) and connected is not None:
            result["capabilities"] = bridge.downstream_capabilities(connected.capabilities,
                                                                    ctx.protocol_version)
            if connected.instructions is not None:
                result["instructions"] = connected.instructions
            if connected.server_info is not None:  # the discover result names the upstream
                meta = result.get("_meta")
                result["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                                   SERVER_INFO_META_KEY: connected.server_info}
        return result


def _check_request(ctx: ServerRequestContext[Any, Any]) -> None:
    """The SDK's own per-version check of a client request (it runs in the handler step, which
    forwarded requests never reach): unknown at this version, or malformed, is refused here."""
    try:
        _methods.validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
    except KeyError:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method) from None
    except ValidationError:
        raise MCPError(types.INVALID_PARAMS, "Invalid request parameters", "") from None
