"""The guarded servers the agent-framework tests talk to: `mcp-preconditions serve` over stdio as the
observer of policies/mission-control.toml, and the same policy with its state in a Redis that refuses
connections (so a denial carries an `error`). The tests here prove those servers behave as the others
assume.

In-process (tests/fixtures/hosted.py): `serve` wired from its command line, its client in memory;
"Redis" a port of 127.0.0.1 held bound and never listening (every connection refused, as a Redis that
is down). A real `serve` child over stdio is tests/integration/test_mcp_stdio.py's interop rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_preconditions.client import DENIAL_ERRORS_META_KEY, Knowledge
from mcp_preconditions.integrations.client_mcp import RequirementsClient, denial_of
from tests.fixtures.hosted import redis_down, serving
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, ROOT, server_env

pytestmark = pytest.mark.integration

OBSERVER = ROOT / "examples" / "claims" / "observer.json"
# The observer (bob) may call these; every other tool of the mission-control server is denied.
ALLOWED = ("read_telemetry", "get_weather")
ALL_TOOLS = ("launch_rocket", "abort_launch", "read_telemetry", "schedule_maintenance",
             "stream_telemetry_v2", "fuel_status", "get_weather")
STATE_KEY = "state:range.safety_officer_on_duty"  # fuel_status: ["auth:oauth2", STATE_KEY]


def serve_args(policy: Path = MISSION_POLICY) -> list[str]:
    """`serve`'s arguments for the guarded stdio server, caller = observer."""
    return ["--policy", str(policy), "--transport", "stdio", "--claims", str(OBSERVER)]


def stdio_params(policy: Path = MISSION_POLICY) -> dict[str, object]:
    """`serve_args` as the parameters of an MCP stdio client starting a real child (the Agents
    SDK's MCPServerStdio)."""
    return {"command": CLI[0], "args": [*CLI[1:], "serve", *serve_args(policy)], "env": server_env(),
            "cwd": str(ROOT)}


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The URL of a Redis that is down (tests/fixtures/hosted.py `redis_down`)."""
    with redis_down() as url:
        yield url


def redis_down_policy(directory: Path, redis_url: str, extra: str = "",
                      source: Path = MISSION_POLICY) -> Path:
    """`source` (policies/mission-control.toml, or a copy of it) with the safety officer's state in
    the Redis at `redis_url`, which is down: every lookup of STATE_KEY ends as `error`. `extra` is
    appended (e.g. a `[guard]` table)."""
    text = source.read_text(encoding="utf-8")
    static = '"range.safety_officer_on_duty" = false\n'
    assert static in text
    text = text.replace(static, "") + f'\n[state.redis]\nurl = "{redis_url}"\n' + extra
    path = directory / "mission-control-redis-down.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def test_the_observer_server_denies_all_but_two_tools() -> None:
    async with serving(*serve_args()) as served, served.client() as client:
        wrapped = RequirementsClient(client, Knowledge())
        names = (await wrapped.list_tools()).names
        results = {name: await wrapped.call_tool(name) for name in ALL_TOOLS
                   if name != "launch_rocket"}  # it needs arguments
    assert tuple(names) == ALL_TOOLS
    assert [n for n, r in results.items() if not r.is_error] == list(ALLOWED)
    assert denial_of(results["stream_telemetry_v2"]) == {
        "error": "unmet_requirements", "tool": "stream_telemetry_v2", "unmet": ["feature:telemetry.v2"],
        "withheld": 0}


async def test_with_redis_down_the_state_lookup_ends_as_error(tmp_path: Path, redis_url: str) -> None:
    policy = redis_down_policy(tmp_path, redis_url)
    async with serving(*serve_args(policy)) as served, served.client() as client:
        wrapped = RequirementsClient(client, Knowledge())
        denied = await wrapped.call_tool("fuel_status")
    assert denial_of(denied) == {"error": "unmet_requirements", "tool": "fuel_status",
                                 "unmet": [STATE_KEY], "withheld": 0}
    assert denied.meta is not None and denied.meta[DENIAL_ERRORS_META_KEY] == [STATE_KEY]
    assert wrapped.learned() == []
