"""`Preconditions`: one guard attached to one MCP server, whatever its flavour.

It decides calls (through `Guard.check`), shapes denials, rewrites `tools/list` so requirements are on
the wire for every protocol version (and filters it per principal when the policy asks), and tells
connected sessions when what they may call has changed. Flavour adapters (mcp_sdk.py, fastmcp.py)
only hook it in, and tell it which requirements each tool's function carries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from ..errors import RequirementError
from ..guard import Guard
from ..outcomes import Decision
from ..policy.load import PolicySource
from ..principal import Credentials
from ..requirements import merge, validate
from ..telemetry.metrics import Metrics
from ..telemetry.tracing import recording_span
from ..wire import meta_requirements, wire_requirements, with_requirements
from ._calls import credentials_from_request, denial_error, denial_result
from ._sessions import TargetedBus, Watches
from ._telemetry import HostedMetrics, observed_check

log = logging.getLogger(__name__)

REQUIREMENTS_ATTR = "__mcp_requirements__"  # where decorators leave a tool function's requirements
# The (Preconditions, tool name) pairs a function is already registered as, so that a `requires`
# stacked *above* the tool decorator still reaches the guard.
TOOLS_ATTR = "__mcp_preconditions_tools__"

# Maps the call's HTTP request (a Starlette Request; None on stdio and in-process) to credentials.
CredentialsHook = Callable[[Any], Credentials]
DenialMode = Literal["result", "jsonrpc"]
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])
# How many `tools/list` pages the lowlevel call path reads to learn a tool's advertised requirements
# before it gives up and refuses the call (a handler whose cursors never end must not hang it).
MAX_LIST_PAGES = 1000


def requirements_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The requirements `@requires` decorators attached to a tool function (empty when none)."""
    return tuple(getattr(fn, REQUIREMENTS_ATTR, ()))


def mark_requirements(fn: Callable[..., Any], requirements: Sequence[str]) -> tuple[str, ...]:
    """Attach `requirements` to a tool function (added to those already there) and register them
    for every tool the function is already registered as. Returns the function's whole list."""
    merged = merge(requirements, requirements_of(fn))
    for pre, name in getattr(fn, TOOLS_ATTR, ()):
        pre.attach(name, merged)  # validated here: a bad one raises RequirementError now
    setattr(fn, REQUIREMENTS_ATTR, merged)
    return merged


def register_function(fn: Callable[..., Any], preconditions: Preconditions, tool: str) -> None:
    """Remember that `fn` is the function of `tool` on a guarded server (see `mark_requirements`)."""
    # A bound method takes no attributes; the call-time check still reads its function's list.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(fn, TOOLS_ATTR, (*getattr(fn, TOOLS_ATTR, ()), (preconditions, tool)))


