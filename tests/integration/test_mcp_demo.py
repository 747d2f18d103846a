"""`mcp-preconditions demo` end to end (a real stdio server process and a real MCP client), and the
example server staying true to its sources: examples/mission-control-tools.json and the policy.

The demo run is the interop tier's: starting the server as a subprocess and driving it over stdio is
what the command shows its user (the command itself runs in this process, `main(["demo"])`; the same
run collected as JSON, its server in memory, is tests/integration/test_demo_json.py's). The example
server's checks run in-process.
"""

from __future__ import annotations

import json
import os

import pytest
from mcp import Client

from mcp_preconditions.cli import main
from mcp_preconditions.examples_server import build_server, default_policy
from mcp_preconditions.guard import Guard
from tests.fixtures.mcp_servers import ROOT, raw_tools

SOURCE_TOOLS = json.loads((ROOT / "examples" / "mission-control-tools.json").read_text("utf-8"))["tools"]


@pytest.mark.interop
def test_demo_shows_listing_verdicts_an_allowed_and_a_denied_call(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Interop: the demo's server is a real stdio subprocess, which the command starts (with this
    process's environment, less the label, token and OpenTelemetry overrides of the test run)."""
    for variable in [v for v in os.environ if v.startswith("OTEL_") or v in (
            "MCP_PRECONDITIONS_ENVIRONMENT", "MCP_PRECONDITIONS_TOKEN")]:
        monkeypatch.delenv(variable)
    status = main(["demo"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "1. tools/list with execution.requirements" in out
    # state:weather.clear is enforced but confidential in the policy: never listed (SPEC §3).
    assert ("   launch_rocket         auth:oauth2, auth:claim:role:mission_control, "
            "capability:rocket.launch,\n                         env:production, "
            "feature:launch_window.open\n") in out
    assert "weather.clear" not in out
    assert "   get_weather           (none)\n" in out
    assert ("   stream_telemetry_v2   WILL FAIL  unsatisfiable: feature:telemetry.v2  -> hidden\n"
            in out)
    assert "   -> Falcon 9 has cleared the tower.\n" in out
    assert ('      structuredContent: {"error": "unmet_requirements", "tool": "fuel_status", '
            '"unmet": ["state:range.safety_officer_on_duty"], "withheld": 0}\n') in out
    assert ("   fuel_status           WILL FAIL  unsatisfiable: state:range.safety_officer_on_duty"
            "  -> hidden\n") in out
    assert out.rstrip().endswith("shown to the model: 5 of 7 tools")
    assert err == ""


async def test_the_example_server_matches_examples_mission_control_tools() -> None:
    async with Client(build_server(Guard(default_policy())), mode="legacy") as client:
        served = await raw_tools(client.session)
    assert [t["name"] for t in served] == [t["name"] for t in SOURCE_TOOLS]
    confidential = set(default_policy().policy.confidential)
    for tool, source in zip(served, SOURCE_TOOLS, strict=True):
        assert tool["description"] == source["description"]
        # Listed as declared, less the requirements the policy marks confidential.
        declared = (source.get("execution") or {}).get("requirements", [])
        assert (tool.get("execution") or {}).get("requirements", []) == [
            r for r in declared if r not in confidential]
        assert list(tool["inputSchema"]["properties"]) == list(source["inputSchema"]["properties"])
        assert tool["inputSchema"].get("required", []) == source["inputSchema"].get("required", [])


def test_the_embedded_policy_is_policies_mission_control() -> None:
    embedded = ROOT / "src" / "mcp_preconditions" / "data" / "mission-control.toml"
    assert embedded.read_bytes() == (ROOT / "policies" / "mission-control.toml").read_bytes()
    assert default_policy().source == "(embedded) mission-control.toml"
