"""Where `GuardedMCPServer` runs the guard: in its own `tools/call` handler (the innermost layer,
under any extension's interceptor), or, on an SDK that does not route `tools/call` to that handler,
through an interceptor extension; and a plain `MCPServer` guarded by `PreconditionsExtension`.
Driven by the SDK's own in-process client on both protocol versions.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolRequestParams

from mcp_preconditions.integrations import mcp_sdk
from mcp_preconditions.integrations._server import Preconditions
from mcp_preconditions.integrations.mcp_sdk import (
    EXTENSION_ID,
    GuardedMCPServer,
    PreconditionsExtension,
)
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import ALLOWED, DENIED, MODES, VERSIONS, small_guard

pytestmark = pytest.mark.integration

UNMET = {"error": "unmet_requirements", "tool": "closed_door",
         "unmet": ["env:staging", "auth:scope:mission:write"], "withheld": 1}


class Recording(Extension):
    """A user's own interceptor: sees every call before the guard does."""

    identifier = "com.example/recording"

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def intercept_tool_call(self, params: CallToolRequestParams,
                                  ctx: ServerRequestContext[Any, Any], call_next: Any
                                  ) -> HandlerResult:
        self.seen.append(params.name)
        result: HandlerResult = await call_next(ctx)
        return result


def doors(server: MCPServer[Any], ran: list[str], *, requirements: bool = True) -> None:
    def open_door() -> str:
        ran.append("open_door")
        return "opened"

    def closed_door() -> str:
        ran.append("closed_door")
        return "never"

    if isinstance(server, GuardedMCPServer) and requirements:
        server.add_tool(open_door, structured_output=False, requirements=ALLOWED)
        server.add_tool(closed_door, structured_output=False, requirements=DENIED)
    else:
        server.add_tool(open_door, structured_output=False)
        server.add_tool(closed_door, structured_output=False)


async def call_both(server: Any, version: str) -> tuple[Any, Any, Any]:
    async with Client(server, mode=MODES[version]) as client:
        opened = await client.call_tool("open_door", {})
        denied = await client.call_tool("closed_door", {})
        capabilities = client.server_capabilities
    return opened, denied, capabilities


def assert_advertised(capabilities: Any, version: str) -> None:
    """Our SEP-2133 extension's settings reach the client. Extensions are a 2026-era capability:
    the SDK advertises none at 2025-11-25."""
    if version == "2025-11-25":
        assert capabilities.extensions is None
    else:
        assert capabilities.extensions[EXTENSION_ID] == {"metaKey": META_KEY}


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_guard_runs_under_a_users_own_interceptor(version: str) -> None:
    seen: list[str] = []
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=small_guard(), extensions=[Recording(seen)])
    doors(server, ran)
    opened, denied, capabilities = await call_both(server, version)
    assert opened.is_error is False
    assert denied.is_error is True
    assert denied.structured_content == UNMET
    assert seen == ["open_door", "closed_door"]  # the interceptor saw both, the denied one too
    assert ran == ["open_door"]
    assert_advertised(capabilities, version)


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_guard_runs_in_the_servers_own_call_handler(version: str) -> None:
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=small_guard())
    doors(server, ran)
    entry = server._lowlevel_server.get_request_handler("tools/call")
    assert entry is not None and entry.handler == server._handle_call_tool
    opened, denied, capabilities = await call_both(server, version)
    assert (opened.is_error, denied.is_error, ran) == (False, True, ["open_door"])
    assert denied.structured_content == UNMET
    assert_advertised(capabilities, version)


@pytest.mark.parametrize("version", VERSIONS)
async def test_without_the_handler_hook_an_interceptor_guards_instead(
        version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_sdk, "_HANDLER_HOOK", False)
    ran: list[str] = []
    server = GuardedMCPServer("s", guard=small_guard())
    doors(server, ran)
    assert any(isinstance(e, PreconditionsExtension) for e in server._extensions)
    opened, denied, _ = await call_both(server, version)
    assert (opened.is_error, denied.is_error, ran) == (False, True, ["open_door"])
    assert denied.structured_content == UNMET


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_subclass_with_its_own_call_handler_is_still_guarded(version: str) -> None:
    class Custom(GuardedMCPServer):
        async def _handle_call_tool(self, ctx: Any, params: CallToolRequestParams) -> Any:
            return await MCPServer._handle_call_tool(self, ctx, params)  # skips ours

    ran: list[str] = []
    server = Custom("s", guard=small_guard())
    doors(server, ran)
    assert any(isinstance(e, PreconditionsExtension) for e in server._extensions)
    opened, denied, _ = await call_both(server, version)
    assert (opened.is_error, denied.is_error, ran) == (False, True, ["open_door"])
    assert denied.structured_content == UNMET


def test_a_server_whose_sdk_routes_tools_call_elsewhere_refuses_to_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Server, "get_request_handler", lambda self, method: None)
    with pytest.raises(RuntimeError) as raised:
        GuardedMCPServer("s", guard=small_guard())
    assert str(raised.value) == ("GuardedMCPServer: this mcp SDK does not route tools/call to "
                                 "MCPServer._handle_call_tool; refusing to serve tools unguarded")


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_plain_mcpserver_is_guarded_by_the_extension(version: str) -> None:
    ran: list[str] = []
    pre = Preconditions(small_guard())
    pre.add_tool("open_door", ALLOWED)
    pre.add_tool("closed_door", DENIED)
    server: MCPServer[Any] = MCPServer("s", extensions=[PreconditionsExtension(pre)],
                                       middleware=[pre])
    doors(server, ran)
    opened, denied, capabilities = await call_both(server, version)
    assert (opened.is_error, denied.is_error, ran) == (False, True, ["open_door"])
    assert denied.structured_content == UNMET
    assert_advertised(capabilities, version)