def told_to_callers(lines: Iterable[str], confidential: Collection[str]) -> str:
    """Problem lines as a caller may read them: a line that names a confidential requirement is
    replaced by a pointer to the server's log (SPEC §3: never named to a caller)."""
    return "\n".join("a problem with a confidential requirement (see the server's log)"
                     if any(c in line for c in confidential) else line for line in lines)


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

    Adapter settings: `tool_functions` says the adapter reads the requirements each tool's function
    and `_meta` carry from its own registry (so `requires` without `name` only marks the function);
    without it, this middleware reads the server's whole `tools/list` before a call to a tool no
    listing has shown, and enforces what it advertises. `guard_calls` makes this middleware decide
    every `tools/call` itself (the lowlevel Server, whose handler may be registered at any time).
    """

    def __init__(self, guard: Guard, *, list_filtering: bool | None = None,
                 denial: DenialMode | None = None, credentials: CredentialsHook | None = None,
                 notify_list_changed: bool = True, bus: TargetedBus | None = None,
                 tool_functions: bool = False, guard_calls: bool = False) -> None:
        self.guard = guard
        self.tool_functions = tool_functions
        self.guard_calls = guard_calls
        self.declared: set[str] = set()  # tool names given requirements by name, in code
        # Per tool: the function's requirement tuple and the guard's registration token with which
        # `attach` last found nothing to add (see `attach_function`; adapters read it on every call
        # to skip that call when nothing changed). Written only by `attach_function`.
        self.settled: dict[str, tuple[object, object]] = {}
        # Set by an adapter that can register every tool's function requirements up front.
        self.sync: Callable[[], Awaitable[None]] | None = None
        self._list_filtering = list_filtering
        self._denial = denial
        self.credentials: CredentialsHook = credentials or credentials_from_request
        self.notify_list_changed = notify_list_changed
        self.bus = bus if bus is not None else TargetedBus()
        self._watches = Watches()
        self.listed: set[str] = set()  # every tool name a `tools/list` answer has shown
        self.known: frozenset[str] | None = None  # the tool names last told to `Guard.know_tools`
        self.told = False  # whether the guard accepted `known` with the policy in force
        self.name = ""  # the server's name: its `server` label in metrics and spans
        self.telemetry: HostedMetrics | None = None  # set by `enable_metrics`

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
        """Declare a tool's own requirements, added to those it has (a second declaration for one
        name never drops a requirement); raises RequirementError now if one is invalid."""
        self.validate(name, requirements)
        self.attach(name, requirements)
        self.declared.add(name)

    def know(self, names: Iterable[str]) -> None:
        """Tell the guard the server's tool names (`Guard.know_tools`) when they changed since it was
        last told: a policy `[tools.NAME]` that nearly matches one raises PolicyError, now and at
        every reload. Until it has succeeded, it is tried again (and raises again) on every call."""
        known = frozenset(names)
        if known != self.known or not self.told:
            self.told = False
            self.guard.know_tools(sorted(known))
            self.known = known
        self.told = True

    def attach(self, name: str, requirements: Sequence[str]) -> bool:
        """Make sure tool `name` has at least `requirements` (added to its own; never removes one).
        Returns whether the guard changed. Raises RequirementError if one is invalid."""
        # Compared with the tool's own list, not the effective one: a requirement the policy also
        # lists must still be the tool's own, or a reload dropping it from the policy would open it.
        own = self.guard.own_requirements(name)
        if all(r in own for r in requirements):
            return False
        self.guard.add_tool(name, list(merge(own, requirements)))
        return True

    def attach_function(self, name: str, fn: Callable[..., Any],
                        meta: Mapping[str, Any] | None = None) -> None:
        """`attach` the requirements tool `name`'s function carries now, and those its `_meta`
        mirror advertises; run before every call. Skipped while neither the function's (immutable)
        requirement tuple nor the guard's own requirements changed since `attach` last found
        nothing to add, and the tool's meta advertises none."""
        raw = getattr(fn, REQUIREMENTS_ATTR, ())
        token = self.guard.registration  # read before attach: a change meanwhile means re-check
        mirrored = meta_requirements(name, meta)
        settled = self.settled.get(name)
        if settled is not None and settled[0] is raw and settled[1] is token and not mirrored:
            return
        if not self.attach(name, merge(raw, mirrored)) and type(raw) is tuple and not mirrored:
            self.settled[name] = (raw, token)  # holds both: identities are never reused

    def validate(self, tool: str, requirements: Sequence[str]) -> None:
        """Raise RequirementError, naming `tool`, if a requirement cannot be enforced (SPEC §3)."""
        errors = [str(f) for f in validate(tool, list(requirements), self.guard.snapshot.registry)
                  if f.severity == "error"]
        if errors:
            raise RequirementError(errors)

    def verify(self, tools: Collection[str]) -> None:
        """Raise RequirementError for each tool given requirements by name that is not among
        `tools` (the server's tool names): a rename or a typo must not leave a tool unguarded."""
        known = ", ".join(f"'{t}'" for t in sorted(tools)) or "none"
        errors = [f"tool '{name}': requirements are declared for it, but the server has no tool "
                  f"of that name (its tools: {known})" for name in sorted(self.declared - set(tools))]
        if errors:
            raise RequirementError(errors)

    def requires(self, *requirements: str, name: str | None = None) -> Callable[[F], F]:
        """Decorator declaring a tool function's requirements (validated at once). Stacked decorators
        add up, top to bottom. The requirements follow the function to whatever name the server
        lists it under (fastmcp, GuardedMCPServer); `name` also declares them for that tool name
        (for a lowlevel Server, where the function's name is used when `name` is not given)."""

        def declare(fn: F) -> F:
            merged = merge(requirements, requirements_of(fn))
            self.validate(name or fn.__name__, merged)
            if name is not None:
                self.attach(name, merged)
                self.declared.add(name)
            elif not self.tool_functions:
                self.attach(fn.__name__, merged)
            mark_requirements(fn, merged)
            return fn

        return declare

    def enable_metrics(self, metrics: Metrics | None = None) -> Metrics:
        """Count every decision of this server in `metrics` (a new `Metrics` when None), under its
        `name`; returns it (serve it with `telemetry.metrics_route`)."""
        if self.telemetry is None or (metrics is not None and metrics is not self.telemetry.metrics):
            self.telemetry = HostedMetrics(metrics or Metrics(), self)
        return self.telemetry.metrics

    @property
    def metrics(self) -> Metrics | None:
        return self.telemetry.metrics if self.telemetry is not None else None

    # -- tools/call ------------------------------------------------------------------------------
    def check_now(self, request: Any, tool: str, arguments: Mapping[str, Any] | None
                  ) -> Decision | Coroutine[Any, Any, Decision]:
        """The guard's decision on one call (`Guard.check_now`): the Decision, or a coroutine to
        await for it. Counted when metrics are on, and traced under a recording server span."""
        if self.telemetry is None and recording_span() is None:
            return self.guard.check_now(tool, self.credentials(request), arguments)
        return observed_check(self, request, tool, arguments)

    async def decide(self, request: Any, tool: str, arguments: Mapping[str, Any] | None) -> Decision:
        """Decide one call; `request` is the call's HTTP request (None on stdio)."""
        decided = self.check_now(request, tool, arguments)
        return decided if isinstance(decided, Decision) else await decided

    def refusal(self, decision: Decision) -> CallToolResult:
        """The denial to return to the client (or raise, in JSON-RPC mode)."""
        if self.denial == "jsonrpc":
            raise denial_error(decision)
        return denial_result(decision)

    async def call(self, request: Any, tool: str, arguments: Mapping[str, Any] | None,
                   handler: Callable[[], Awaitable[R]]) -> R | CallToolResult:
        """Run the guard, then `handler` only if the call is allowed."""
        decision = await self.decide(request, tool, arguments)
        if not decision.allowed:
            return self.refusal(decision)
        return await handler()

    # -- the lowlevel middleware: tools/list, initialize, subscriptions/listen -------------------
    def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
                 ) -> Coroutine[Any, Any, HandlerResult]:
        """`ServerMiddleware`: put requirements on the `tools/list` wire (after the SDK's
        per-version filter), filter it per principal, and track sessions for list_changed."""
        if ctx.method == "tools/call" and not self.guard_calls and self.tool_functions:
            # Decided below, in the adapter's tool-call handler (or interceptor): hand the call on
            # without a coroutine of our own, nor a cast() call (this sits on every call's path).
            # The SDK only awaits what we return.
            return call_next(ctx)  # type: ignore[return-value]
        return self._middleware(ctx, call_next)

    async def _middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "tools/call":  # a flavour that cannot read tool registrations
            return await self._call_tool(ctx, call_next)
        if method == "tools/list":
            return await self._list_tools(ctx, call_next)
        if method == "subscriptions/listen" and self.notify_list_changed:
            return await self._listen(ctx, call_next)
        if method == "initialize" and self.notify_list_changed:
            return self._advertise_list_changed(await call_next(ctx))
        return await call_next(ctx)

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        # Decided here, above the handler lookup, so a handler registered after guard_server (or
        # replaced later) is guarded all the same. The raw params are what the handler will get.
        params = ctx.params or {}
        name = params.get("name")
        if not isinstance(name, str):
            raise MCPError(INVALID_PARAMS, "Invalid request parameters: tools/call needs a string "
                                           "'name'")
        if not self.told or name not in self.listed:  # what a list would show is enforced too
            await self._learn_listing(ctx, call_next)
        if not self.guard_calls:  # decided further in (a plain MCPServer's extension)
            return await call_next(ctx)
        arguments = params.get("arguments")
        decision = await self.decide(ctx.request, name,
                                     arguments if isinstance(arguments, Mapping) else None)
        if not decision.allowed:
            return self.refusal(decision)
        return await call_next(ctx)

    async def _learn_listing(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> None:
        """Ask the rest of the chain for the whole `tools/list` (every page) and adopt what it
        advertises, before a call to a tool no listing has shown yet (a lowlevel Server's tools
        exist only in its list handler's answer). Any failure refuses the call."""
        meta = (ctx.params or {}).get("_meta")  # 2026-07-28 requests carry their version there
        base = {"_meta": meta} if meta is not None else {}
        cursor: object = None
        listing: list[object] = []
        for _ in range(MAX_LIST_PAGES):
            page = dataclasses.replace(ctx, method="tools/list", params=base if cursor is None
                                       else {**base, "cursor": cursor})
            result = as_wire_dict(await call_next(page))
            tools = result.get("tools") if result is not None else None
            if result is None or not isinstance(tools, list):
                raise MCPError(INTERNAL_ERROR, "the guard could not read the server's tools/list")
            listing += tools
            cursor = result.get("nextCursor")
            if cursor is None:
                self.adopt(listing)
                return
        raise MCPError(INTERNAL_ERROR, f"the server's tools/list has over {MAX_LIST_PAGES} pages")

    def adopt(self, tools: Sequence[object]) -> None:
        """Enforce every requirement the listed `tools` carry (what the list will show is what the
        guard checks) and, for a lowlevel Server, tell the guard its tool names."""
        names = []
        try:
            for tool in tools:
                if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                    self.attach(tool["name"], wire_requirements(tool))
                    names.append(tool["name"])
        except RequirementError as exc:  # fail closed: shown unenforced is not an option
            log.warning("the guard refuses this tool list: %s", exc)
            shown = told_to_callers(exc.messages, self.guard.snapshot.confidential)
            raise MCPError(INTERNAL_ERROR, f"the guard refuses this tool list: {shown}") from exc
        if not self.tool_functions:  # the listing is all we know of this server's tools
            self.know(self.listed.union(names))  # before `listed`: a refusal is retried per call
        self.listed.update(names)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = as_wire_dict(await call_next(ctx))
        tools = result.get("tools") if result is not None else None
        if result is None or not isinstance(tools, list):
            return result
        self.adopt(tools)
        credentials = self.credentials(ctx.request)
        if self.list_filtering:
            names = [t.get("name") for t in tools if isinstance(t, dict)]
            allowed = set(await self.guard.callable_tools(credentials, [n for n in names
                                                                        if isinstance(n, str)]))
            tools = [t for t in tools if isinstance(t, dict) and t.get("name") in allowed]
            if "cacheScope" in result:
                result["cacheScope"] = "private"  # the list depends on who asked
        advertised_for = self.guard.advertised_for  # never a confidential requirement (SPEC §3)
        result["tools"] = [with_requirements(t, advertised_for(t["name"]))
                           if isinstance(t, dict) and isinstance(t.get("name"), str) else t
                           for t in tools]
        if self.notify_list_changed and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await self._watch_connection(ctx, credentials)
        return result

    async def _watch_connection(self, ctx: ServerRequestContext[Any, Any],
                                credentials: Credentials) -> None:
        await self._watches.watch_connection(ctx.session, credentials, self.view)

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        return await self._watches.listen(self.credentials(ctx.request), self.view, self.bus,
                                          lambda: call_next(ctx))

    @staticmethod
    def _advertise_list_changed(result: HandlerResult) -> HandlerResult:
        wire = as_wire_dict(result)
        tools = wire.get("capabilities", {}).get("tools") if wire is not None else None
        if isinstance(tools, dict):
            tools["listChanged"] = True
        return wire if wire is not None else result

    # -- list changes ----------------------------------------------------------------------------
    async def view(self, credentials: Credentials) -> Hashable:
        """What a session's tool list depends on: every guarded tool's advertised requirements (a
        change to a confidential one must not be told by a notification), and (with list filtering)
        which of them this caller may call now."""
        if self.sync is not None:
            await self.sync()
        snapshot = self.guard.snapshot
        names = sorted(set(self.guard.tool_names()) | set(snapshot.tools))
        requirements = tuple(self.guard.advertised_for(n) for n in names)
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
