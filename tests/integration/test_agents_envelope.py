"""The agent-framework filters against a real MCP SDK server over stdio whose tool denies with a
hand-built SEP-2643 envelope (SPEC §15): pydantic-ai's Agent (FunctionModel) and the OpenAI Agents
SDK's Agent (ScriptedModel) hand the application the envelope, echo its context ID when the model
retries the same call (the server's log is the oracle), keep offering a tool whose `approval:` and
`credential:` requirements stay unknown, and learn only the rest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStdio
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from mcp_preconditions.client import Knowledge
from mcp_preconditions.client_denials import DeniedCall
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from mcp_preconditions.integrations.pydantic_ai import mcp_toolset
from tests.fixtures.envelope_server import URL
from tests.fixtures.mcp_servers import ROOT, server_env

pytestmark = pytest.mark.integration
ARGS = {"env": "prod", "replicas": 3}
COMMAND = [sys.executable, "-m", "tests.fixtures.envelope_server"]


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

    transport = StdioTransport(command=COMMAND[0], args=COMMAND[1:], cwd=str(ROOT),
                               env=server_env(ENVELOPE_LOG=str(log)))
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
    params: Any = {"command": COMMAND[0], "args": COMMAND[1:], "cwd": str(ROOT),
                   "env": server_env(ENVELOPE_LOG=str(log))}
    steps = [ModelStep(output=[function_call("deploy", dict(ARGS), call_id="c1")]),
             ModelStep(output=[assistant_message("done")])] * 2
    model = ScriptedModel(steps)
    async with MCPServerStdio(params, **rf.server_options()) as server:
        agent = Agent(name="ops", model=model, mcp_servers=[server])
        for prompt in ("go", "again"):
            await Runner.run(agent, prompt, run_config=RunConfig(tracing_disabled=True))
    check(log, heard, knowledge)
    assert all("deploy" in [t.name for t in call.tools] for call in model.calls)
