"""Issue 11's fail-open findings for the hosted adapters, through the SDK's own in-process client:
a duplicate tool name never weakens a tool's requirements, whatever a tool advertises (its `_meta`
mirror) is enforced even before any `tools/list`, and a near-miss policy tool name is refused.
"""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from fastmcp import FastMCP
from mcp import Client
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError

from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import (
    GuardedMCPServer,
    Preconditions,
    PreconditionsExtension,
    guard_server,
    requires,
)
from mcp_preconditions.policy.load import load_policy, parse_policy
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import MODES, VERSIONS, raw_tools

pytestmark = pytest.mark.integration

STAGING = b'environment = ["staging"]\n'
PROD = ["env:production"]


def staging_guard(extra: bytes = b"") -> Guard:
    return Guard(parse_policy(STAGING + extra, "policy.toml"), entry_points=False)


def unmet(result: Any) -> list[str] | None:
    """The unmet list of a denial (None: the call was allowed), wherever the tool's shape puts it
    (`_meta` for a tool with an outputSchema, as every `-> str` tool of MCPServer and fastmcp)."""
    if not result.is_error:
        return None
    denial = denial_of(result)
    assert denial is not None, result
    return list(denial["unmet"])


def advertised(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool name -> (execution.requirements, the _meta mirror) as listed on the wire."""
    return {t["name"]: ((t.get("execution") or {}).get("requirements"),
                        (t.get("_meta") or {}).get(META_KEY)) for t in tools}


def lowlevel(tools: list[dict[str, Any]], ran: list[str], *, page: int = 0) -> Server[Any]:
    """A lowlevel Server listing `tools` (`page` > 0: that many per page) and recording calls."""

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + page if page else len(tools)
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool.model_validate(t) for t in tools[start:end]],
            next_cursor=str(end) if end < len(tools) else None)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        ran.append(params.name)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ran")])

    return Server("s", on_list_tools=list_tools, on_call_tool=call_tool)


def tool(name: str, mirror: Any = None) -> dict[str, Any]:
    meta = {"_meta": {META_KEY: mirror}} if mirror is not None else {}
    return {"name": name, "inputSchema": {"type": "object"}, **meta}


# --- 1. a duplicate tool name ----------------------------------------------------------------------
@pytest.mark.parametrize("weaker", [None, ["env:staging"]])
async def test_a_duplicate_name_on_guarded_mcpserver_raises_and_the_first_stays_guarded(
        weaker: list[str] | None) -> None:
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=staging_guard())

    @server.tool(requirements=PROD)
    def launch_rocket() -> str:
        ran.append("first")
        return "launched"

    def other() -> str:
        ran.append("other")
        return "other"

    with pytest.raises(ValueError, match="tool 'launch_rocket' is already registered"):
        server.add_tool(other, name="launch_rocket", requirements=weaker)
    assert server.guard.requirements_for("launch_rocket") == ("env:production",)
    async with Client(server) as client:
        result = await client.call_tool("launch_rocket", {})
    assert unmet(result) == PROD
    assert ran == []


async def test_guard_server_declarations_for_one_name_add_up() -> None:
    ran: list[str] = []
    server = lowlevel([tool("launch_rocket")], ran)
    pre = guard_server(server, staging_guard(), requirements={"launch_rocket": PROD})
    pre.requires("env:staging", name="launch_rocket")(lambda: None)
    pre.add_tool("launch_rocket", [])  # a later, weaker declaration drops nothing
    async with Client(server) as client:
        result = await client.call_tool("launch_rocket", {})
    assert unmet(result) == PROD
    assert ran == []


@pytest.mark.parametrize("on_duplicate", ["warn", "replace", "ignore"])
async def test_a_duplicate_fastmcp_tool_is_held_to_the_requirements_of_the_one_that_runs(
        on_duplicate: Any) -> None:
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s", on_duplicate=on_duplicate)
    pre = guard_fastmcp(app, staging_guard(), requirements={"launch_rocket": ["env:moon"]})

    @pre.requires(*PROD)
    def first() -> str:
        ran.append("first")
        return "first"

    @pre.requires("env:mars")
    def second() -> str:
        ran.append("second")
        return "second"

    app.tool(name="launch_rocket")(first)
    app.tool(name="launch_rocket")(second)
    pre.add_tool("launch_rocket", [])  # drops nothing
    async with Client(app._mcp_server) as client:
        result = await client.call_tool("launch_rocket", {})
    runs = "first" if on_duplicate == "ignore" else "second"
    assert set(unmet(result) or ()) >= {"env:moon", *(PROD if runs == "first" else ["env:mars"])}
    assert ran == []


# --- 2. advertised on the wire = enforced -----------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
async def test_a_mirror_set_through_mcpserver_meta_is_enforced_before_any_list(version: str) -> None:
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=staging_guard())

    @server.tool(meta={META_KEY: PROD})
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with Client(server, mode=MODES[version]) as client:
        before = await client.call_tool("launch_rocket", {})
        listed = advertised(await raw_tools(client.session))
        after = await client.call_tool("launch_rocket", {})
    assert unmet(before) == unmet(after) == PROD
    assert listed == {"launch_rocket": (PROD, PROD)}
    assert ran == []


async def test_a_mirror_on_a_tool_given_to_the_constructor_is_enforced() -> None:
    ran: list[str] = []

    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    server = GuardedMCPServer("s", guard=staging_guard(),
                              tools=[Tool.from_function(launch_rocket, meta={META_KEY: PROD})])
    async with Client(server) as client:
        result = await client.call_tool("launch_rocket", {})
    assert unmet(result) == PROD
    assert ran == []


@pytest.mark.parametrize(("mirror", "found"), [("env:production", "str"), ([1], "list"),
                                              ({"a": 1}, "dict")])
def test_a_malformed_mirror_refuses_the_registration(mirror: Any, found: str) -> None:
    server = GuardedMCPServer("s", guard=staging_guard())
    with pytest.raises(RequirementError) as bad:
        server.tool(name="launch_rocket", meta={META_KEY: mirror})(lambda: "x")
    assert str(bad.value) == (f"tool 'launch_rocket': _meta['{META_KEY}'] must be a list of "
                              f"requirement strings, not {found}")
    with pytest.raises(RequirementError, match="tool 'launch_rocket': requirement 'nope:x'"):
        server.add_tool(lambda: "x", name="launch_rocket", meta={META_KEY: ["nope:x"]})
    assert server.guard.requirements_for("launch_rocket") == ()
    assert server._tool_manager.get_tool("launch_rocket") is None  # nothing was registered


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_mirror_set_through_fastmcp_meta_is_enforced_before_any_list(version: str) -> None:
    ran: list[str] = []
    app: FastMCP[Any] = FastMCP("s")
    guard_fastmcp(app, staging_guard())

    @app.tool(meta={META_KEY: PROD})
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with Client(app._mcp_server, mode=MODES[version]) as client:
        before = await client.call_tool("launch_rocket", {})
        listed = advertised(await raw_tools(client.session))
    assert unmet(before) == PROD
    assert listed["launch_rocket"] == (PROD, PROD)
    assert ran == []


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_lowlevel_list_handlers_mirror_is_enforced_before_any_list(version: str) -> None:
    ran: list[str] = []
    tools = [tool("a"), tool("b"), tool("launch_rocket", PROD)]
    server = lowlevel(tools, ran, page=2)  # the tool is on the second page
    guard_server(server, staging_guard())
    async with Client(server, mode=MODES[version]) as client:
        before = await client.call_tool("launch_rocket", {})
        open_ = await client.call_tool("a", {})
    assert unmet(before) == PROD
    assert unmet(open_) is None
    assert ran == ["a"]


async def test_a_lowlevel_tool_with_a_malformed_mirror_is_refused_and_never_run() -> None:
    """What the gateway does with a server's unreadable list (SPEC §10): the tool is listed without
    requirements, its calls are refused, and the other tools work."""
    ran: list[str] = []
    server = lowlevel([tool("launch_rocket", "env:production"), tool("a")], ran)
    guard_server(server, staging_guard())
    async with Client(server) as client:
        refused = await client.call_tool("launch_rocket", {})
        listed = advertised(await raw_tools(client.session))
        open_ = await client.call_tool("a", {})
    assert unmet(refused) == ["(malformed requirements)"]
    assert listed == {"launch_rocket": (None, None), "a": (None, None)}
    assert unmet(open_) is None
    assert ran == ["a"]


def failing_list(ran: list[str], how: str) -> Server[Any]:
    """A lowlevel Server whose list handler raises, or whose cursors never end."""

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        if how == "raises":
            raise RuntimeError("the tool registry is down")
        return mcp_types.ListToolsResult(tools=[], next_cursor="again")

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        ran.append(params.name)
        return mcp_types.CallToolResult(content=[])

    return Server("s", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.mark.parametrize(("how", "message"), [
    ("raises", "Internal"),
    ("never ends", "the guard could not read the server's tools: tools/list has more than 1000 pages")])
async def test_a_lowlevel_list_that_cannot_be_read_refuses_the_call(how: str, message: str) -> None:
    ran: list[str] = []
    server = failing_list(ran, how)
    guard_server(server, staging_guard())
    async with Client(server) as client:
        with pytest.raises(MCPError, match=message):
            await client.call_tool("launch_rocket", {})
    assert ran == []


async def test_a_plain_mcpserver_guarded_by_hand_enforces_its_mirror_before_any_list() -> None:
    ran: list[str] = []
    pre = Preconditions(staging_guard())
    server: MCPServer[Any] = MCPServer("s", extensions=[PreconditionsExtension(pre)],
                                       middleware=[pre])

    @server.tool(meta={META_KEY: PROD})
    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    async with Client(server) as client:
        result = await client.call_tool("launch_rocket", {})
    assert unmet(result) == PROD
    assert ran == []


# --- 4. a near-miss policy tool name ----------------------------------------------------------------
NEAR_MISS = b'[tools.Launch_Rocket]\nrequirements = ["env:production"]\n'


def flavours(guard: Guard, ran: list[str]) -> dict[str, tuple[Any, Preconditions]]:
    """The same `launch_rocket` (no requirements in code) on each hosted adapter."""

    def launch_rocket() -> str:
        ran.append("launch")
        return "launched"

    mcpserver = GuardedMCPServer("s", guard=guard)
    mcpserver.add_tool(launch_rocket)
    server = lowlevel([tool("launch_rocket")], ran)
    app: FastMCP[Any] = FastMCP("s")
    fast = guard_fastmcp(app, guard)
    app.tool(launch_rocket)
    return {"MCPServer": (mcpserver, mcpserver.preconditions),
            "lowlevel": (server, guard_server(server, guard)),
            "fastmcp": (app._mcp_server, fast)}


@pytest.mark.parametrize("flavour", ["MCPServer", "lowlevel", "fastmcp"])
async def test_a_near_miss_policy_name_refuses_every_call_and_says_why(
        flavour: str, caplog: pytest.LogCaptureFixture) -> None:
    """As the gateway does (SPEC §10): the server lists its tools, refuses every call with the
    unusable policy's one line (naming neither the policy nor its entries), and logs why."""
    ran: list[str] = []
    target, _ = flavours(staging_guard(NEAR_MISS), ran)[flavour]
    async with Client(target) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        refused = await client.call_tool("launch_rocket", {})
    assert listed == ["launch_rocket"]
    assert refused.is_error is True
    assert refused.structured_content is None and denial_of(refused) is None
    texts = [c.text if isinstance(c, mcp_types.TextContent) else c for c in refused.content]
    assert texts == ["the server's policy is unusable"]
    assert ran == []
    assert 'tools."Launch_Rocket": names no tool, but nearly matches the tool "launch_rocket"' in (
        caplog.text)


@pytest.mark.parametrize("flavour", ["MCPServer", "lowlevel", "fastmcp"])
async def test_a_reload_to_a_near_miss_keeps_the_old_policy(flavour: str) -> None:
    ran: list[str] = []
    guard = staging_guard(b'[tools.launch_rocket]\nrequirements = ["env:production"]\n')
    target, pre = flavours(guard, ran)[flavour]
    revision = guard.revision
    async with Client(target) as client:
        assert unmet(await client.call_tool("launch_rocket", {})) == PROD  # the tools are known
        with pytest.raises(Exception, match="nearly matches"):
            await pre.reload(parse_policy(STAGING + NEAR_MISS, "policy.toml"))
        assert guard.revision == revision
        assert unmet(await client.call_tool("launch_rocket", {})) == PROD
    assert ran == []


async def test_the_policy_reloader_keeps_the_old_policy_on_a_near_miss(tmp_path: Any) -> None:
    ran: list[str] = []
    path = tmp_path / "policy.toml"
    path.write_bytes(STAGING + b'[tools.launch_rocket]\nrequirements = ["env:production"]\n')
    guard = Guard(load_policy(path), entry_points=False)
    target, _ = flavours(guard, ran)["MCPServer"]
    reloader = PolicyReloader(guard, path)
    revision = guard.revision
    async with Client(target) as client:
        await client.list_tools()  # the server's tools are known from here on
        path.write_bytes(STAGING + NEAR_MISS.replace(b"Launch_Rocket", b'"launch_rocket "'))
        assert reloader.reload() is None
        assert reloader.last_error is not None
        assert 'tools."launch_rocket ": names no tool, but nearly matches the tool ' \
               '"launch_rocket"' in reloader.last_error
        assert guard.revision == revision
        assert unmet(await client.call_tool("launch_rocket", {})) == PROD
    assert ran == []


@requires("env:staging")
def _marked() -> str:  # a module-level function: `requires` marks it once
    return "marked"


async def test_a_policy_name_matching_no_tool_is_a_warning_only(
        caplog: pytest.LogCaptureFixture) -> None:
    server = GuardedMCPServer("s", guard=staging_guard(b'[tools.fuel]\nrequirements = ["env:x"]\n'))
    server.add_tool(_marked, name="launch_rocket")
    async with Client(server) as client:
        result = await client.call_tool("launch_rocket", {})
    assert result.is_error is False
    assert "policy.toml: tools.fuel: names no tool of this server" in caplog.text
