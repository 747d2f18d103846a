"""`tools/call` and `tools/list` through the gateway: every call decided by the guard before it goes
to its server; an allowed call's result is the server's own, a refused one the SPEC §3 denial (or
`unlisted_tool`); a server that fails mid-call gives a tool error, never an allow. A listing shows
each routable tool under its visible name with the requirements it advertises.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..client import DENIAL_META_KEY
from ..denials import DENIAL_CODE, denial_error_data, denial_result, denial_text
from ..guard import Guard
from ..outcomes import Decision, Outcome, new_decision
from ..policy.model import Policy
from ..principal import Credentials
from ..telemetry.gateway import NO_SERVER, GatewayTelemetry
from ..wire import with_requirements
from . import bridge
from .downstream.clients import Call
from .fleet import UNUSABLE, Fleet, Member
from .jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT, RpcError
from .route import visible

log = logging.getLogger("mcp_preconditions.gateway")

# Forward one request to a member: (client request, member, method, params) -> raw result.
Forward = Callable[[Call, Member, str, Mapping[str, Any] | None],
                   Awaitable[dict[str, Any]]]
# Errors that mean "the server failed", not "the server refused": a tool error, not JSON-RPC.
_SERVER_FAULTS = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT, INTERNAL_ERROR})
MALFORMED = "(malformed requirements)"
UNUSABLE_POLICY = "(policy unusable)"


class Decide:
    """Decides and forwards the tool calls of one gateway, and lists its tools."""

    def __init__(self, guard: Guard, fleet: Fleet, policy: Callable[[], Policy],
                 connect_wait: Callable[[], float], telemetry: GatewayTelemetry) -> None:
        self._guard = guard
        self._fleet = fleet
        self._policy = policy
        self._connect_wait = connect_wait
        self._telemetry = telemetry

    def listed(self, name: str) -> bool:
        """Whether `[gateway] unlisted_tools` lets this tool be called at all: under "deny", only
        tools with requirements or named by a `[tools.NAME]` table (`requirements = []` exposes
        an open tool)."""
        policy = self._policy()
        return (policy.gateway.unlisted_tools == "allow" or name in policy.tools
                or bool(self._guard.requirements_for(name)))

    # -- tools/list --------------------------------------------------------------------------------
    async def tools(self, credentials: Credentials) -> list[dict[str, Any]]:
        """Every routable tool under its visible name, carrying its advertised requirements (the
        effective ones less the confidential). With `[guard] list_filtering`, only those this
        caller may call."""
        routes = self._fleet.routes
        names = [n for n in routes.tools if n not in routes.duplicates]
        if self._policy().guard.list_filtering:
            allowed = set(await self._guard.callable_tools(credentials, names))
            names = [n for n in names if n in allowed and self.listed(n)]
        advertised = self._guard.advertised_for
        out = []
        for name in names:
            target = routes.tools[name]
            member = self._fleet.members[target.server]
            tool = member.catalog.tools.get(target.name)
            if tool is not None:
                out.append(with_requirements(visible(tool, member.spec.prefix), advertised(name)))
        return out

    # -- tools/call --------------------------------------------------------------------------------
    async def call(self, ctx: Call, name: str, arguments: Any,
                   credentials: Credentials, forward: Forward) -> dict[str, Any]:
        version = ctx.version
        fleet = self._fleet
        await fleet.fresh_tools()
        if not all(m.catalog.listings["tools"].loaded for m in fleet):
            # Servers still starting: a name one server lists may collide with one another server
            # is about to list, and a collision is refused, never settled by who listed first.
            await fleet.first_listing(self._connect_wait())
        if name not in fleet.routes.tools and name not in fleet.routes.collisions:
            await fleet.unknown_tool(name)  # it may be new
        target = fleet.routes.tools.get(name)
        if target is None:
            why = ("two servers list a tool of that name" if name in fleet.routes.collisions
                   else "no server lists a tool of that name")
            return await self._unlisted(NO_SERVER, name, version, why, credentials)
        server = target.server
        member = fleet.members[server]
        if member.problem is not None:
            refused = await self._refusal(name, UNUSABLE_POLICY, UNUSABLE, credentials, error=True)
            self._telemetry.decided(server, refused)
            return bridge.downstream_result("tools/call", _fault(UNUSABLE), version)
        if name in fleet.routes.duplicates:
            return await self._unlisted(server, name, version, "its server lists more than one tool "
                                                               "of that name", credentials)
        broken = member.catalog.broken.get(target.name) or fleet.invalid.get(name)
        if broken is not None:
            return self._refuse(server, await self._refusal(name, MALFORMED, broken, credentials),
                                version)
        if not self.listed(name):
            return await self._unlisted(server, name, version, "the policy lists no requirements "
                                                               "for it", credentials)
        decision = await self._telemetry.decision(name, self._guard.check(
            name, credentials, arguments if isinstance(arguments, Mapping) else None))
        if not decision.allowed:
            return self._refuse(server, decision, version)
        self._telemetry.decided(server, decision)
        params = {**(ctx.params or {}), "name": target.name}
        try:
            result = await forward(ctx, member, "tools/call", params)
        except RpcError as exc:
            if exc.code not in _SERVER_FAULTS:
                raise  # the server's own answer (bad arguments, ...): passed on as is
            said = exc.message
            text = said if said.startswith(f"server {member.key} ") else \
                f"server {member.key} failed: {said}"
            return bridge.downstream_result("tools/call", _fault(text), version)
        return bridge.downstream_result("tools/call", result, version)

    def _refuse(self, server: str, decision: Decision, version: str) -> dict[str, Any]:
        self._telemetry.decided(server, decision)
        if self._policy().guard.denial == "jsonrpc":
            raise RpcError(DENIAL_CODE, denial_text(decision), denial_error_data(decision))
        return self._shaped(decision.tool, denial_result(decision), version)

    def _shaped(self, name: str, refusal: dict[str, Any], version: str) -> dict[str, Any]:
        """A refusal as this tool's clients can read it. A tool that declares an `outputSchema`
        gets the payload under `_meta` instead of `structuredContent`: TypeScript clients (the
        Inspector, most desktop apps) validate structuredContent against the schema even on an
        error, and would show a schema error instead of the denial."""
        target = self._fleet.routes.tools.get(name)
        tool = (self._fleet.members[target.server].catalog.tools.get(target.name)
                if target is not None else None)
        if tool is not None and tool.get("outputSchema") is not None and "structuredContent" in refusal:
            payload = refusal.pop("structuredContent")
            refusal["_meta"] = {**(refusal.get("_meta") or {}), DENIAL_META_KEY: payload}
        return bridge.downstream_result("tools/call", refusal, version)

    async def _subject(self, credentials: Credentials) -> str | None:
        """Who is calling, for a refusal the guard did not make (every decision names its caller:
        a token is verified, from the cache after the first time)."""
        if credentials.principal is not None:
            return credentials.principal.subject
        if credentials.token is None:
            return None
        return (await self._guard.authenticate(credentials)).subject

    async def _refusal(self, name: str, requirement: str, why: str, credentials: Credentials, *,
                       error: bool = False) -> Decision:
        """A refusal the guard did not decide, recorded as one: `requirement` unsatisfied (the
        server listed the tool's requirements unreadably) or `error` (the policy cannot be applied
        to this server's tools: the service's fault, not the caller's)."""
        outcome = Outcome.error(requirement, why) if error else Outcome.unsatisfied(requirement, why)
        decision = new_decision(name, False, (outcome,), await self._subject(credentials),
                                self._guard.revision, 0, frozenset())
        self._guard.recorder.record(decision)
        return decision

    async def _unlisted(self, server: str, name: str, version: str, why: str,
                        credentials: Credentials) -> dict[str, Any]:
        decision = new_decision(name, False, (), await self._subject(credentials),
                                self._guard.revision, 0, frozenset())
        self._guard.recorder.record(decision)
        self._telemetry.decided(server, decision, listed=False)
        payload = {"error": "unlisted_tool", "tool": name, "unmet": [], "withheld": 0}
        text = f"Tool '{name}' was not run: {why}."
        if self._policy().guard.denial == "jsonrpc":
            raise RpcError(DENIAL_CODE, text, payload)
        result = {"content": [{"type": "text", "text": text}], "structuredContent": payload,
                  "isError": True}
        return self._shaped(name, result, version)


def _fault(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
