"""The shipped `policies/mission-control-live.toml` against a real redis-server and flagd file provider.

The policy and its flag file are copied next to each other, with only the Redis URL pointed at the
test's server; everything else is exactly what ships, but for the tests that expect Redis to answer:
their timeouts are raised for two loaded cores (the shipped 0.25 s read and 0.5 s lookup deny a call
whose read is slow only because of the load). The test of a stopped Redis keeps the shipped ones.

Interop: Redis is the component under test (the shipped policy's live facts, a paused server within
the shipped timeouts), so a real redis-server runs; the guard is in this process, the flagd file
provider too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_preconditions import Guard, Identity, Principal, load_policy
from tests.fixtures.redis import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]
POLICIES = Path(__file__).resolve().parents[2] / "policies"
ALICE = Identity(principal=Principal.from_claims({"sub": "alice", "role": "mission_control",
                                                 "scope": "mission:write"}))
BOB = Identity(principal=Principal.from_claims({"sub": "bob", "role": "observer"}))
KEY = "mcp-preconditions:state:"


SHIPPED_TIMEOUTS = {"connect_timeout_seconds = 0.25": "connect_timeout_seconds = 5",
                    "read_timeout_seconds = 0.25": "read_timeout_seconds = 5",
                    "lookup_timeout_seconds = 0.5": "lookup_timeout_seconds = 10"}


def live_guard(tmp_path: Path, redis_server: RedisServer, *, patient: bool) -> Guard:
    shutil.copytree(POLICIES / "flags", tmp_path / "flags")
    text = (POLICIES / "mission-control-live.toml").read_text()
    assert 'url = "redis://127.0.0.1:6379/0"' in text
    text = text.replace('url = "redis://127.0.0.1:6379/0"', f'url = "{redis_server.url}"')
    for shipped, raised in SHIPPED_TIMEOUTS.items():
        assert text.count(shipped) == 1, shipped
        text = text.replace(shipped, raised) if patient else text
    policy = tmp_path / "mission-control-live.toml"
    policy.write_text(text)
    redis_server.flush()
    return Guard(load_policy(policy), entry_points=False)


@pytest.fixture
def guard(tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
          flag_file: object) -> Guard:
    """(`flag_file` is requested for its teardown: it closes the flagd providers.)"""
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    return live_guard(tmp_path, redis_server, patient=True)


@pytest.fixture
def shipped_guard(tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
                  flag_file: object) -> Guard:
    """The shipped policy's own timeouts (for a stopped Redis: the lookup must end within them)."""
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    return live_guard(tmp_path, redis_server, patient=False)


async def test_launch_follows_the_weather_in_redis(guard: Guard, redis_server: RedisServer) -> None:
    redis_server.command("SET", KEY + "weather.clear", "true")
    assert (await guard.check_identity("launch_rocket", ALICE)).allowed
    guard.snapshot.registry.get("state").clear_cache()  # type: ignore[union-attr]
    redis_server.command("SET", KEY + "weather.clear", "false")
    denied = await guard.check_identity("launch_rocket", ALICE)
    assert not denied.allowed
    assert denied.denial_payload() == {"error": "unmet_requirements", "tool": "launch_rocket",
                                       "unmet": [], "withheld": 1}  # weather.clear is confidential


async def test_fuel_status_and_flags(guard: Guard, redis_server: RedisServer) -> None:
    fuel = await guard.check_identity("fuel_status", BOB)
    assert fuel.unmet == ("state:range.safety_officer_on_duty",)
    redis_server.command("SET", KEY + "range.safety_officer_on_duty", "1")
    guard.snapshot.registry.get("state").clear_cache()  # type: ignore[union-attr]
    assert (await guard.check_identity("fuel_status", BOB)).allowed
    # telemetry.v2 targets the mission_control role on that tool only.
    assert (await guard.check_identity("stream_telemetry_v2", ALICE)).allowed
    assert (await guard.check_identity("stream_telemetry_v2", BOB)).unmet == ("feature:telemetry.v2",)


async def test_redis_down_denies_launch_without_naming_the_confidential_fact(
        shipped_guard: Guard, redis_server: RedisServer) -> None:
    redis_server.pause()
    try:
        decision = await shipped_guard.check_identity("launch_rocket", ALICE)
    finally:
        redis_server.resume()
    assert not decision.allowed and decision.errors == ("state:weather.clear",)
    assert decision.denial_payload()["withheld"] == 1
    assert "weather" not in decision.denial_text()
