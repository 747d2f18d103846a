"""Review findings (adapters): paths on which a tool's handler runs although its requirements are
not met. Each test fails today; it passes once the guard runs for every way a tool can be called.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP, FastMCPApp
from fastmcp.server.providers.addressing import hashed_backend_name
from mcp import Client
from mcp.server.lowlevel.server import Server

from mcp_preconditions import Guard
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server, requires


def bare_guard() -> Guard:
    return Guard(entry_points=False)


async def test_fastmcp_app_tool_called_by_its_hashed_alias_is_still_guarded() -> None:
    # fastmcp routes `<hash>_<name>` to an app-visible tool; the guard only knows `<name>`.
    ran: list[str] = []
    server: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(server, bare_guard())
    app = FastMCPApp("Dash")

    @app.tool(model=True)
    @pre.requires("auth:oauth2")
    def save() -> str:
        ran.append("save")
        return "saved"

    server.add_provider(app)
    async with FastMCPClient(server) as client:
        by_name = await client.call_tool_mcp("save", {})
        by_alias = await client.call_tool_mcp(hashed_backend_name("Dash", "save"), {})
    assert by_name.is_error is True
    assert by_alias.is_error is True
    assert ran == []


async def test_fastmcp_tool_renamed_by_its_decorator_keeps_its_requirements() -> None:
    # `@app.tool(name=...)` over `@pre.requires(...)`: requirements land on the function's name.
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, bare_guard())

    @app.tool(name="launch")
    @pre.requires("auth:oauth2")
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with FastMCPClient(app) as client:
        result = await client.call_tool_mcp("launch", {})
    assert result.is_error is True
    assert ran == []


async def test_requires_stacked_above_the_tool_decorator_is_not_silently_ignored() -> None:
    # Wrong decorator order: the attribute is set after GuardedMCPServer read it; nothing enforces it.
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=bare_guard())

    @requires("auth:oauth2")
    @server.tool()
    def wrong_order() -> str:
        ran.append("wrong_order")
        return "ran"

    async with Client(server) as client:
        result = await client.call_tool("wrong_order", {})
    assert result.is_error is True
    assert ran == []


async def test_guard_server_without_a_tools_call_handler_does_not_leave_calls_unguarded() -> None:
    # guard_server wraps only the handler present when it runs; one added later runs unguarded
    # while tools/list still advertises the requirements.
    ran: list[str] = []

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="t",
                                                               input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        ran.append(params.name)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ran")])

    server: Server[Any] = Server("s", on_list_tools=list_tools)
    try:
        guard_server(server, bare_guard(), requirements={"t": ["auth:oauth2"]})
    except (ValueError, TypeError, RuntimeError):
        return  # refusing to guard a server without a tools/call handler is an acceptable fix
    server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
    async with Client(server) as client:
        result = await client.call_tool("t", {})
    assert result.is_error is True
    assert ran == []
