"""Both agent adapters meet a real quota denial and learn nothing from it: pydantic-ai's
`LearningClient` calling a guarded fastmcp app, and the openai-agents `RequirementsFilter` hooks fed
the raw result (and the JSON-RPC error) of a guarded MCP server; afterwards both still offer the tool.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from agents import Agent, RunContextWrapper
from agents.mcp import MCPToolCustomDataContext, ToolFilterContext
from fastmcp import FastMCP
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Tool

from mcp_preconditions import Credentials, Guard, Knowledge, Principal, parse_policy
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from mcp_preconditions.integrations.pydantic_ai import LearningClient

pytestmark = pytest.mark.integration

POLICY = b"""
environment = ["production"]
[quotas.once]
calls = 1
per_seconds = 3600
by = "global"
"""
REQUIREMENTS = ["env:production", "quota:once"]
RUN = RunContextWrapper(context=None)


def guard(denial: str = "result") -> Guard:
    return Guard(parse_policy(POLICY + f'[guard]\ndenial = "{denial}"\n'.encode(), "q.toml"),
                 entry_points=False)


async def test_pydantic_ai_learning_client_learns_nothing_from_a_used_up_quota() -> None:
    app: FastMCP[Any] = FastMCP("range")
    pre = guard_fastmcp(app, guard())

    @app.tool(output_schema=None)
    @pre.requires(*REQUIREMENTS)
    def launch() -> str:
        return "launched"

    knowledge = Knowledge(satisfied=["env:production"])
    async with LearningClient(app, knowledge=knowledge) as client:
        assert not (await client.call_tool_mcp("launch", {})).is_error
        denied = await client.call_tool_mcp("launch", {})
    assert denied.is_error and denied.structured_content is not None
    assert denied.structured_content["unmet"] == ["quota:once"]
    assert denied.structured_content["retry_after_seconds"] > 3500
    assert knowledge.learned() == frozenset()


def mcp_server(denial: str) -> GuardedMCPServer:
    app = GuardedMCPServer("range", guard=guard(denial), credentials=lambda _r: Credentials(
        principal=Principal.from_claims({"sub": "alice"})))

    @app.tool(requirements=REQUIREMENTS)
    def launch() -> str:
        return "launched"

    return app


async def test_openai_agents_hooks_learn_nothing_from_a_used_up_quota() -> None:
    rf = RequirementsFilter(Knowledge(satisfied=["env:production"]))
    async with Client(mcp_server("result")) as client:
        await client.call_tool("launch", {})
        denied = await client.call_tool("launch", {})
        listed = (await client.list_tools()).tools
    rf.learn(MCPToolCustomDataContext(
        run_context=RUN, server_name="s", tool_name="launch", tool_display_name="launch",
        arguments=MappingProxyType({}), tool_output="text", is_error=denied.is_error,
        result_meta=MappingProxyType(dict(denied.meta or {})),
        structured_content=MappingProxyType(dict(denied.structured_content or {}))))
    assert denied.is_error and rf.knowledge.learned() == frozenset()
    context = ToolFilterContext(run_context=RUN, agent=Agent(name="a"), server_name="s")
    assert rf(context, Tool.model_validate(listed[0].model_dump(by_alias=True))) is True


async def test_openai_agents_learn_nothing_from_a_json_rpc_quota_denial() -> None:
    rf = RequirementsFilter(Knowledge(satisfied=["env:production"]))
    async with Client(mcp_server("jsonrpc")) as client:
        await client.call_tool("launch", {})
        with pytest.raises(MCPError) as raised:
            await client.call_tool("launch", {})
    answer = await rf.failure_error_function(RUN, raised.value)
    assert isinstance(answer, str) and rf.knowledge.learned() == frozenset()

