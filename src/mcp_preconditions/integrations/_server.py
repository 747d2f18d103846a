"""`Preconditions`: one guard attached to one MCP server, whatever its flavour.

It decides calls (through `Guard.check`), shapes denials, rewrites `tools/list` so requirements are on
the wire for every protocol version (and filters it per principal when the policy asks), and tells
connected sessions when what they may call has changed. Flavour adapters (mcp_sdk.py, fastmcp.py)
only hook it in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import ToolsListChanged
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from ..guard import Guard
from ..outcomes import Decision
from ..policy.load import PolicySource
from ..principal import Credentials
from ..requirements import merge
from ..wire import with_requirements
from ._calls import credentials_from_request, denial_error, denial_result
from ._sessions import LISTENER, TargetedBus, Watch, Watches

log = logging.getLogger(__name__)

REQUIREMENTS_ATTR = "__mcp_requirements__"  # where decorators leave a tool function's requirements

# Maps the call's HTTP request (a Starlette Request; None on stdio and in-process) to credentials.
CredentialsHook = Callable[[Any], Credentials]
DenialMode = Literal["result", "jsonrpc"]
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


def requirements_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The requirements `@requires` decorators attached to a tool function (empty when none)."""
    return tuple(getattr(fn, REQUIREMENTS_ATTR, ()))


def as_wire_dict(result: HandlerResult) -> dict[str, Any] | None:
    if isinstance(result, dict):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return None


