"""`Preconditions`: one guard attached to one MCP server, whatever its flavour, as the SDK's server
middleware: `tools/list` read and rewritten so requirements are on the wire for every protocol
version (and filtered per principal when the policy asks), calls decided where the flavour cannot
decide them itself, and sessions watched for `list_changed`. What it holds and decides is its base,
`ServerGuard` (_hosted.py); flavour adapters (mcp_sdk.py, fastmcp.py) only hook it in.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from ..calls import reply_of, without_round
from ..envelope import echo_of
from ..errors import ListingError
from ..toolset import advertise, every_page
from ._hosted import (
    REQUIREMENTS_ATTR,
    TOOLS_ATTR,
    UNUSABLE,
    CredentialsHook,
    DenialMode,
    ServerGuard,
    mark_requirements,
    register_function,
    requirements_of,
)
from ._sessions import LISTENER

log = logging.getLogger(__name__)
__all__ = ["REQUIREMENTS_ATTR", "TOOLS_ATTR", "UNUSABLE", "CredentialsHook", "DenialMode",
           "Preconditions", "as_wire_dict", "mark_requirements", "register_function",
           "requirements_of"]


def as_wire_dict(result: HandlerResult) -> dict[str, Any] | None:
    if isinstance(result, dict):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return None


class Preconditions(ServerGuard):
    """A guard hooked into an MCP server, and the lowlevel `ServerMiddleware` that hooks it in (see
    `ServerGuard` for its options)."""

    # The middleware this one runs inside itself (`wrap_first`), or None: a layer of its own.
    inner: ServerMiddleware[Any] | None = None

    def wrap_first(self, chain: list[ServerMiddleware[Any]]) -> None:
        """Hook in as `chain[0]`, running the middleware that was there (the SDK's span opener)
        inside itself: for an adapter that decides calls in its own tool handler, every call
        crosses one middleware layer fewer than with a layer of its own (about 1 µs of an
        in-process call, bench_mcp). Its `tools/list` work then runs outside the SDK's span."""
        if chain and chain[0] is self:
            return
        self.inner = chain[0] if chain else None
        chain[:1] = [self]

    def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
                 ) -> Coroutine[Any, Any, HandlerResult]:
        """`ServerMiddleware`: put requirements on the `tools/list` wire (after the SDK's
        per-version filter), filter it per principal, and track sessions for list_changed."""
        inner = self.inner
        if ctx.method == "tools/call" and self.tool_functions and not self.guard_calls:
            # Decided below, in the adapter's tool-call handler (or interceptor): hand the call on
            # without a coroutine of our own, nor a cast() call (this sits on every call's path).
            # The SDK only awaits what we return.
            return (call_next(ctx) if inner is None  # type: ignore[return-value]
                    else inner(ctx, call_next))
        if inner is not None:
            return self._middleware(ctx, lambda asked: inner(asked, call_next))
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
        if not self.ready or name not in self.listing.tools:  # what a list shows is enforced too
            await self._learn_listing(ctx, call_next)
        if not self.guard_calls:  # decided further in (a plain MCPServer's extension)
            return await call_next(ctx)
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, Mapping) else None
        reply = reply_of(params.get("requestState"), params.get("inputResponses"))
        # The round was the guard's own: nothing of it for the handler.
        ran = ctx if reply is None else dataclasses.replace(ctx, params=without_round(params))
        result: HandlerResult = await self.take(
            ctx.request, name, arguments, lambda: call_next(ran), typed=lambda: self.typed(name),
            session=ctx.session, echo=echo_of(params.get("_meta")), reply=reply)
        return result

    async def _learn_listing(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> None:
        """Ask the rest of the chain for the whole `tools/list` (every page) and adopt what it
        advertises, before a call to a tool no listing has shown yet (a lowlevel Server's tools
        exist only in its list handler's answer). Any failure refuses the call."""
        meta = (ctx.params or {}).get("_meta")  # 2026-07-28 requests carry their version there
        base = {"_meta": meta} if meta is not None else {}

        async def page(cursor: str | None) -> object:
            asked = dataclasses.replace(ctx, method="tools/list", params=base if cursor is None
                                        else {**base, "cursor": cursor})
            return as_wire_dict(await call_next(asked))
        try:
            self.adopt(await every_page(page))
        except ListingError as exc:
            raise MCPError(INTERNAL_ERROR, f"the guard could not read the server's tools: {exc}") from None

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = as_wire_dict(await call_next(ctx))
        tools = result.get("tools") if result is not None else None
        if result is None or not isinstance(tools, list):
            return result
        self.adopt(tools, whole=(ctx.params or {}).get("cursor") is None
                   and result.get("nextCursor") is None)
        credentials = self.credentials(ctx.request)
        listing = self.listing
        page = [t["name"] for t in tools if isinstance(t, dict) and t.get("name") in listing.tools
                and t["name"] not in listing.duplicates]
        shown = await self.shown(credentials, list(dict.fromkeys(page)))
        if self.list_filtering and "cacheScope" in result:
            result["cacheScope"] = "private"  # the list depends on who asked
        result["tools"] = advertise(self.guard, ((name, listing.tools[name]) for name in shown))
        if self.notify_list_changed and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await self._watch_connection(ctx, credentials)
        return result

    async def _watch_connection(self, ctx: ServerRequestContext[Any, Any], credentials: Any) -> None:
        """Watch the connection behind a handshake-era request (those with a standalone channel
        only), with the credentials it last used."""
        # The SDK hands middleware a per-request session; the connection behind it is the session
        # a client holds (mcp 2.3.0 keeps it as `ServerSession._connection`).
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or not getattr(connection, "has_standalone_channel", False):
            return
        if self.views.watch(connection, credentials, await self.view(credentials),
                            connection.send_tool_list_changed):
            connection.exit_stack.callback(self.views.drop, connection)

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Watch one 2026-07-28 `subscriptions/listen` stream while the SDK's handler serves it;
        its change events go to that stream alone. A server whose tools only its listing names
        (lowlevel) is listed first, so that the stream's view has them."""
        if not self.tool_functions and not self.listing.tools:
            try:
                await self._learn_listing(ctx, call_next)
            except Exception:  # the stream is served all the same; its view starts empty
                log.warning("could not list the server's tools for a listen stream", exc_info=True)
        credentials = self.credentials(ctx.request)
        key = object()

        async def notify() -> None:
            await self.bus.publish_to(key, ToolsListChanged())
        self.views.watch(key, credentials, await self.view(credentials), notify)
        token = LISTENER.set(key)
        try:
            return await call_next(ctx)
        finally:
            LISTENER.reset(token)
            self.views.drop(key)

    @staticmethod
    def _advertise_list_changed(result: HandlerResult) -> HandlerResult:
        wire = as_wire_dict(result)
        tools = wire.get("capabilities", {}).get("tools") if wire is not None else None
        if isinstance(tools, dict):
            tools["listChanged"] = True
        return wire if wire is not None else result
