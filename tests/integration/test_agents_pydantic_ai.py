"""pydantic-ai's real Agent and MCPToolset, driven by a FunctionModel (no language model), against the
guarded mission-control server (`serve --transport stdio`, the observer): what the model is offered
follows SEP-2487's strict rule, and denials teach the knowledge, never a requirement that ended as
`error`.

In-process (tests/fixtures/hosted.py): `serve` wired from its command line, reached in memory by
fastmcp's client under the toolset. Interop, marked: the first test's `child` row, a real `serve`
child over fastmcp's stdio transport (what an agent launches; the lowest pass runs it on the oldest
pydantic-ai and fastmcp).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from mcp_preconditions.client import FilterMode, Knowledge
from mcp_preconditions.integrations.pydantic_ai import mcp_toolset
from tests.fixtures.hosted import redis_down, serving
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, ROOT, server_env
from tests.integration.test_agents_servers import (
    ALL_TOOLS,
    STATE_KEY,
    redis_down_policy,
    serve_args,
)

pytestmark = pytest.mark.integration

# The observer's truth for these two: stream_telemetry_v2 ["auth:oauth2", "feature:telemetry.v2"]
# and schedule_maintenance ["env:staging", "auth:claim:realm_roles:engineer"] are both denied.
KNOWS_TWO_FAIL = Knowledge(satisfied=["auth:oauth2"], unsatisfiable=[
    "env:staging", "auth:claim:realm_roles:engineer", "feature:telemetry.v2"])


@dataclass
class Script:
    """The body of a FunctionModel: records the tools offered at every step; on the first step of
    a run it calls `calls` (all at once), then answers with text. Keeps what the tools returned."""

    calls: Sequence[str] = ()
    offered: list[list[ToolDefinition]] = field(default_factory=list)
    returned: list[Any] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.offered.append(list(info.function_tools))
        if len(messages) == 1 and self.calls:
            return ModelResponse(parts=[ToolCallPart(name, {}, tool_call_id=f"call-{i}")
                                        for i, name in enumerate(self.calls)])
        self.returned += [p.content for p in messages[-1].parts
                          if isinstance(p, ToolReturnPart | RetryPromptPart)]
        return ModelResponse(parts=[TextPart("done")])

    def names(self, step: int = -1) -> list[str]:
        return [t.name for t in self.offered[step]]


def child_transport(policy: Path = MISSION_POLICY) -> StdioTransport:
    """A real `serve` child over fastmcp's stdio transport."""
    return StdioTransport(command=CLI[0], args=[*CLI[1:], "serve", *serve_args(policy)],
                          env=server_env(), cwd=str(ROOT))


async def run(script: Script, knowledge: Knowledge, runs: int = 1, mode: str = "hide",
              policy: Path = MISSION_POLICY, child: bool = False, **options: Any) -> None:
    """`runs` runs of one agent over one connection to the guarded server (in this process, or
    a `child`)."""
    if child:
        await _runs(mcp_toolset(child_transport(policy), knowledge, mode, **options), script, runs)
        return
    async with serving(*serve_args(policy)) as served:
        await _runs(mcp_toolset(served.server, knowledge, mode, **options), script, runs)


async def _runs(toolset: Any, script: Script, runs: int) -> None:
    agent = Agent(FunctionModel(script), toolsets=[toolset])
    async with agent:
        for _ in range(runs):
            await agent.run("go")
            script.calls = ()  # later runs only look


def without(*names: str) -> list[str]:
    return [n for n in ALL_TOOLS if n not in names]


@pytest.mark.parametrize("child", [False, pytest.param(True, marks=pytest.mark.interop)],
                         ids=["in-process", "child"])
async def test_the_model_is_never_offered_a_tool_the_knowledge_says_will_fail(child: bool) -> None:
    """The `child` row: a real `serve` child over fastmcp's stdio transport."""
    script = Script(calls=["get_weather"])
    await run(script, KNOWS_TWO_FAIL, child=child)
    assert len(script.offered) == 2  # the step that called get_weather, and the final one
    assert all(script.names(step) == without("schedule_maintenance", "stream_telemetry_v2")
               for step in range(2))
    assert script.returned == ["Clear skies, wind 5 kn from the west."]


@pytest.mark.parametrize(("mode", "expected"), [
    ("demote", [*without("schedule_maintenance", "stream_telemetry_v2"),
                "schedule_maintenance", "stream_telemetry_v2"]),
    ("annotate", list(ALL_TOOLS))])
async def test_demote_offers_failures_last_and_annotate_describes_them(
        mode: str, expected: list[str]) -> None:
    script = Script()
    await run(script, KNOWS_TWO_FAIL, mode=mode)
    assert script.names() == expected
    descriptions = {t.name: t.description for t in script.offered[-1]}
    note = "\n\n[Will fail: the client knows these requirements are not met: "
    if mode == FilterMode.ANNOTATE:
        assert descriptions["schedule_maintenance"] == (
            "Book a maintenance window on the pad." + note + "env:staging, auth:claim:realm_roles:engineer]")
        assert descriptions["stream_telemetry_v2"] == (
            "Stream telemetry over the v2 protocol." + note + "feature:telemetry.v2]")
    else:
        assert descriptions["schedule_maintenance"] == "Book a maintenance window on the pad."
    assert descriptions["get_weather"] == "Current weather at the launch site. Anyone may call it."


async def test_an_unknown_requirement_keeps_the_tool() -> None:
    # auth:oauth2 and auth:claim:realm_roles:engineer are unknown: both tools stay.
    knowledge = Knowledge(unsatisfiable=["env:staging", "feature:telemetry.v2"])
    script = Script()
    await run(script, knowledge)
    assert script.names() == list(ALL_TOOLS)


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_after_a_denial_the_next_run_hides_the_tool(tmp_path: Path, denial: str) -> None:
    policy = tmp_path / "mission.toml"
    policy.write_text(MISSION_POLICY.read_text() + f'\n[guard]\ndenial = "{denial}"\n')
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    script = Script(calls=["stream_telemetry_v2"])
    await run(script, knowledge, runs=2, policy=policy)
    assert script.names(0) == list(ALL_TOOLS)  # feature:telemetry.v2 was unknown
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert script.names(1) == script.names(2) == without("stream_telemetry_v2")
    assert len(script.returned) == 1 and "feature:telemetry.v2" in str(script.returned[0])


@pytest.mark.parametrize("denial", ["result", "jsonrpc"])
async def test_a_backend_error_is_not_learned(tmp_path: Path, denial: str) -> None:
    knowledge = Knowledge(satisfied=["auth:oauth2"])
    # Both are denied in the same step: fuel_status because Redis is down (`error`),
    # stream_telemetry_v2 because its flag is off (unsatisfied, learned).
    script = Script(calls=["fuel_status", "stream_telemetry_v2"])
    with redis_down() as url:
        policy = redis_down_policy(tmp_path, url, extra=f'[guard]\ndenial = "{denial}"\n')
        await run(script, knowledge, runs=2, policy=policy)
    assert knowledge.learned() == {"feature:telemetry.v2"}
    assert STATE_KEY not in knowledge.learned()
    assert script.names(-1) == without("stream_telemetry_v2")  # fuel_status is still offered
    assert len(script.returned) == 2
