"""The fastmcp adapter (extra `fastmcp`): guard a `FastMCP` app with one call.

    pre = guard_fastmcp(app, Guard(load_policy("policy.toml")))

    @app.tool
    @pre.requires("auth:oauth2", "env:production")
    def launch_rocket(vehicle: str) -> str: ...

Calls are guarded in fastmcp middleware (`on_call_tool`) under the name of the tool fastmcp will
actually run (a rename, a mount prefix or an app's hashed alias changes the name, not the function,
so the requirements a function carries follow it); `tools/list` is rewritten in the SDK's middleware
underneath, since fastmcp's typed tools drop `execution.requirements` too.

Served over HTTP without fastmcp's own auth, give fastmcp `SessionOwners` so each session belongs
to the caller that opened it: `app.http_app(middleware=[Middleware(SessionOwners, guard=guard)])`
(or the same `middleware=` to `app.run(transport="http", ...)`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.addressing import parse_hashed_backend_name
from fastmcp.server.providers.base import Provider
from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool
from fastmcp.tools.base import InputRequiredToolResult, Tool, ToolResult
from fastmcp.tools.tool_transform import TransformedTool
from fastmcp.utilities.versions import VersionSpec
from mcp.server.subscriptions import ListenHandler
from mcp_types import SubscriptionsListenRequestParams

from ..calls import reply_of, without_round
from ..denials import denial_result
from ..envelope import echo_of
from ..guard import Guard
from ..outcomes import Decision
from ..remedies import Recipient
from ..requirements import merge
from ..telemetry.exposition import METRICS_PATH, metrics_endpoint
from ..telemetry.metrics import Metrics
from ..wire import meta_requirements
from ._asking import input_required
from ._calls import credentials_from_request, denial_error
from ._server import CredentialsHook, DenialMode, Preconditions, requirements_of
from ._sessions import SessionOwners
from ._telemetry import continue_http_traces

__all__ = ["Preconditions", "PreconditionsMiddleware", "SessionOwners", "credentials_from_request",
           "guard_fastmcp", "requirements_of_tool", "resolve_tool"]


def _http_request() -> Any:
    """The current HTTP request (None on stdio and in-process)."""
    ctx = fastmcp_request_ctx.get()
    return ctx.request if ctx is not None else None


@contextlib.contextmanager
def _without_round() -> Iterator[None]:
    """The call's request as the tool's `Context` reads it (`input_responses`, `request_state`:
    from the SDK request's raw params), less the guard's own round."""
    ctx = fastmcp_request_ctx.get()
    raw = ctx._srctx.params if ctx is not None else None
    if ctx is None or not isinstance(raw, Mapping):
        yield
        return
    token = fastmcp_request_ctx.set(dataclasses.replace(
        ctx, _srctx=dataclasses.replace(ctx._srctx, params=without_round(raw))))
    try:
        yield
    finally:
        fastmcp_request_ctx.reset(token)


def _session(context: MiddlewareContext[Any]) -> Any:
    """The SDK session of the call (None when fastmcp has none to give): what its client declared."""
    ctx = context.fastmcp_context
    try:
        return ctx.session if ctx is not None else None
    except RuntimeError:
        return None


def requested_version(meta: Mapping[str, Any] | None) -> VersionSpec | None:
    """The version a `tools/call` asks for: fastmcp 4.1.2 mirrors it in the middleware message's
    `_meta["fastmcp"]["version"]` (a string, or `{"gte", "lt", "eq"}`). Anything else there raises
    ToolError: the guard must not judge one version while another runs."""
    fastmcp_meta = (meta or {}).get("fastmcp")
    version = fastmcp_meta.get("version") if isinstance(fastmcp_meta, Mapping) else None
    if version is None:
        return None
    if isinstance(version, str):
        return VersionSpec(eq=version)
    if (isinstance(version, Mapping) and set(version) <= {"gte", "lt", "eq"}
            and all(isinstance(v, str | None) for v in version.values())):
        return VersionSpec(gte=version.get("gte"), lt=version.get("lt"), eq=version.get("eq"))
    raise ToolError("the call's requested version is malformed; the tool was not run")


async def resolve_tool(server: FastMCP[Any], name: str, version: VersionSpec | None) -> Tool | None:
    """The tool `server.call_tool(name)` will run, looked up exactly as fastmcp 4.1.2 does: by listed
    name, else as a `<hash>_<name>` backend alias of an app tool. None: fastmcp would not run any."""
    tool = await server.get_tool(name, version=version)
    if tool is None:
        hashed = parse_hashed_backend_name(name)
        if hashed is not None:
            tool = await server.get_tool_by_hash(*hashed)
    return tool


async def requirements_of_tool(tool: Tool) -> tuple[str, ...]:
    """The requirements a tool carries: those `requires` attached to the function behind it and
    its `_meta` mirror, through tool transforms (the parent tool) and mounted servers (the child
    server's tool). Raises RequirementError for a mirror that is not a list of strings."""
    fn = getattr(tool, "fn", None)
    found = merge(requirements_of(fn) if callable(fn) else (), meta_requirements(tool.name, tool.meta))
    if isinstance(tool, TransformedTool):
        return merge(found, await requirements_of_tool(tool.parent_tool))
    if isinstance(tool, FastMCPProviderTool):
        # fastmcp 4.1.2 keeps the child server and the tool's name there on these private fields.
        child, original = getattr(tool, "_server", None), getattr(tool, "_original_name", None)
        if isinstance(child, FastMCP) and isinstance(original, str):
            version = VersionSpec(eq=tool.version) if tool.version else None
            inner = await child.get_tool(original, version=version)
            if inner is not None:
                return merge(found, await requirements_of_tool(inner))
    return found


async def _all_tools(server: FastMCP[Any]) -> Sequence[Tool]:
    """Every tool of the server, before per-caller auth, visibility and enabled filtering."""
    return await Provider.list_tools(server)


class PreconditionsMiddleware(Middleware):
    """fastmcp middleware running the guard before every tool; a denial never reaches the tool.

    It registers the requirements each listed or called tool's function carries under the tool's
    listed name, and refuses to list or call anything while a tool name given requirements in code
    is not one of the server's tools."""

    def __init__(self, preconditions: Preconditions, server: FastMCP[Any] | None = None) -> None:
        self.preconditions = preconditions
        self.server = server
        self._verified: frozenset[str] = frozenset()

    def _server_of(self, context: MiddlewareContext[Any]) -> FastMCP[Any]:
        ctx = context.fastmcp_context
        server = ctx.fastmcp if ctx is not None else self.server
        if server is None:  # fail closed: without the server we cannot tell which tool would run
            raise ToolError("the guard cannot see the server; the tool was not run")
        return server

    async def _verify(self, server: FastMCP[Any]) -> None:
        declared = frozenset(self.preconditions.declared)
        if not declared <= self._verified:
            self.preconditions.verify({t.name for t in await _all_tools(server)})
            self._verified = declared

    async def _tell(self, server: FastMCP[Any], tool: str | None = None) -> None:
        """`Guard.know_tools` with every tool name of the server (PolicyError for a near-miss
        policy), when a call reaches a tool it was not told of (None: at every list)."""
        pre = self.preconditions
        if tool is None or not pre.ready or pre.known is None or tool not in pre.known:
            pre.know(t.name for t in await _all_tools(server))

    async def sync(self) -> None:
        """Register the requirements of every tool of the server (not only those a caller has
        listed or called), so session views for list_changed see them; verify declared names."""
        if self.server is None:
            return
        tools = await _all_tools(self.server)
        await self._verify(self.server)
        self.preconditions.know(t.name for t in tools)
        for tool in tools:
            self.preconditions.attach(tool.name, await requirements_of_tool(tool))

    async def on_list_tools(self, context: MiddlewareContext[mt.ListToolsRequest],
                            call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]]
                            ) -> Sequence[Tool]:
        tools = await call_next(context)
        server = self._server_of(context)
        await self._verify(server)
        await self._tell(server)
        for tool in tools:
            self.preconditions.attach(tool.name, await requirements_of_tool(tool))
        return tools

    async def on_call_tool(self, context: MiddlewareContext[mt.CallToolRequestParams],
                           call_next: CallNext[mt.CallToolRequestParams, ToolResult]) -> ToolResult:
        params = context.message
        server = self._server_of(context)
        await self._verify(server)
        tool = await resolve_tool(server, params.name, requested_version(params.meta))
        if tool is None:  # fastmcp's own answer for a name it cannot resolve; nothing runs
            if self.preconditions.telemetry is not None:
                self.preconditions.telemetry.metrics.observe_unlisted(self.preconditions.name,
                                                                      params.name)
            raise NotFoundError(f"Unknown tool: {params.name!r}")
        await self._tell(server, tool.name)
        self.preconditions.attach(tool.name, await requirements_of_tool(tool))
        pre = self.preconditions
        reply = reply_of(params.request_state, params.input_responses)

        async def run() -> ToolResult:
            if reply is None:
                return await call_next(context)
            with _without_round():  # the round was the guard's own: nothing of it for the tool
                return await call_next(context.copy(message=params.model_copy(
                    update={"request_state": None, "input_responses": None})))

        def deny(decision: Decision, recipient: Recipient) -> ToolResult:
            error = denial_error(decision, recipient) if pre.denial == "jsonrpc" else None
            if error is not None:
                raise error
            # The one denial every server gives (a ToolError would lose its payload), in
            # fastmcp's type.
            denied = denial_result(decision, typed=tool.output_schema is not None,
                                   recipient=recipient)
            return ToolResult(content=denied["content"][0]["text"],
                              structured_content=denied.get("structuredContent"),
                              meta=denied.get("_meta"), is_error=True)

        # A 2026-07-28 caller asked to confirm: fastmcp's own result seals the round's state.
        return await pre.take(_http_request(), tool.name, params.arguments, run,
                              typed=lambda: tool.output_schema is not None,
                              session=_session(context), echo=echo_of(params.meta), reply=reply,
                              deny=deny, ask=lambda round_: InputRequiredToolResult(
                                  input_required(round_)))


