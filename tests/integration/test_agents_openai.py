"""The OpenAI Agents SDK's real Agent, Runner and MCP servers (streamable HTTP and stdio), driven by
its ScriptedModel (no language model), against the guarded mission-control server as the observer:
the `tool_filter` follows SEP-2487's strict rule and denials teach the knowledge, never an `error`.

In-process (tests/fixtures/hosted.py): `serve --transport http` wired from its command line, the
SDK's `MCPServerStreamableHttp` on its app through the streaming bridge (its `httpx_client_factory`),
the observer's token signed in this process. Interop, marked: the `stdio` rows of the denial test, a
real `serve` child over the SDK's `MCPServerStdio` (the caller from --claims; the lowest pass runs it
on the oldest Agents SDK).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from mcp_preconditions.client import Knowledge
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from tests.fixtures.hosted import ISSUER, local_policy, redis_down, serving
from tests.fixtures.mcp_servers import MISSION_POLICY
from tests.integration.test_agents_servers import ALL_TOOLS, STATE_KEY, redis_down_policy, stdio_params

pytestmark = pytest.mark.integration
Server = MCPServerStdio | MCPServerStreamableHttp
NO_TRACES = RunConfig(tracing_disabled=True)
STDIO = pytest.param("stdio", marks=pytest.mark.interop)


def offered(call: ModelCall) -> list[str]:
    return [tool.name for tool in call.tools]


def calling(*names: str) -> ModelStep:
    """A model step that calls `names` (all at once) with no arguments."""
    return ModelStep(output=[function_call(n, {}, call_id=f"call-{i}") for i, n in enumerate(names)])


def answer() -> ModelStep:
    return ModelStep(output=[assistant_message("done")])


@asynccontextmanager
async def guarded(transport: str, policy: Path) -> AsyncIterator[Callable[[RequirementsFilter], Server]]:
    """A factory of Agents SDK MCP servers (with the filter's options) for the guarded server as the
    observer: `serve --transport http` in this process verifying the observer's token, or a real
    stdio child (the observer from --claims)."""
    if transport == "stdio":
        # work bound: the SDK's 5 s read timeout also covers the child's start (a Python import),
        # which took longer under CI's load (stop 47: `initialize` timed out).
        yield lambda rf: MCPServerStdio(stdio_params(policy), client_session_timeout_seconds=60,  # type: ignore[arg-type]
                                        **rf.server_options())
        return
    async with serving("--policy", str(policy), "--transport", "http") as served:
        params: Any = {"url": served.url,
                       "httpx_client_factory": served.factory(ISSUER.token("observer", scope="mission:read"))}
        yield lambda rf: MCPServerStreamableHttp(params, **rf.server_options())


@asynccontextmanager
async def agent_for(server: Server, steps: Sequence[ModelStep]) -> AsyncIterator[
        tuple[Agent[Any], ScriptedModel]]:
    model = ScriptedModel(steps)
    async with server:
        yield Agent(name="mission", model=model, mcp_servers=[server]), model


def policy_for(directory: Path, transport: str, extra: str = "") -> Path:
    """Mission control's policy: verifying the issuer's tokens over HTTP (a stdio caller's claims
    are --claims)."""
    if transport == "http":
        return local_policy(directory, extra)
    path = directory / "mission.toml"
    path.write_text(MISSION_POLICY.read_text() + extra)
    return path


def without(*names: str) -> list[str]:
    return [n for n in ALL_TOOLS if n not in names]


async def test_the_model_is_never_offered_a_tool_the_knowledge_says_will_fail(tmp_path: Path) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"], unsatisfiable=[
        "env:staging", "auth:claim:realm_roles:engineer", "feature:telemetry.v2"])
    steps = [calling("get_weather"), answer()]
    async with guarded("http", policy_for(tmp_path, "http")) as make, \
            agent_for(make(RequirementsFilter(knowledge)), steps) as (agent, model):
        result = await Runner.run(agent, "go", run_config=NO_TRACES)
    assert result.final_output == "done"
    assert [offered(c) for c in model.calls] == [without("schedule_maintenance", "stream_telemetry_v2")] * 2


async def test_an_unknown_requirement_keeps_the_tool(tmp_path: Path) -> None:
    knowledge = Knowledge(unsatisfiable=["env:staging", "feature:telemetry.v2"])  # others unknown
    async with guarded("http", policy_for(tmp_path, "http")) as make, \
            agent_for(make(RequirementsFilter(knowledge)), [answer()]) as (agent, model):
        await Runner.run(agent, "go", run_config=NO_TRACES)
    assert offered(model.calls[0]) == list(ALL_TOOLS)


@pytest.mark.parametrize("transport", ["http", STDIO])
@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_after_a_denial_the_next_run_hides_the_tool(tmp_path: Path, transport: str,
                                                          denial: str) -> None:
    """The `stdio` rows: a real `serve` child over the SDK's `MCPServerStdio`."""
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    policy = policy_for(tmp_path, transport, f'\n[guard]\ndenial = "{denial}"\n')
    async with guarded(transport, policy) as make:
        steps = [calling("stream_telemetry_v2"), answer(), answer()]
        async with agent_for(make(RequirementsFilter(knowledge)), steps) as (agent, model):
            await Runner.run(agent, "go", run_config=NO_TRACES)
            await Runner.run(agent, "again", run_config=NO_TRACES)
    first, after_denial, next_run = (offered(c) for c in model.calls)
    assert first == list(ALL_TOOLS)
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert after_denial == next_run == without("stream_telemetry_v2")


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_a_backend_error_is_not_learned(tmp_path: Path, denial: str) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    with redis_down() as url:
        policy = redis_down_policy(tmp_path, url, f'[guard]\ndenial = "{denial}"\n',
                                   source=local_policy(tmp_path))
        # fuel_status: Redis is down (`error`); stream_telemetry_v2: its flag is off (learned).
        steps = [calling("fuel_status", "stream_telemetry_v2"), answer(), answer()]
        async with guarded("http", policy) as make, \
                agent_for(make(RequirementsFilter(knowledge)), steps) as (agent, model):
            await Runner.run(agent, "go", run_config=NO_TRACES)
            await Runner.run(agent, "again", run_config=NO_TRACES)
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert STATE_KEY not in knowledge.learned()
    assert offered(model.calls[-1]) == without("stream_telemetry_v2")  # fuel_status still offered
