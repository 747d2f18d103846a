"""The `mcp` SDK adapter (extra `mcp`): a guarded `MCPServer`, and `guard_server` for a lowlevel `Server`
(whose HTTP app takes `SessionOwners`, so that each session belongs to the caller that opened it).

    server = GuardedMCPServer("mission-control", guard=Guard(load_policy("policy.toml")))

    @server.tool(requirements=["auth:oauth2", "env:production"])   # or stack @requires(...)
    def launch_rocket(vehicle: str) -> str: ...

A bad requirement raises RequirementError at registration, naming the tool and the requirement.
`@requires` works above or below `@server.tool()`: the guard reads each tool's function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, compose_tool_call_handler
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import ListenHandler
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    Icon,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    SubscriptionsListenRequestParams,
    ToolAnnotations,
)
from starlette.applications import Starlette

from ..guard import Guard
from ..outcomes import Decision
from ..requirements import merge
from ..spans import CurrentSpan
from ..telemetry.exposition import METRICS_PATH, metrics_endpoint
from ..telemetry.metrics import Metrics
from ..wire import META_KEY, meta_requirements
from ._calls import DENIAL_CODE, STEP_UP_META_KEY
from ._server import (
    REQUIREMENTS_ATTR,
    CredentialsHook,
    DenialMode,
    Preconditions,
    mark_requirements,
    register_function,
    requirements_of,
)
from ._sessions import SessionOwners, TargetedBus
from ._telemetry import continue_http_traces

__all__ = ["DENIAL_CODE", "EXTENSION_ID", "STEP_UP_META_KEY", "GuardedMCPServer", "Preconditions",
           "PreconditionsExtension", "RequirementsExtension", "SessionOwners", "guard_server",
           "requirements_of", "requires"]

EXTENSION_ID = "io.github.mcp-preconditions/requirements"
_SPANS = CurrentSpan()
F = TypeVar("F", bound=Callable[..., Any])


def requires(*requirements: str) -> Callable[[F], F]:
    """Attach SEP-2487 requirements to a tool function. Several `@requires` add up, top to bottom.
    Under `@server.tool()` they are validated when the tool is registered; above it (the function
    is already a tool), right away."""

    def mark(fn: F) -> F:
        mark_requirements(fn, requirements)
        return fn

    return mark


class RequirementsExtension(Extension):
    """The SEP-2133 extension that tells clients where a tool's requirements are mirrored (the
    `_meta` key), for clients whose typed models drop `execution.requirements`."""

    identifier = EXTENSION_ID

    def settings(self) -> dict[str, Any]:
        return {"metaKey": META_KEY}


class PreconditionsExtension(RequirementsExtension):
    """`RequirementsExtension` that also runs the guard before every tool handler of an `MCPServer`
    (through `intercept_tool_call`): for a plain `MCPServer` built with `extensions=[...]`."""

    def __init__(self, preconditions: Preconditions,
                 register: Callable[[str], None] | None = None) -> None:
        self.preconditions = preconditions
        # Called with the tool name before each decision: makes sure the guard holds what the tool
        # that will run carries (`GuardedMCPServer._register_call`).
        self.register = register

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: Callable[[ServerRequestContext[Any, Any]], Any]
                                  ) -> HandlerResult:
        pre = self.preconditions
        if self.register is not None:
            self.register(params.name)  # registers what will run: requirements put on it later count
        # `Preconditions.call`, inlined: one coroutine and one closure less on every call.
        decided = pre.check_now(ctx.request, params.name, params.arguments)
        decision = decided if isinstance(decided, Decision) else await decided
        if not decision.allowed:
            return pre.refusal(decision)
        result: HandlerResult = await call_next(ctx)
        return result


class GuardedMCPServer(MCPServer[Any]):
    """An `MCPServer` whose tools are guarded: requirements in one line per tool, enforced before
    the handler, on the `tools/list` wire for every protocol version, list_changed when they move.

    Keyword options of `Preconditions` (`list_filtering`, `denial`, `credentials`,
    `notify_list_changed`) pass through; everything else goes to `MCPServer`. `metrics=True` (or a
    `Metrics` to share) counts every decision and serves `GET /metrics` on the HTTP app; traces
    follow the process's OpenTelemetry tracer provider (see docs/operations.md).
    """

    def __init__(self, name: str | None = None, *, guard: Guard,
                 list_filtering: bool | None = None, denial: DenialMode | None = None,
                 credentials: CredentialsHook | None = None, notify_list_changed: bool = True,
                 metrics: Metrics | bool = False, **kwargs: Any) -> None:
        bus = kwargs.get("subscriptions")
        self.preconditions = Preconditions(
            guard, list_filtering=list_filtering, denial=denial, credentials=credentials,
            notify_list_changed=notify_list_changed,
            bus=bus if isinstance(bus, TargetedBus) else None, tool_functions=True)
        if bus is None:
            kwargs["subscriptions"] = self.preconditions.bus
        # The guard runs in this class's own `tools/call` handler (see `_handle_call_tool`), the
        # innermost layer, under any extension's interceptor: the handler the SDK wraps. On an SDK
        # that does not register that method, an interceptor extension guards instead.
        # A subclass that overrides `_handle_call_tool` (it might not call ours) is guarded by the
        # interceptor, which wraps whatever handler the SDK registers.
        self._guard_in_handler = (_HANDLER_HOOK and type(self)._handle_call_tool
                                  is GuardedMCPServer._handle_call_tool)
        extension = (RequirementsExtension() if self._guard_in_handler
                     else PreconditionsExtension(self.preconditions, self._register_call))
        kwargs["extensions"] = [*kwargs.get("extensions", ()), extension]
        super().__init__(name, **kwargs)
        if self._guard_in_handler:
            self._check_call_handler()
        self.middleware.append(self.preconditions)
        self.preconditions.sync = self._sync
        self.preconditions.name = self.name
        if metrics:
            counted = self.preconditions.enable_metrics(metrics if isinstance(metrics, Metrics) else None)
            self.custom_route(METRICS_PATH, ["GET"], include_in_schema=False)(metrics_endpoint(counted))

    def _check_call_handler(self) -> None:
        """Make sure every `tools/call` reaches `_handle_call_tool` (the guard): refuse to build a
        server whose SDK registered something else, rather than serve it unguarded."""
        lowlevel = self._lowlevel_server
        entry = lowlevel.get_request_handler("tools/call")
        if any(type(e).intercept_tool_call is not Extension.intercept_tool_call
               for e in self._extensions):  # composed around the handler: compose it ourselves
            lowlevel.add_request_handler("tools/call", CallToolRequestParams,
                                         compose_tool_call_handler(self._extensions,
                                                                   self._handle_call_tool))
        elif entry is None or entry.handler != self._handle_call_tool:
            raise RuntimeError("GuardedMCPServer: this mcp SDK does not route tools/call to "
                               "MCPServer._handle_call_tool; refusing to serve tools unguarded")

    async def _handle_call_tool(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
                                ) -> CallToolResult | InputRequiredResult:
        """The SDK's `tools/call` handler, run only when the guard allows the call."""
        if self._guard_in_handler:
            pre = self.preconditions
            name = params.name
            if not pre.told:  # the tool set changed: the policy's names are checked against it
                self.know_tools()
            tool = self._tool_manager.get_tool(name)
            if tool is not None:  # requirements put on the function after registration count too
                fn = tool.fn  # `attach_function`'s "nothing changed" test, inlined (every call)
                settled = pre.settled.get(name)
                if (tool.meta is not None or settled is None
                        or settled[0] is not getattr(fn, REQUIREMENTS_ATTR, ())
                        or settled[1] is not pre.guard.registration):
                    pre.attach_function(name, fn, tool.meta)
            # `Preconditions.check_now`, its path without metrics or a recording span inlined
            # (every call; `CurrentSpan.recording()` read inline too: 0.4 µs an in-process call).
            span = _SPANS.context().get(_SPANS.key)
            decided = (pre.guard.check_now(name, pre.credentials(ctx.request), params.arguments)
                       if pre.telemetry is None and (span is None
                                                     or span.__class__ is _SPANS.never_recording)
                       else pre.check_now(ctx.request, name, params.arguments))
            decision = decided if isinstance(decided, Decision) else await decided
            if not decision.allowed:
                return pre.refusal(decision)
        return await super()._handle_call_tool(ctx, params)

    def streamable_http_app(self, **options: Any) -> Starlette:
        """`MCPServer.streamable_http_app`; its calls also continue a `traceparent` header, and its
        sessions belong to the principal that opened them (`SessionOwners`)."""
        continue_http_traces(self._lowlevel_server)  # HTTP only: in-process calls pay nothing
        return self._owned(super().streamable_http_app(**options))

    def sse_app(self, **options: Any) -> Starlette:
        """`MCPServer.sse_app`; its calls also continue a `traceparent` header, and its sessions
        belong to the principal that opened them."""
        continue_http_traces(self._lowlevel_server)
        return self._owned(super().sse_app(**options))

    def _owned(self, app: Starlette) -> Starlette:
        """`app` with its sessions bound to the caller the guard verifies. With the SDK's own auth
        (a token verifier) the SDK binds them itself, to the caller it verified."""
        if self._token_verifier is None:
            app.add_middleware(SessionOwners, guard=self.preconditions.guard,
                               metrics=lambda: self.metrics)
        return app

    @property
    def guard(self) -> Guard:
        return self.preconditions.guard

    @property
    def metrics(self) -> Metrics | None:
        """The `Metrics` this server counts its decisions in (None unless `metrics` was given)."""
        return self.preconditions.metrics

    async def _handle_list_tools(self, ctx: ServerRequestContext[Any, Any],
                                 params: PaginatedRequestParams | None) -> ListToolsResult:
        """The SDK's `tools/list` handler, after the guard has checked the policy's tool names."""
        self.know_tools()
        return await super()._handle_list_tools(ctx, params)

    def know_tools(self) -> None:
        """`Guard.know_tools` with the server's tool names: PolicyError for a policy `[tools.NAME]`
        that nearly matches one. Runs at every list and at a call after the tools changed; call it
        before serving to refuse to start on such a policy (`serve` does)."""
        self.preconditions.know(t.name for t in self._tool_manager.list_tools())

    def _register_call(self, name: str) -> None:
        """Before a call: the guard knows the tool names and holds what the tool that will run
        carries (its function's requirements, its `_meta` mirror)."""
        self.know_tools()
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            self.preconditions.attach_function(name, tool.fn, tool.meta)

    async def _sync(self) -> None:
        """Register every tool's requirements up front (for list_changed session views)."""
        self.know_tools()
        for tool in self._tool_manager.list_tools():
            self.preconditions.attach_function(tool.name, tool.fn, tool.meta)

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, title: str | None = None,
                 description: str | None = None, annotations: ToolAnnotations | None = None,
                 icons: list[Icon] | None = None, meta: dict[str, Any] | None = None,
                 structured_output: bool | None = None, *,
                 requirements: Sequence[str] | None = None) -> None:
        """`MCPServer.add_tool` plus `requirements` (merged with any `@requires` on `fn` and the
        `_meta` mirror in `meta`). Validated before the tool is registered: a bad one raises
        RequirementError. A name the server already has raises ValueError: the SDK would keep the
        first function and silently ignore this one (and its requirements)."""
        tool_name = name or fn.__name__
        reqs = merge(requirements or (), requirements_of(fn), meta_requirements(tool_name, meta))
        self.preconditions.validate(tool_name, reqs)
        if self._tool_manager.get_tool(tool_name) is not None:
            raise ValueError(f"tool '{tool_name}' is already registered on this server; the SDK "
                             f"would keep the first function and ignore this one (remove_tool "
                             f"first to replace it)")
        if reqs:
            self.preconditions.add_tool(tool_name, reqs)
        super().add_tool(fn, name=name, title=title, description=description, annotations=annotations,
                         icons=icons, meta=meta, structured_output=structured_output)
        register_function(fn, self.preconditions, tool_name)
        self.preconditions.told = False  # a new name: the policy's names are checked again

    def remove_tool(self, name: str) -> None:
        """`MCPServer.remove_tool`. The name keeps its requirements in the guard (only ever added:
        a function registered again under it is held to them too)."""
        super().remove_tool(name)
        self.preconditions.told = False

    def tool(self, name: str | None = None, title: str | None = None, description: str | None = None,
             annotations: ToolAnnotations | None = None, icons: list[Icon] | None = None,
             meta: dict[str, Any] | None = None, structured_output: bool | None = None, *,
             requirements: Sequence[str] | None = None) -> Callable[[F], F]:
        """`@server.tool(...)` plus `requirements=[...]`."""
        if callable(name):
            raise TypeError("The @tool decorator was used incorrectly. Did you forget to call it? "
                            "Use @tool() instead of @tool")

        def decorator(fn: F) -> F:
            self.add_tool(fn, name=name, title=title, description=description, annotations=annotations,
                          icons=icons, meta=meta, structured_output=structured_output,
                          requirements=requirements)
            return fn

        return decorator


