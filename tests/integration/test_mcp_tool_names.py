"""Every way a tool can be reached runs its guard: fastmcp renames, mount prefixes, tool transforms
and app aliases; `@requires` above the tool decorator; a lowlevel `tools/call` handler registered
after `guard_server`. Real SDK servers and clients, in-process, both protocol versions.
"""

from __future__ import annotations

import warnings
from typing import Any

import mcp_types
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from fastmcp.tools.base import Tool
from mcp import Client
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from mcp_preconditions.errors import RequirementError
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server, requires
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import MODES, VERSIONS, raw_tools, small_guard

pytestmark = pytest.mark.integration

UNMET = {"error": "unmet_requirements", "tool": "launch", "unmet": ["env:staging"], "withheld": 0}


def listed(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool name -> the `_meta` requirements mirror on the wire (None when absent)."""
    return {t["name"]: (t.get("_meta") or {}).get(META_KEY) for t in tools}


# --- fastmcp: the requirements follow the function to the name it is served under -----------------
@pytest.mark.parametrize("version", VERSIONS)
async def test_a_renamed_fastmcp_tool_is_guarded_and_listed_under_its_name(version: str) -> None:
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, small_guard())

    @app.tool(name="launch", output_schema=None)
    @pre.requires("env:staging")
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with Client(app._mcp_server, mode=MODES[version]) as client:
        tools = listed(await raw_tools(client.session))
        denied = await client.call_tool("launch", {})
    assert tools == {"launch": ["env:staging"]}
    assert denial_of(denied) == UNMET
    assert ran == []
    assert pre.guard.tool_names() == ["launch"]  # nothing registered under the function's name


async def test_a_mounted_tool_is_guarded_under_its_prefixed_name() -> None:
    ran: list[str] = []
    parent: FastMCP[Any] = FastMCP("parent")
    child: FastMCP[Any] = FastMCP("child")
    pre = guard_fastmcp(parent, small_guard())

    @child.tool(output_schema=None)
    @pre.requires("env:staging")
    def launch() -> str:
        ran.append("launch")
        return "launched"

    parent.mount(child, namespace="ns")
    async with FastMCPClient(parent) as client:
        tools = listed([t.model_dump(by_alias=True) for t in await client.list_tools()])
        denied = await client.call_tool_mcp("ns_launch", {})
    assert tools == {"ns_launch": ["env:staging"]}
    assert denial_of(denied) == {**UNMET, "tool": "ns_launch"}
    assert ran == []


async def test_a_transformed_tool_keeps_the_requirements_of_the_tool_it_wraps() -> None:
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, small_guard())

    @pre.requires("env:staging")
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    app.add_tool(Tool.from_tool(Tool.from_function(launch_rocket), name="launch"))
    async with FastMCPClient(app) as client:
        denied = await client.call_tool_mcp("launch", {})
    assert denial_of(denied) == UNMET
    assert ran == []


async def test_requires_above_the_fastmcp_tool_decorator_is_enforced() -> None:
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, small_guard())

    @pre.requires("env:staging")
    @app.tool(name="launch", output_schema=None)
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with FastMCPClient(app) as client:
        denied = await client.call_tool_mcp("launch", {})
    assert denial_of(denied) == UNMET
    assert ran == []


async def test_an_unknown_fastmcp_tool_is_fastmcps_own_error_and_runs_nothing() -> None:
    app: FastMCP[Any] = FastMCP("s")
    guard_fastmcp(app, small_guard())
    async with FastMCPClient(app) as client:
        result = await client.call_tool_mcp("3f9a1c2b4d5e_ghost", {})
    assert result.is_error is True
    assert [c.text for c in result.content if isinstance(c, mcp_types.TextContent)] == [
        "Unknown tool: '3f9a1c2b4d5e_ghost'"]


async def test_requirements_declared_for_a_name_the_server_lacks_refuse_to_serve() -> None:
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, small_guard(), requirements={"lanch": ["env:staging"]})
    ran: list[str] = []

    @app.tool(output_schema=None)
    def launch() -> str:
        ran.append("launch")
        return "launched"

    with pytest.raises(RequirementError) as raised:
        await pre.view(pre.credentials(None))  # what a session's first tools/list computes
    assert str(raised.value) == ("tool 'lanch': requirements are declared for it, but the server "
                                 "has no tool of that name (its tools: 'launch')")
    async with Client(app._mcp_server) as client:
        with pytest.raises(MCPError) as listing:
            await client.list_tools()
        with pytest.raises(MCPError) as calling:
            await client.call_tool("launch", {})
    assert listing.value.message == calling.value.message == "Internal server error"
    assert ran == []  # fail closed while misconfigured


# --- MCPServer: both decorator orders --------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
async def test_requires_above_the_tool_decorator_is_registered_and_enforced(version: str) -> None:
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=small_guard())

    @requires("env:staging")
    @server.tool(name="launch", structured_output=False)
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    assert server.guard.requirements_for("launch") == ("env:staging",)
    async with Client(server, mode=MODES[version]) as client:
        tools = listed(await raw_tools(client.session))
        denied = await client.call_tool("launch", {})
    assert tools == {"launch": ["env:staging"]}
    assert denial_of(denied) == UNMET
    assert ran == []


def test_requires_above_the_tool_decorator_is_validated_at_once() -> None:
    server = GuardedMCPServer("s", guard=small_guard())
    with pytest.raises(RequirementError) as raised:
        @requires("weather:sunny")
        @server.tool(name="launch")
        def launch_rocket() -> str:
            return "never"
    assert str(raised.value) == (
        "tool 'launch': requirement 'weather:sunny': unknown namespace 'weather' (known namespaces: "
        "'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state')")


async def test_requirements_put_on_a_tool_function_later_are_checked_at_call_time() -> None:
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=small_guard())

    def launch() -> str:
        ran.append("launch")
        return "launched"

    server.add_tool(launch, structured_output=False)
    launch.__mcp_requirements__ = ("env:staging",)  # type: ignore[attr-defined]
    async with Client(server) as client:
        denied = await client.call_tool("launch", {})
    assert denial_of(denied) == UNMET
    assert ran == []


# --- lowlevel Server: the middleware decides, whenever the handler was registered ----------------
def late_handler_server(ran: list[str]) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="launch",
                                                               input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        ran.append(params.name)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ran")])

    server: Server[Any] = Server("s", on_list_tools=list_tools)
    guard_server(server, small_guard(), requirements={"launch": ["env:staging"]})
    server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
    return server


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_tools_call_handler_added_after_guard_server_is_guarded(version: str) -> None:
    ran: list[str] = []
    async with Client(late_handler_server(ran), mode=MODES[version]) as client:
        denied = await client.call_tool("launch", {})
        other = await client.call_tool("weather", {})
    assert denied.is_error is True
    assert denial_of(denied) == UNMET
    assert other.is_error is False  # a tool without requirements still runs
    assert ran == ["weather"]


async def test_a_tools_call_without_a_string_name_is_invalid_params() -> None:
    ran: list[str] = []
    bad_name: Any = 7
    async with Client(late_handler_server(ran), mode="legacy") as client:
        # A model built without validation is the only way to put a bad name on this client's wire;
        # pydantic warns when it serializes it.
        with pytest.raises(MCPError) as raised, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            await client.session.send_request(
                mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams.model_construct(
                    name=bad_name, arguments={})), mcp_types.CallToolResult)
    assert raised.value.code == mcp_types.INVALID_PARAMS
    assert ran == []


async def test_a_function_requirement_the_policy_also_lists_survives_a_reload() -> None:
    # The function's requirement is the tool's own even while the policy repeats it; a reload that
    # drops it from the policy must not open the tool.
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    pre = guard_fastmcp(app, Guard(parse_policy(b'[tools.launch]\nrequirements = ["env:staging"]\n',
                                                "p.toml"), entry_points=False))

    @app.tool(output_schema=None)
    @pre.requires("env:staging")
    def launch() -> str:
        ran.append("launch")
        return "launched"

    async with FastMCPClient(app) as client:
        assert (await client.call_tool_mcp("launch", {})).is_error is True
        await pre.reload(parse_policy(b"", "p.toml"))
        denied = await client.call_tool_mcp("launch", {})
    assert denial_of(denied) == UNMET
    assert ran == []
