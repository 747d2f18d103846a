"""The gateway: every client request through the pipeline, `decide` for tools, `route` to find the
server, `forward` to send it, and back; the handshake and `server/discover` answered with the
servers' own capabilities. One gateway serves any number of servers (SPEC §12); one server is the
case with no prefix. Results are the servers' own wire dicts, only the envelope bridged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import anyio
from mcp_types import SERVER_INFO_META_KEY

from .. import __version__
from ..guard import Guard
from ..policy.model import Policy
from ..principal import Credentials
from ..telemetry.gateway import GatewayTelemetry
from . import bridge
from .callers import NOBODY, Downstream
from .clients import Call
from .config import ServerSpec
from .credentialed import CallerCredentials
from .decide import Decide
from .fleet import Fleet, Member
from .forward import Forward
from .jsonrpc import INTERNAL_ERROR, RpcError
from .listings import Listings
from .rounds import Rounds
from .upstream.peer import OriginHooks

log = logging.getLogger("mcp_preconditions.gateway")

SERVER_NAME = "mcp-preconditions-gateway"
SERVER_INFO = {"name": SERVER_NAME, "version": __version__}
# Client requests routed to one server (tools/*, listings and the handshake are handled below).
ROUTED = frozenset({"prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe",
                    "completion/complete"})
LISTED = frozenset({"prompts/list", "resources/list", "resources/templates/list"})
TOOLS_CHANGED = "notifications/tools/list_changed"
LIST_CHANGED = frozenset({TOOLS_CHANGED, "notifications/prompts/list_changed",
                          "notifications/resources/list_changed"})
# Requests the pipeline serves (the rest of the protocol is in `dispatch`).
SERVED = frozenset({"tools/call", "tools/list", "logging/setLevel", *ROUTED, *LISTED})
# How long the handshake waits for servers that are still starting (an npx download) before
# answering with what it has; `server/discover` waits less, well inside the SDK client's 10 s probe
# timeout (a timed-out probe strands the client: the connection has already chosen 2026-07-28).
CONNECT_WAIT_SECONDS = 20.0
DISCOVER_WAIT_SECONDS = 5.0

CredentialsOf = Callable[[Call], Credentials]


class Gateway:
    """The guard in front of a fleet of servers, served to any number of clients."""

    def __init__(self, guard: Guard, servers: Sequence[ServerSpec], credentials: CredentialsOf, *,
                 environment: Mapping[str, str] | None = None,
                 telemetry: GatewayTelemetry | None = None) -> None:
        self.guard = guard
        self.credentials = credentials
        self.telemetry = telemetry if telemetry is not None else GatewayTelemetry()
        self.rounds = Rounds()
        env = dict(os.environ if environment is None else environment)
        self.fleet = Fleet(guard, servers, env, self.policy, self._list_changed, self.telemetry)
        self.downstream = Downstream(self.rounds, lambda: [m.subscriptions for m in self.fleet])
        self.callers = CallerCredentials(guard, credentials)  # (SPEC §14: every path as the caller)
        self.forward = Forward(self.downstream, self.rounds,
                               lambda: self.policy().gateway.call_timeout_seconds, credentials,
                               guard.authenticate, self.telemetry, self.callers)
        self.decide = Decide(guard, self.fleet, self.policy, self._connect_wait, self.telemetry)
        self.listings = Listings(self.fleet, self.forward, self._connect_wait, self.callers)
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
        # What a server with credentials sends on the gateway's own session is for no caller
        # (SPEC §14); what it sends on a caller's session or stream is that caller's alone.
        own = NOBODY if member.credential is not None else None

        async def on_connect() -> None:
            await self.fleet.connected(member)

        def on_notification(method: str, params: dict[str, Any], owner: Hashable | None = own
                            ) -> None:
            if method in LIST_CHANGED and (own is None or method == TOOLS_CHANGED):
                # That server alone is listed again (one re-list at a time, however many come);
                # clients hear of it. A server with credentials lists the rest to each caller:
                # its other changes are the caller's own news (or nobody's), as notified below.
                self.fleet.outdated(member, method)
                upstream.spawn_once(method, lambda: self.fleet.changed(member, method))
                return
            self.downstream.notify(member.key, method, params, owner)

        async def on_request(method: str, params: dict[str, Any], owner: Hashable | None = own
                             ) -> dict[str, Any]:
            return await self.downstream.ask(member.key, method, params,
                                             self.policy().gateway.call_timeout_seconds, owner)

        upstream.on_connect = on_connect
        upstream.on_notification = on_notification
        upstream.on_request = on_request
        upstream.on_caller_notification = lambda owner, method, params: on_notification(
            method, params, owner)
        upstream.on_caller_request = lambda owner, method, params: on_request(method, params,
                                                                              owner)

        async def on_origin_request(origin: object, method: str, params: dict[str, Any]
                                    ) -> dict[str, Any]:  # asked on a call's own stream: its
            return await self.downstream.ask(member.key, method, params,
                                             self.policy().gateway.call_timeout_seconds,
                                             origin=origin)

        upstream.for_origin = OriginHooks(on_origin_request, self.downstream.polled)

    async def _list_changed(self, kind: str) -> None:
        """The clients hear that a list changed; for tools, only those whose own view changed."""
        if kind == "tools":
            await self.decide.tools_changed()
        else:
            self.downstream.notify("", f"notifications/{kind}/list_changed", {})

    async def listen(self, call: Call) -> None:
        """A 2026-07-28 `subscriptions/listen` stream, served until the client goes (whose it is,
        when servers send callers what is theirs alone)."""
        owner = await self.callers.owner(call) if self.fleet.credentialed else None
        async with self.decide.watching(call, self.credentials(call)):
            await self.downstream.listen(call, self.listings.holder, owner)

    # -- the clients' side -------------------------------------------------------------------------
    async def handle(self, call: Call) -> dict[str, Any]:
        """One validated client request of the pipeline's (`SERVED`): its result, or RpcError."""
        method = call.method
        self.downstream.seen(call)
        if call.client is not None and not call.modern and method != "tools/list" \
                and id(call.client) not in self.decide.views:
            # Told when its tools change (a `tools/list` is watched with what it is shown: one
            # that waits for a server still being listed was never shown the empty view).
            await self.decide.watch(call, self.credentials(call))
        if method == "tools/call":
            params = call.params or {}
            return await self.decide.call(call, params["name"], params.get("arguments"),
                                          self.credentials(call), self.forward)
        if method == "tools/list":
            result = await self._list_tools(call)
        elif method in ROUTED:
            try:
                result = await self.listings.routed(call, self.downstream)
            except RpcError as exc:  # (an older server's codes, as the client's version has them)
                raise bridge.downstream_error(exc, call.params, call.version) from None
        elif method in LISTED:
            result = await self.listings.list(call)
        else:
            result = await self._set_level(call)
        return bridge.downstream_result(method, result, call.version)

    def _connect_wait(self) -> float:
        """How long a handshake or a listing waits for servers that are not connected: bounded
        like a call, never longer."""
        return min(CONNECT_WAIT_SECONDS, self.policy().gateway.call_timeout_seconds)

    async def _list_tools(self, call: Call) -> dict[str, Any]:
        fleet = self.fleet  # (a server re-listing is shown by its last good catalog)
        if not all(m.catalog.listings["tools"].loaded for m in fleet):
            await fleet.first_listing(self._connect_wait())
        if not any(m.catalog.listings["tools"].loaded for m in fleet):
            await self.decide.watch(call, self.credentials(call))  # told when tools come
            raise RpcError(INTERNAL_ERROR, "no server is available")
        return {"tools": await self.decide.tools(call, self.credentials(call))}

    async def _set_level(self, call: Call) -> dict[str, Any]:
        """Each server's session is shared: it is set to the most verbose level any client asked
        for, and each client is filtered here."""
        level = self.downstream.set_level(call)
        params = {**(call.params or {}), "level": level}
        for member in self.fleet:
            current = member.upstream.current
            if current is None or "logging" not in current.capabilities:
                continue
            try:
                if member.credential is not None:  # the caller's own session: their own level
                    await self.forward(call, member, "logging/setLevel", call.params)
                else:
                    await self.forward.send(call, member, "logging/setLevel", params,
                                            self.policy().gateway.call_timeout_seconds)
            except RpcError as exc:
                log.warning("server %s: logging/setLevel: %s", member.key, exc.message)
        return {}

    async def roots_changed(self, params: dict[str, Any] | None) -> None:
        """A client's roots changed: every server hears of it."""
        for member in self.fleet:
            await member.upstream.notify("notifications/roots/list_changed",
                                         bridge.upstream_params(params))

    # -- the handshake: the servers' capabilities, the gateway's own session -----------------------
    async def describe(self, result: dict[str, Any], version: str, *, discover: bool) -> None:
        """Fill the handshake's (or `server/discover`'s) result with the servers' capabilities
        (their union), and, for one server, its own name and instructions (the discover result
        names it in `_meta`), once they have had their time to connect."""
        await self.fleet.first_connection(DISCOVER_WAIT_SECONDS if discover else self._connect_wait())
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
                if discover:
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