def guard_fastmcp(app: FastMCP[Any], guard: Guard, *,
                  requirements: Mapping[str, Sequence[str]] | None = None,
                  list_filtering: bool | None = None, denial: DenialMode | None = None,
                  credentials: CredentialsHook | None = None,
                  notify_list_changed: bool = True, metrics: Metrics | bool = False) -> Preconditions:
    """Guard `app` in place and return its `Preconditions` (use `.requires(...)` on tools).

    `requirements` maps tool names to their own requirements (validated now; each name must be
    one of the app's tools by the first `tools/list` or `tools/call`). `metrics=True` (or a
    `Metrics`) counts every decision (`pre.metrics`) and serves `GET /metrics` on the app.
    Over HTTP without fastmcp's auth, pass `middleware=[Middleware(SessionOwners, guard=guard)]`
    to `app.http_app` / `app.run`: otherwise any caller who learns a session id can use it."""
    pre = Preconditions(guard, list_filtering=list_filtering, denial=denial, credentials=credentials,
                        notify_list_changed=notify_list_changed, tool_functions=True)
    pre.name = app.name
    if metrics:
        counted = pre.enable_metrics(metrics if isinstance(metrics, Metrics) else None)
        app.custom_route(METRICS_PATH, ["GET"], include_in_schema=False)(metrics_endpoint(counted))
    for name, reqs in (requirements or {}).items():
        pre.add_tool(name, reqs)
    middleware = PreconditionsMiddleware(pre, app)
    app.add_middleware(middleware)
    pre.sync = middleware.sync
    # fastmcp 4.1.2 serves through an SDK lowlevel Server kept as `_mcp_server`. Outermost, so the
    # wire form we write is what leaves (fastmcp's own root middleware re-types results).
    lowlevel = app._mcp_server
    continue_http_traces(lowlevel)  # before `pre` goes first: it wraps fastmcp's span opener
    pre.wrap_first(lowlevel.middleware)
    if notify_list_changed and lowlevel.get_request_handler("subscriptions/listen") is None:
        lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams,
                                     ListenHandler(pre.bus))
    return pre
