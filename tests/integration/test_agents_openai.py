"""The OpenAI Agents SDK's real Agent, Runner and MCP servers (stdio and streamable HTTP), driven by
its ScriptedModel (no language model), against the guarded mission-control server as the observer:
the `tool_filter` follows SEP-2487's strict rule and denials teach the knowledge, never an `error`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from mcp_preconditions.client import Knowledge
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from tests.fixtures.mcp_servers import MISSION_POLICY, oidc_policy, serve_http
from tests.fixtures.oidc import OidcServer
from tests.fixtures.redis import RedisServer
from tests.integration.test_agents_servers import ALL_TOOLS, STATE_KEY, redis_down_policy, stdio_params

pytestmark = pytest.mark.integration
TRANSPORTS = ["stdio", "http"]
Server = MCPServerStdio | MCPServerStreamableHttp
NO_TRACES = RunConfig(tracing_disabled=True)


def offered(call: ModelCall) -> list[str]:
    return [tool.name for tool in call.tools]


def calling(*names: str) -> ModelStep:
    """A model step that calls `names` (all at once) with no arguments."""
    return ModelStep(output=[function_call(n, {}, call_id=f"call-{i}") for i, n in enumerate(names)])


def answer() -> ModelStep:
    return ModelStep(output=[assistant_message("done")])


@contextmanager
def guarded(transport: str, policy: Path, oidc: OidcServer | None) -> Iterator[Callable[
        [RequirementsFilter], Server]]:
    """A factory of Agents SDK MCP servers (with the filter's options) for the guarded server as the
    observer: a stdio subprocess, or `serve --transport http` verifying the observer's OIDC token."""
    if transport == "stdio":
        yield lambda rf: MCPServerStdio(stdio_params(policy), **rf.server_options())  # type: ignore[arg-type]
        return
    assert oidc is not None
    token = oidc.token("observer", scope="mission:read")
    with serve_http(policy) as server:
        params: Any = {"url": server.url, "headers": {"Authorization": f"Bearer {token}"}}
        yield lambda rf: MCPServerStreamableHttp(params, **rf.server_options())


@asynccontextmanager
async def agent_for(server: Server, steps: Sequence[ModelStep]) -> AsyncIterator[
        tuple[Agent[Any], ScriptedModel]]:
    model = ScriptedModel(steps)
    async with server:
        yield Agent(name="mission", model=model, mcp_servers=[server]), model


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def oidc(transport: str, request: pytest.FixtureRequest) -> OidcServer | None:
    """The session's OIDC provider, for the HTTP transport only (stdio callers are --claims)."""
    return request.getfixturevalue("oidc_server") if transport == "http" else None


def policy_for(directory: Path, oidc: OidcServer | None, extra: str = "") -> Path:
    source = MISSION_POLICY if oidc is None else oidc_policy(directory, oidc)
    path = directory / "mission.toml"
    path.write_text(source.read_text() + extra)
    return path


def without(*names: str) -> list[str]:
    return [n for n in ALL_TOOLS if n not in names]


async def test_the_model_is_never_offered_a_tool_the_knowledge_says_will_fail(
        tmp_path: Path, transport: str, oidc: OidcServer | None) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"], unsatisfiable=[
        "env:staging", "auth:claim:realm_roles:engineer", "feature:telemetry.v2"])
    with guarded(transport, policy_for(tmp_path, oidc), oidc) as make:
        async with agent_for(make(RequirementsFilter(knowledge)), [calling("get_weather"), answer()]) \
                as (agent, model):
            result = await Runner.run(agent, "go", run_config=NO_TRACES)
    assert result.final_output == "done"
    assert [offered(c) for c in model.calls] == [without("schedule_maintenance", "stream_telemetry_v2")] * 2


async def test_an_unknown_requirement_keeps_the_tool(
        tmp_path: Path, transport: str, oidc: OidcServer | None) -> None:
    knowledge = Knowledge(unsatisfiable=["env:staging", "feature:telemetry.v2"])  # others unknown
    with guarded(transport, policy_for(tmp_path, oidc), oidc) as make:
        async with agent_for(make(RequirementsFilter(knowledge)), [answer()]) as (agent, model):
            await Runner.run(agent, "go", run_config=NO_TRACES)
    assert offered(model.calls[0]) == list(ALL_TOOLS)


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_after_a_denial_the_next_run_hides_the_tool(
        tmp_path: Path, transport: str, oidc: OidcServer | None, denial: str) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    policy = policy_for(tmp_path, oidc, f'\n[guard]\ndenial = "{denial}"\n')
    with guarded(transport, policy, oidc) as make:
        steps = [calling("stream_telemetry_v2"), answer(), answer()]
        async with agent_for(make(RequirementsFilter(knowledge)), steps) as (agent, model):
            await Runner.run(agent, "go", run_config=NO_TRACES)
            await Runner.run(agent, "again", run_config=NO_TRACES)
    first, after_denial, next_run = (offered(c) for c in model.calls)
    assert first == list(ALL_TOOLS)
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert after_denial == next_run == without("stream_telemetry_v2")


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_a_backend_error_is_not_learned(
        tmp_path: Path, transport: str, oidc: OidcServer | None, denial: str,
        redis_factory: Callable[[], RedisServer]) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    policy = redis_down_policy(tmp_path, redis_factory, oidc, f'[guard]\ndenial = "{denial}"\n')
    with guarded(transport, policy, oidc) as make:
        # fuel_status: Redis is down (`error`); stream_telemetry_v2: its flag is off (learned).
        steps = [calling("fuel_status", "stream_telemetry_v2"), answer(), answer()]
        async with agent_for(make(RequirementsFilter(knowledge)), steps) as (agent, model):
            await Runner.run(agent, "go", run_config=NO_TRACES)
            await Runner.run(agent, "again", run_config=NO_TRACES)
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert STATE_KEY not in knowledge.learned()
    assert offered(model.calls[-1]) == without("stream_telemetry_v2")  # fuel_status still offered
