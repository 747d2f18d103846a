"""The shipped example: policies/mission-control.toml with examples/mission-control-tools.json and the
claims files, decided for a mission-control user, an observer and an anonymous caller.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import ANONYMOUS, Credentials, Guard, Principal, load_policy
from mcp_preconditions.wire import raw_requirements

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "mission-control.toml"
TOOLS = ROOT / "examples" / "mission-control-tools.json"
LAUNCH = ["auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch", "env:production",
          "state:weather.clear", "feature:launch_window.open"]


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def tool_definitions() -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(TOOLS.read_text())["tools"]
    return tools


def guard() -> Guard:
    tools = {t["name"]: raw_requirements(t) for t in tool_definitions()}
    return Guard(load_policy(POLICY), tools, entry_points=False)


def claims(name: str) -> Credentials:
    data = json.loads((ROOT / "examples" / "claims" / f"{name}.json").read_text())
    return Credentials(principal=Principal.from_claims(data))


def test_the_example_compiles_without_findings() -> None:
    g = guard()
    assert g.findings == []
    assert g.tool_names() == [t["name"] for t in tool_definitions()]


def test_launch_rocket_carries_all_six_sep_requirements() -> None:
    g = guard()
    assert list(g.requirements_for("launch_rocket")) == LAUNCH
    assert g.requirements_for("get_weather") == ()


def test_the_policy_and_the_tools_file_agree() -> None:
    policy = load_policy(POLICY).policy
    for tool in tool_definitions():
        reqs = raw_requirements(tool) or []
        listed = policy.tools.get(tool["name"])
        assert (listed.requirements if listed else []) == reqs, tool["name"]


async def decisions(credentials: Credentials) -> dict[str, tuple[str, ...] | None]:
    """Per tool: None when allowed, else the unmet requirements."""
    g = guard()
    out: dict[str, tuple[str, ...] | None] = {}
    for name in g.tool_names():
        d = await g.check(name, credentials, {"vehicle": "Falcon 9"})  # a vehicle the range flies
        assert d.errors == ()
        out[name] = None if d.allowed else d.unmet
    return out


async def test_the_mission_control_user() -> None:
    assert await decisions(claims("mission-control")) == {
        "launch_rocket": None,
        "abort_launch": None,
        "read_telemetry": None,  # mission:write implies mission:read
        "schedule_maintenance": ("env:staging",),
        "stream_telemetry_v2": ("feature:telemetry.v2",),
        "fuel_status": ("state:range.safety_officer_on_duty",),
        "get_weather": None,
    }


async def test_the_observer() -> None:
    assert await decisions(claims("observer")) == {
        "launch_rocket": ("auth:claim:role:mission_control", "capability:rocket.launch"),
        "abort_launch": ("capability:rocket.abort", "auth:scope:mission:write"),
        "read_telemetry": None,
        "schedule_maintenance": ("env:staging", "auth:claim:realm_roles:engineer"),
        "stream_telemetry_v2": ("feature:telemetry.v2",),
        "fuel_status": ("state:range.safety_officer_on_duty",),
        "get_weather": None,
    }


async def test_the_observer_denial_of_launch_rocket() -> None:
    denied = await guard().check("launch_rocket", claims("observer"))
    assert denied.denial_payload() == {
        "error": "unmet_requirements", "tool": "launch_rocket",
        "unmet": ["auth:claim:role:mission_control", "capability:rocket.launch"], "withheld": 0}


async def test_an_anonymous_caller() -> None:
    got = await decisions(ANONYMOUS)
    assert got["launch_rocket"] == ("auth:oauth2", "auth:claim:role:mission_control",
                                    "capability:rocket.launch")
    assert got["get_weather"] is None


async def test_the_environment_variable_changes_the_decisions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "staging")
    g = guard()
    assert (await g.check("schedule_maintenance", claims("mission-control"))).allowed
    assert not (await g.check("launch_rocket", claims("mission-control"))).allowed


async def test_which_tools_each_caller_may_call() -> None:
    g = guard()
    assert await g.callable_tools(claims("mission-control")) == [
        "launch_rocket", "abort_launch", "read_telemetry", "get_weather"]
    assert await g.callable_tools(claims("observer")) == ["read_telemetry", "get_weather"]
    assert await g.callable_tools(ANONYMOUS) == ["get_weather"]
