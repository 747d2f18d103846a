"""The fastmcp adapter (extra `fastmcp`): guard a `FastMCP` app with one call.

    pre = guard_fastmcp(app, Guard(load_policy("policy.toml")))

    @app.tool
    @pre.requires("auth:oauth2", "env:production")
    def launch_rocket(vehicle: str) -> str: ...

Calls are guarded in fastmcp middleware (`on_call_tool`); `tools/list` is rewritten in the SDK's
middleware underneath, since fastmcp's typed tools drop `execution.requirements` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.server.subscriptions import ListenHandler
from mcp_types import SubscriptionsListenRequestParams

from ..guard import Guard
from ._calls import denial_error, denial_text, step_up_meta
from ._server import CredentialsHook, DenialMode, Preconditions

__all__ = ["Preconditions", "PreconditionsMiddleware", "guard_fastmcp"]


def _http_request() -> Any:
    """The current HTTP request (None on stdio and in-process)."""
    ctx = fastmcp_request_ctx.get()
    return ctx.request if ctx is not None else None


class PreconditionsMiddleware(Middleware):
    """fastmcp middleware running the guard before every tool; a denial never reaches the tool."""

    def __init__(self, preconditions: Preconditions) -> None:
        self.preconditions = preconditions

    async def on_call_tool(self, context: MiddlewareContext[mt.CallToolRequestParams],
                           call_next: CallNext[mt.CallToolRequestParams, ToolResult]) -> ToolResult:
        params = context.message
        decision = await self.preconditions.decide(_http_request(), params.name, params.arguments)
        if decision.allowed:
            return await call_next(context)
        if self.preconditions.denial == "jsonrpc":
            raise denial_error(decision)
        # A ToolError would lose structuredContent; an isError ToolResult keeps the SPEC §3 payload.
        return ToolResult(content=denial_text(decision), structured_content=decision.denial_payload(),
                          meta=step_up_meta(decision), is_error=True)


def guard_fastmcp(app: FastMCP[Any], guard: Guard, *,
                  requirements: Mapping[str, Sequence[str]] | None = None,
                  list_filtering: bool | None = None, denial: DenialMode | None = None,
                  credentials: CredentialsHook | None = None,
                  notify_list_changed: bool = True) -> Preconditions:
    """Guard `app` in place and return its `Preconditions` (use `.requires(...)` on tools).

    `requirements` maps tool names to their own requirements (validated now)."""
    pre = Preconditions(guard, list_filtering=list_filtering, denial=denial, credentials=credentials,
                        notify_list_changed=notify_list_changed)
    for name, reqs in (requirements or {}).items():
        pre.add_tool(name, reqs)
    app.add_middleware(PreconditionsMiddleware(pre))
    # fastmcp 4.1.2 serves through an SDK lowlevel Server kept as `_mcp_server`. Outermost, so the
    # wire form we write is what leaves (fastmcp's own root middleware re-types results).
    lowlevel = app._mcp_server
    lowlevel.middleware.insert(0, pre)
    if notify_list_changed and lowlevel.get_request_handler("subscriptions/listen") is None:
        lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams,
                                     ListenHandler(pre.bus))
    return pre
