"""The agent-framework filters against a real MCP SDK server whose tool denies with a hand-built
SEP-2643 envelope (SPEC §15): pydantic-ai's Agent (FunctionModel) and the OpenAI Agents SDK's Agent
(ScriptedModel) hand the application the envelope, echo its context ID when the model retries the
same call (the server's log is the oracle), keep offering a tool whose `approval:` and `credential:`
requirements stay unknown, and learn only the rest.

In-process: the server (tests/fixtures/envelope_server.py, the SDK's lowlevel `Server`) served by its
own streamable HTTP app through the streaming bridge, which fastmcp's HTTP transport and the Agents
SDK's `MCPServerStreamableHttp` reach through their `httpx_client_factory`. Both frameworks' stdio
transports are tests/integration/test_agents_pydantic_ai.py's and test_agents_openai.py's interop rows.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStreamableHttp
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from fastmcp.client.transports import StreamableHttpTransport
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcp_preconditions.client import Knowledge
from mcp_preconditions.client_denials import DeniedCall
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from mcp_preconditions.integrations.pydantic_ai import mcp_toolset
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.envelope_server import URL, build
from tests.fixtures.hosted import httpx2_factory
from tests.fixtures.inprocess import BASE_URL

pytestmark = pytest.mark.integration
ARGS = {"env": "prod", "replicas": 3}
MCP_URL = f"{BASE_URL}/mcp"


@asynccontextmanager
async def envelope_server(log: Path) -> AsyncIterator[AsgiBridge]:
    """The envelope server's streamable HTTP app, recording each call in `log`, on a bridge."""
    async with AsgiBridge(build([], str(log)).streamable_http_app(), base_url=BASE_URL) as bridge:
        yield bridge


def server_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check(log: Path, heard: list[DeniedCall], knowledge: Knowledge) -> None:
    assert [(c["tool"], c["arguments"], c["echoed"]) for c in server_log(log)] == [
        ("deploy", ARGS, None), ("deploy", ARGS, "ctx-1")]
    assert len(heard) == 1 and heard[0].envelope is not None
    assert (heard[0].context_id, heard[0].envelope.urls) == ("ctx-1", (URL,))
    assert knowledge.learned() == {"env:staging"}


async def test_pydantic_ai_surfaces_the_envelope_and_echoes_on_the_retry(tmp_path: Path) -> None:
    log, knowledge = tmp_path / "calls.jsonl", Knowledge()
    heard: list[DeniedCall] = []
    offered: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered.append([t.name for t in info.function_tools])
        if len(messages) == 1:  # each run's first step calls deploy, with the same arguments
            return ModelResponse(parts=[ToolCallPart("deploy", dict(ARGS), tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    async with envelope_server(log) as bridge:
        transport = StreamableHttpTransport(MCP_URL, httpx_client_factory=httpx2_factory(bridge))
        toolset = mcp_toolset(transport, knowledge, on_denial=heard.append)
        agent = PydanticAgent(FunctionModel(model), toolsets=[toolset])
        async with agent:
            await agent.run("go")
            await agent.run("again")
    check(log, heard, knowledge)
    assert all("deploy" in names for names in offered)  # approval:/credential: stay unknown


async def test_openai_agents_surface_the_envelope_and_echo_on_the_retry(tmp_path: Path) -> None:
    log, knowledge = tmp_path / "calls.jsonl", Knowledge()
    heard: list[DeniedCall] = []
    rf = RequirementsFilter(knowledge, on_denial=heard.append)
    steps = [ModelStep(output=[function_call("deploy", dict(ARGS), call_id="c1")]),
             ModelStep(output=[assistant_message("done")])] * 2
    model = ScriptedModel(steps)
    async with envelope_server(log) as bridge:
        params: Any = {"url": MCP_URL, "httpx_client_factory": httpx2_factory(bridge)}
        async with MCPServerStreamableHttp(params, **rf.server_options()) as server:
            agent = Agent(name="ops", model=model, mcp_servers=[server])
            for prompt in ("go", "again"):
                await Runner.run(agent, prompt, run_config=RunConfig(tracing_disabled=True))
    check(log, heard, knowledge)
    assert all("deploy" in [t.name for t in call.tools] for call in model.calls)
