"""Argument conditions through a real MCP server and the SDK's own client: the same tool with two
argument sets is allowed once and denied once (the handler runs only for the allowed one), the
denial marks its argument-dependent requirement in `_meta`, and the filtering client never learns
it, so the tool stays offered afterwards. Both protocol versions, both denial forms.
"""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions import Credentials, Guard, Knowledge, Principal, parse_policy
from mcp_preconditions.client import ARGUMENT_DEPENDENT_META_KEY
from mcp_preconditions.integrations.client_mcp import RequirementsClient, denial_of
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from tests.fixtures.mcp_servers import MODES, VERSIONS

pytestmark = pytest.mark.integration

POLICY = b"""
environment = ["production"]
[[capabilities.grants]]
capabilities = ["rocket.launch"]
when = ["auth:claim:role:mission_control"]
arguments = { "/vehicle" = ["Falcon 9", "Starship"] }
"""
OPERATOR = Credentials(principal=Principal.from_claims({"sub": "alice", "role": "mission_control"}))


def launch_server(denial: str) -> tuple[GuardedMCPServer, list[str]]:
    launched: list[str] = []
    guard = Guard(parse_policy(POLICY + f'[guard]\ndenial = "{denial}"\n'.encode(), "p.toml"),
                  entry_points=False)
    server = GuardedMCPServer("range", guard=guard, credentials=lambda _request: OPERATOR)

    @server.tool(requirements=["env:production", "capability:rocket.launch"])
    def launch_rocket(vehicle: str) -> str:
        launched.append(vehicle)
        return f"{vehicle} has cleared the tower."

    return server, launched


@pytest.mark.parametrize("version", VERSIONS)
async def test_one_tool_two_argument_sets_and_nothing_wrongly_learned(version: str) -> None:
    server, launched = launch_server("result")
    knowledge = Knowledge(satisfied=["env:production"])
    async with Client(server, mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, knowledge)
        denied = await wrapped.call_tool("launch_rocket", {"vehicle": "Saturn V"})
        allowed = await wrapped.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
        after = await wrapped.list_tools()
    assert denied.is_error
    assert denial_of(denied) == {"error": "unmet_requirements", "tool": "launch_rocket",
                                 "unmet": ["capability:rocket.launch"], "withheld": 0}
    assert (denied.meta or {})[ARGUMENT_DEPENDENT_META_KEY] == ["capability:rocket.launch"]
    assert not allowed.is_error
    assert launched == ["Falcon 9"]  # the denied call never reached the handler
    assert knowledge.learned() == frozenset()
    assert after.names == ["launch_rocket"]  # still offered: other arguments are allowed


async def test_a_json_rpc_denial_is_not_learned_either() -> None:
    server, launched = launch_server("jsonrpc")
    knowledge = Knowledge()
    async with Client(server) as client:
        wrapped = RequirementsClient(client, knowledge)
        with pytest.raises(MCPError) as err:
            await wrapped.call_tool("launch_rocket", {"vehicle": "saturn5"})
        assert not (await wrapped.call_tool("launch_rocket", {"vehicle": "Starship"})).is_error
    assert err.value.data["_meta"][ARGUMENT_DEPENDENT_META_KEY] == ["capability:rocket.launch"]
    assert (launched, knowledge.learned()) == (["Starship"], frozenset())
