"""`mcp-preconditions serve --transport stdio`, driven by the MCP SDK's client on both protocol
versions; the caller comes from --claims or a verified token in $MCP_PRECONDITIONS_TOKEN. Bad `serve`
input exits 2 with a message naming the problem.

In-process (tests/fixtures/hosted.py): `serve` wired from its command line in the test's loop, its
client in memory, tokens signed in this process. Interop, marked: the listing and the calls through a
real `serve` child over the SDK's stdio transport at both versions (the `child` rows: the stdio
framing and a desktop client's launch are what they check, and the lowest pass keeps them on the
oldest SDK), and a near-miss policy's exit before a child's first answer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_preconditions.cli import main
from mcp_preconditions.cli.server_cmds import TOKEN_ENV
from mcp_preconditions.examples_server import LAUNCH_REQUIREMENTS
from mcp_preconditions.resolvers.base import load_entry_point_resolvers
from mcp_preconditions.wire import META_KEY
from tests.fixtures.hosted import ISSUER, local_policy, serving
from tests.fixtures.mcp_servers import (
    CLI,
    MISSION_POLICY,
    MODES,
    ROOT,
    VERSIONS,
    raw_tools,
    server_env,
)

pytestmark = pytest.mark.integration

LAUNCH_LISTED = [r for r in LAUNCH_REQUIREMENTS if r != "state:weather.clear"]

CLAIMS = ROOT / "examples" / "claims" / "mission-control.json"


@asynccontextmanager
async def stdio(policy: Path, *args: str, version: str = "2025-11-25",
                child: bool = True) -> AsyncIterator[Client]:
    """A client of `serve --transport stdio ARGS`: a real child over the SDK's stdio transport,
    or (`child=False`) the same command wired in this process and reached in memory."""
    if not child:
        async with serving("--policy", str(policy), *args) as served, \
                served.client(version) as client:
            assert client.protocol_version == version
            yield client
        return
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "serve", "--policy", str(policy),
                                                         "--transport", "stdio", *args],
                                   env=server_env(), cwd=ROOT)
    async with Client(params, mode=MODES[version]) as client:
        assert client.protocol_version == version
        yield client


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content)


@pytest.mark.parametrize("child", [False, pytest.param(True, marks=pytest.mark.interop)],
                         ids=["in-process", "child"])
@pytest.mark.parametrize("version", VERSIONS)
async def test_stdio_serve_puts_requirements_on_the_wire_and_guards_calls(version: str, child: bool
                                                                          ) -> None:
    """The `child` rows: a real `serve` child over the SDK's stdio transport, what a desktop client
    launches (its stdio framing; the lowest pass runs them on the oldest SDK)."""
    async with stdio(MISSION_POLICY, version=version, child=child) as client:
        wire = {t["name"]: t for t in await raw_tools(client.session)}
        weather = await client.call_tool("get_weather", {})
        denied = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
    assert list(wire) == ["launch_rocket", "abort_launch", "read_telemetry", "schedule_maintenance",
                          "stream_telemetry_v2", "fuel_status", "get_weather"]
    # Listed less the policy's confidential `state:weather.clear` (enforced, never named).
    assert wire["launch_rocket"]["execution"]["requirements"] == LAUNCH_LISTED
    assert wire["launch_rocket"]["_meta"][META_KEY] == LAUNCH_LISTED
    assert "execution" not in wire["get_weather"] and "_meta" not in wire["get_weather"]
    assert weather.is_error is False
    assert denied.structured_content == {
        "error": "unmet_requirements", "tool": "launch_rocket",
        "unmet": ["auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch"],
        "withheld": 0}


async def test_stdio_caller_from_claims() -> None:
    async with stdio(MISSION_POLICY, "--claims", str(CLAIMS), child=False) as client:
        launched = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
        maintenance = await client.call_tool("schedule_maintenance", {"day": "Tuesday"})
    assert text_of(launched) == "Falcon 9 has cleared the tower."
    assert maintenance.structured_content is not None
    assert maintenance.structured_content["unmet"] == ["env:staging"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_stdio_caller_from_a_verified_token_in_the_environment(
        tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = local_policy(tmp_path)
    monkeypatch.setenv(TOKEN_ENV, ISSUER.token())
    async with stdio(policy, version=version, child=False) as client:
        launched = await client.call_tool("launch_rocket", {"vehicle": "Soyuz"})
    assert text_of(launched) == "Soyuz has cleared the tower."
    monkeypatch.setenv(TOKEN_ENV, "not-a-jwt")
    async with stdio(policy, version=version, child=False) as client:
        denied = await client.call_tool("launch_rocket", {"vehicle": "Soyuz"})
    assert denied.structured_content is not None
    assert denied.structured_content["unmet"][0] == "auth:oauth2"


# --- bad input ------------------------------------------------------------------------------------
def test_serve_refuses_claims_over_http(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--policy", str(MISSION_POLICY), "--transport", "http",
                 "--claims", str(CLAIMS)])
    assert code == 2
    assert capsys.readouterr().err == (
        "mcp-preconditions: error: --claims is for --transport stdio only; over HTTP each call's "
        "bearer token decides who is calling\n")


def test_serve_refuses_no_step_up_over_stdio(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--policy", str(MISSION_POLICY), "--no-step-up"]) == 2
    assert capsys.readouterr().err == ("mcp-preconditions: error: --no-step-up is for --transport "
                                       "http only: the 403 challenge is an HTTP answer\n")


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("nan", "nan"), ("inf", "inf")])
def test_serve_refuses_a_bad_refresh(value: str, shown: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--policy", str(MISSION_POLICY), "--refresh-seconds", value]) == 2
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: --refresh-seconds must be a finite number, 0 or more, got "
        f"{shown}\n")


@pytest.mark.parametrize("value", ["soon", "0.01", "-2", "inf"])
def test_serve_refuses_a_bad_policy_poll(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--policy", str(MISSION_POLICY), "--policy-poll-seconds", value]) == 2
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: --policy-poll-seconds: expected 0 (off) or a number of seconds "
        f">= 0.1, got {value!r}\n")


def test_serve_refuses_a_policy_with_a_bad_requirement(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "bad.toml"
    policy.write_text('[tools.launch_rocket]\nrequirements = ["env"]\n', encoding="utf-8")
    assert main(["serve", "--policy", str(policy)]) == 2
    namespaces = ["approval", "auth", "capability", "env", "feature", "pdp", "quota", "state",
                  *(r.namespace for r in load_entry_point_resolvers())]  # serve loads plugins too
    known = ", ".join(f"'{n}'" for n in namespaces)
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: {policy}: tool 'launch_rocket': requirement 'env' has no namespace "
        f"(expected NAMESPACE:..., known namespaces: {known})\n")


NEAR_MISSES = [("launch-rocket", "launch-rocket", "launch_rocket"),
               ("abort_lanuch", "abort_lanuch", "abort_launch"),
               ("Fuel_Status", "Fuel_Status", "fuel_status"),
               ("get_w\u0435ather", "get_w\\u0435ather", "get_weather")]


def near_miss_policy(directory: Path, near: str) -> Path:
    policy = directory / "near.toml"
    policy.write_text(f'[tools.{json.dumps(near)}]\nrequirements = ["env:production"]\n',
                      encoding="utf-8")
    return policy


def near_miss_line(policy: Path, shown: str, tool: str) -> str:
    return (f'mcp-preconditions: error: {policy}: tools."{shown}": names no tool, but nearly matches '
            f'the tool "{tool}" (names are compared exactly; a typo here would leave that tool less '
            f"guarded than the policy says)\n")


@pytest.mark.parametrize(("near", "shown", "tool"), NEAR_MISSES)
def test_serve_refuses_to_start_on_a_near_miss_policy_name(
        tmp_path: Path, near: str, shown: str, tool: str, capsys: pytest.CaptureFixture[str]) -> None:
    policy = near_miss_policy(tmp_path, near)
    assert main(["serve", "--policy", str(policy)]) == 2
    assert capsys.readouterr() == ("", near_miss_line(policy, shown, tool))


@pytest.mark.interop
async def test_a_near_miss_serve_child_exits_before_a_client_gets_a_session(tmp_path: Path) -> None:
    """A real subprocess: `serve` exits 2 naming both names before it serves anything; an SDK
    client that launches it gets no session (what a desktop client sees)."""
    near, shown, tool = NEAR_MISSES[0]
    policy = near_miss_policy(tmp_path, near)
    done = subprocess.run([*CLI, "serve", "--policy", str(policy)], env=server_env(), cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", near_miss_line(policy, shown, tool))
    with pytest.RaisesGroup(pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="Connection closed"))):
        async with stdio(policy):
            pass


def test_serve_refuses_a_missing_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["serve", "--policy", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: {missing}: (file): cannot read: No such file or directory\n")


def test_serve_refuses_bad_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps(["alice"]), encoding="utf-8")
    assert main(["serve", "--policy", str(MISSION_POLICY), "--claims", str(claims)]) == 2
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: {claims}: expected a JSON object of claims, got array\n")


def test_serve_refuses_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--policy", str(MISSION_POLICY), "--transport", "http",
                     "--port", str(port), "--refresh-seconds", "0"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"mcp-preconditions: error: --host/--port: cannot listen on 127.0.0.1:{port}: "
        "Address already in use\n")
