"""The `mcp` SDK adapter (extra `mcp`): a guarded `MCPServer`, and `guard_server` for a lowlevel `Server`
(whose HTTP app takes `SessionOwners`, so that each session belongs to the caller that opened it).

    server = GuardedMCPServer("mission-control", guard=Guard(load_policy("policy.toml")))

    @server.tool(requirements=["auth:oauth2", "env:production"])   # or stack @requires(...)
    def launch_rocket(vehicle: str) -> str: ...

A bad requirement raises RequirementError at registration, naming the tool and the requirement.
`@requires` works above or below `@server.tool()`: the guard reads each tool's function.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
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

from ..calls import Reply, reply_of
from ..envelope import CONTEXT_ID_META_KEY as CONTEXT_ID_KEY
from ..envelope import echo_of
from ..guard import Guard
from ..outcomes import Decision
from ..requirements import merge
from ..spans import CurrentSpan
from ..telemetry.exposition import METRICS_PATH, metrics_endpoint
from ..telemetry.metrics import Metrics
from ..wire import META_KEY, meta_requirements
from ._calls import DENIAL_CODE, STEP_UP_META_KEY, credentials_from_request
from ._server import (
    TOOLS_ATTR,
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
           "PreconditionsExtension", "RequirementsExtension", "SessionOwners",
           "credentials_from_request", "guard_server", "requirements_of", "requires"]

EXTENSION_ID = "io.github.mcp-preconditions/requirements"
_SPANS = CurrentSpan()
# `CurrentSpan.recording()`'s parts, read as globals on every call of the handler's fast path.
_CURRENT_CONTEXT, _SPAN_KEY, _NEVER_RECORDING = _SPANS.context, _SPANS.key, _SPANS.never_recording
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
                 register: Callable[[str], object] | None = None,
                 typed: Callable[[str], bool] | None = None) -> None:
        self.preconditions = preconditions
        # Called with the tool name before each decision: makes sure the guard holds what the tool
        # that will run carries (`GuardedMCPServer._register_call`).
        self.register = register
        # Whether a tool declares an outputSchema (its denial's payload goes in `_meta`): the
        # server's one look-up (default: the listing the guard read).
        self.typed = typed or preconditions.typed

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: Callable[[ServerRequestContext[Any, Any]], Any]
                                  ) -> HandlerResult:
        name = params.name
        if self.register is not None:  # what will run (requirements put on it later count)
            self.register(name)
        reply = _reply(params)

        async def run() -> HandlerResult:
            if reply is not None:  # the guard's own round: the handler gets these very params
                params.request_state = params.input_responses = None
            result: HandlerResult = await call_next(ctx)
            return result
        return await self.preconditions.take(ctx.request, name, params.arguments, run,
                                             typed=lambda: self.typed(name), session=ctx.session,
                                             echo=echo_of(params.meta), reply=reply)


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
        # Per tool name: the guard's registration token with which the call path last found that
        # nothing but the decision stands before its calls (`_register_call`).
        self._clear: dict[str, object] = {}
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
                     else PreconditionsExtension(self.preconditions, self._register_call, self._typed))
        kwargs["extensions"] = [*kwargs.get("extensions", ()), extension]
        super().__init__(name, **kwargs)
        # The SDK's own handler, bound once (`super()` on every call cost 0.1 µs, bench_mcp).
        self._sdk_call_tool = super()._handle_call_tool
        if self._guard_in_handler:
            self._check_call_handler()
        self.preconditions.wrap_first(self.middleware)  # calls are decided in the handler below
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

    def _handle_call_tool(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
                          ) -> Coroutine[Any, Any, CallToolResult | InputRequiredResult]:
        """The SDK's `tools/call` handler, run only when the guard allows the call. A plain function:
        an allowed call is the SDK's own handler's coroutine, no frame of ours around it (bench_mcp)."""
        if not self._guard_in_handler:
            return self._sdk_call_tool(ctx, params)
        pre, name = self.preconditions, params.name
        guard = pre.guard
        # Whether anything but the guard's decision stands before the call: the tool set or the
        # policy changed (names to check), a refusal is pending, or the tool's requirements may
        # have moved since `_register_call` last found its function and mirror carry nothing new.
        if pre.ready is not True or self._clear.get(name) is not guard.registration:
            return self._guarded_call(ctx, params)
        # `Preconditions.check_now`, its path without metrics or a recording span inlined.
        span = _CURRENT_CONTEXT().get(_SPAN_KEY)
        if pre.telemetry is not None or (span is not None and span.__class__ is not _NEVER_RECORDING):
            return self._guarded_call(ctx, params)
        credentials, meta = pre.credentials(ctx.request), params.meta  # `echo_of`, inlined:
        echo = None if not meta else meta.get(CONTEXT_ID_KEY) if meta.__class__ is dict else echo_of(meta)
        decided = (guard.allow_now(name, credentials, params.arguments, spans=False) if echo is None
                   else guard.check_now(name, credentials, params.arguments, echo=echo))
        if decided is True or (isinstance(decided, Decision) and decided.allowed):
            return self._sdk_call_tool(ctx, params)  # (True: allowed, its record going nowhere)
        if not isinstance(decided, Decision):  # a coroutine
            return self._decided_later(decided, ctx, params)
        return pre.denied(decided, self._typed(name), ctx.request, ctx.session, params.arguments)

    async def _guarded_call(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
                            ) -> CallToolResult | InputRequiredResult:
        """The guard's whole path for a call (calls.py): the tool names told, what the tool
        carries registered, a pending refusal, a `self` approval's questions, metrics and traces,
        then the denial or the SDK's handler."""
        name = params.name
        self._register_call(name)
        reply = _reply(params)
        # The guard's own round: nothing of it for the tool's Context.
        ran = params if reply is None else params.model_copy(
            update={"request_state": None, "input_responses": None})
        return await self.preconditions.take(
            ctx.request, name, params.arguments, lambda: self._sdk_call_tool(ctx, ran),
            typed=lambda: self._typed(name), session=ctx.session, echo=echo_of(params.meta),
            reply=reply)

    async def _decided_later(self, pending: Coroutine[Any, Any, Decision],
                             ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
                             ) -> CallToolResult | InputRequiredResult:
        decision = await pending
        if not decision.allowed:
            return await self.preconditions.denied(decision, self._typed(params.name), ctx.request,
                                                   ctx.session, params.arguments)
        return await super()._handle_call_tool(ctx, params)

    def _typed(self, name: str) -> bool:
        """Whether tool `name` declares an outputSchema (the server's one look-up, for a denial)."""
        tool = self._tool_manager.get_tool(name)
        return tool is not None and tool.output_schema is not None

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
        self._know()
        return await super()._handle_list_tools(ctx, params)

    def know_tools(self) -> None:
        """Tell the guard the server's tool names; PolicyError for a policy `[tools.NAME]` that
        nearly matches one. Call it before serving to refuse to start on such a policy (`serve`
        does); while serving, such a policy refuses every call instead (and the log says why)."""
        names = [t.name for t in self._tool_manager.list_tools()]
        self.guard.know_tools(names)
        self.preconditions.know(names)

    def _know(self) -> None:
        """`ServerGuard.know` with the server's tool names: at every list, and at a call after
        the tools changed."""
        self.preconditions.know(t.name for t in self._tool_manager.list_tools())

    def _register_call(self, name: str) -> None:
        """Before a call: the guard knows the tool names and holds what the tool that will run
        carries (its function's requirements, its `_meta` mirror)."""
        pre = self.preconditions
        if not pre.ready:
            self._know()
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return
        pre.attach_function(name, tool.fn, tool.meta)
        # Clear for the handler's fast path while the guard's tools stay as they are now: a tool
        # whose function hears of a later `requires` itself (`register_function`) and that has no
        # `_meta` (a mirror may change in place, so it is read on every call).
        # A tool with an approval is never clear: its caller may be asked (the session's path).
        if tool.meta is None and (pre, name) in getattr(tool.fn, TOOLS_ATTR, ()) \
                and name not in pre.guard.snapshot.asking:
            self._clear[name] = pre.guard.registration

    async def _sync(self) -> None:
        """Register every tool's requirements up front (for list_changed session views)."""
        self._know()
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
        self.preconditions.ready = False  # a new name: the policy's names are checked again
        self._clear.pop(tool_name, None)

    def remove_tool(self, name: str) -> None:
        """`MCPServer.remove_tool`. The name keeps its requirements in the guard (only ever added:
        a function registered again under it is held to them too)."""
        super().remove_tool(name)
        self.preconditions.ready = False
        self._clear.pop(name, None)

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


def _reply(params: CallToolRequestParams) -> Reply | None:
    """What a 2026-07-28 retry answers to the guard's own round (plaintext: the SDK's request-state
    boundary, outside the handler, unsealed it), or None."""
    return reply_of(params.request_state, params.input_responses)


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
    caller who learns a session id can use, stream from or close that session. To seal the state
    of a `self` approval's 2026-07-28 round, add the SDK's `RequestStateBoundary` first."""
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