# Whether the SDK registers `MCPServer._handle_call_tool` as the `tools/call` handler, so that a
# subclass overriding it runs before every tool (checked again per server, in the constructor).
_HANDLER_HOOK = callable(getattr(MCPServer, "_handle_call_tool", None))


def guard_server(server: Server[Any], guard: Guard, *,
                 requirements: Mapping[str, Sequence[str]] | None = None,
                 list_filtering: bool | None = None, denial: DenialMode | None = None,
                 credentials: CredentialsHook | None = None,
                 notify_list_changed: bool = True, metrics: Metrics | bool = False) -> Preconditions:
    """Guard a lowlevel `Server` in place: add the middleware that decides every `tools/call`
    before its handler (whenever that handler is registered) and rewrites `tools/list`, and serve
    `subscriptions/listen` (2026-07-28 list_changed) if it does not yet.

    `requirements` maps tool names to their own requirements (validated now). `metrics=True` (or
    a `Metrics`) counts every decision: serve `telemetry.metrics_route(pre.metrics)` among the
    HTTP app's `custom_starlette_routes`. Served over HTTP without the SDK's auth, add
    `SessionOwners` to the app (`app.add_middleware(SessionOwners, guard=guard)`): otherwise any
    caller who learns a session id can use, stream from or close that session."""
    pre = Preconditions(guard, list_filtering=list_filtering, denial=denial, credentials=credentials,
                        notify_list_changed=notify_list_changed, guard_calls=True)
    pre.name = server.name
    if metrics:
        pre.enable_metrics(metrics if isinstance(metrics, Metrics) else None)
    for tool_name, reqs in (requirements or {}).items():
        pre.add_tool(tool_name, reqs)
    server.middleware.append(pre)
    continue_http_traces(server)
    if notify_list_changed and server.get_request_handler("subscriptions/listen") is None:
        server.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams,
                                   ListenHandler(pre.bus))
    return pre