class Preconditions:
    """A guard hooked into an MCP server.

    `list_filtering` and `denial` default to the policy's `[guard]` settings (read per request, so a
    reload can change them); pass them to override. `credentials` maps the call's HTTP request
    (None on stdio) to the caller's credentials (default: the token the SDK's auth verified, else
    the raw `Authorization: Bearer` token for the guard's own verifier, else anonymous). `bus` is
    the `subscriptions/listen` bus used to reach 2026-07-28 sessions.
    """

    def __init__(self, guard: Guard, *, list_filtering: bool | None = None,
                 denial: DenialMode | None = None, credentials: CredentialsHook | None = None,
                 notify_list_changed: bool = True, bus: TargetedBus | None = None) -> None:
        self.guard = guard
        self._list_filtering = list_filtering
        self._denial = denial
        self.credentials: CredentialsHook = credentials or credentials_from_request
        self.notify_list_changed = notify_list_changed
        self.bus = bus if bus is not None else TargetedBus()
        self._watches = Watches()

    # -- settings --------------------------------------------------------------------------------
    @property
    def list_filtering(self) -> bool:
        if self._list_filtering is not None:
            return self._list_filtering
        return self.guard.snapshot.source.policy.guard.list_filtering

    @property
    def denial(self) -> DenialMode:
        return self._denial or self.guard.snapshot.source.policy.guard.denial

    def add_tool(self, name: str, requirements: Sequence[str]) -> None:
        """Declare a tool's own requirements; raises RequirementError now if one is invalid."""
        self.guard.add_tool(name, list(requirements))

    def requires(self, *requirements: str, name: str | None = None) -> Callable[[F], F]:
        """Decorator declaring a tool function's requirements (validated at once); stack it under
        the framework's tool decorator. The tool name is `name`, else the function's name. Stacked
        decorators add up, top to bottom."""

        def declare(fn: F) -> F:
            merged = merge(requirements, requirements_of(fn))
            self.add_tool(name or fn.__name__, merged)
            setattr(fn, REQUIREMENTS_ATTR, merged)
            return fn

        return declare

    # -- tools/call ------------------------------------------------------------------------------
    async def decide(self, request: Any, tool: str, arguments: Mapping[str, Any] | None) -> Decision:
        """Decide one call; `request` is the call's HTTP request (None on stdio)."""
        return await self.guard.check(tool, self.credentials(request), arguments)

    def refusal(self, decision: Decision) -> CallToolResult:
        """The denial to return to the client (or raise, in JSON-RPC mode)."""
        if self.denial == "jsonrpc":
            raise denial_error(decision)
        return denial_result(decision)

    async def call(self, request: Any, tool: str, arguments: Mapping[str, Any] | None,
                   handler: Callable[[], Awaitable[R]]) -> R | CallToolResult:
        """Run the guard, then `handler` only if the call is allowed."""
        decision = await self.guard.check(tool, self.credentials(request), arguments)
        if not decision.allowed:
            return self.refusal(decision)
        return await handler()

    # -- the lowlevel middleware: tools/list, initialize, subscriptions/listen -------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """`ServerMiddleware`: put requirements on the `tools/list` wire (after the SDK's
        per-version filter), filter it per principal, and track sessions for list_changed."""
        method = ctx.method
        if method == "tools/list":
            return await self._list_tools(ctx, call_next)
        if method == "subscriptions/listen" and self.notify_list_changed:
            return await self._listen(ctx, call_next)
        if method == "initialize" and self.notify_list_changed:
            return self._advertise_list_changed(await call_next(ctx))
        return await call_next(ctx)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = as_wire_dict(await call_next(ctx))
        tools = result.get("tools") if result is not None else None
        if result is None or not isinstance(tools, list):
            return result
        credentials = self.credentials(ctx.request)
        if self.list_filtering:
            names = [t.get("name") for t in tools if isinstance(t, dict)]
            allowed = set(await self.guard.callable_tools(credentials, [n for n in names
                                                                        if isinstance(n, str)]))
            tools = [t for t in tools if isinstance(t, dict) and t.get("name") in allowed]
            if "cacheScope" in result:
                result["cacheScope"] = "private"  # the list depends on who asked
        requirements_for = self.guard.requirements_for
        result["tools"] = [with_requirements(t, requirements_for(t["name"]))
                           if isinstance(t, dict) and isinstance(t.get("name"), str) else t
                           for t in tools]
        if self.notify_list_changed and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await self._watch_connection(ctx, credentials)
        return result

    async def _watch_connection(self, ctx: ServerRequestContext[Any, Any],
                                credentials: Credentials) -> None:
        # The SDK hands middleware a per-request session; the connection behind it is the session
        # a client holds (mcp 2.3.0 keeps it as `ServerSession._connection`).
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or not getattr(connection, "has_standalone_channel", False):
            return
        view = await self.view(credentials)
        watch = self._watches.get(connection)
        if watch is not None:
            watch.credentials, watch.view = credentials, view
            return
        self._watches.put(connection, Watch(credentials, view, connection.send_tool_list_changed))
        connection.exit_stack.callback(self._watches.drop, connection)

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        key = object()
        credentials = self.credentials(ctx.request)

        async def notify() -> None:
            await self.bus.publish_to(key, ToolsListChanged())

        self._watches.put(key, Watch(credentials, await self.view(credentials), notify))
        token = LISTENER.set(key)
        try:
            return await call_next(ctx)
        finally:
            LISTENER.reset(token)
            self._watches.drop(key)

    @staticmethod
    def _advertise_list_changed(result: HandlerResult) -> HandlerResult:
        wire = as_wire_dict(result)
        tools = wire.get("capabilities", {}).get("tools") if wire is not None else None
        if isinstance(tools, dict):
            tools["listChanged"] = True
        return wire if wire is not None else result

    # -- list changes ----------------------------------------------------------------------------
    async def view(self, credentials: Credentials) -> Hashable:
        """What a session's tool list depends on: every guarded tool's requirements, and (with list
        filtering) which of them this caller may call now."""
        snapshot = self.guard.snapshot
        names = sorted(set(self.guard.tool_names()) | set(snapshot.tools))
        requirements = tuple(self.guard.requirements_for(n) for n in names)
        allowed = (frozenset(await self.guard.callable_tools(credentials, names))
                   if self.list_filtering else None)
        return tuple(names), requirements, allowed

    @property
    def sessions(self) -> int:
        """How many connected sessions are watched for list changes."""
        return len(self._watches)

    async def refresh(self) -> int:
        """Re-evaluate every watched session after a policy reload or a change of live facts, and
        send `notifications/tools/list_changed` to each whose tool list changed. Returns how many."""
        return await self._watches.refresh(self.view)

    async def reload(self, source: PolicySource) -> int:
        """Swap in a new policy (PolicyError/RequirementError keep the old one) and notify."""
        self.guard.reload(source)
        return await self.refresh()

    async def watch(self, interval: float) -> None:
        """Refresh every `interval` seconds, forever: for live facts (state, flags) that change
        without telling anyone. Run it in the server's task group."""
        while True:
            await anyio.sleep(interval)
            if len(self._watches):
                await self.refresh()
