"""`mcp-preconditions demo --format json`: the same real stdio run as the narrative, as one JSON
document (the listing, both verdict rounds, the allowed and the denied call, what the client learned)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.fixtures.mcp_servers import CLI, ROOT, server_env

pytestmark = pytest.mark.integration


def test_demo_as_json() -> None:
    done = subprocess.run([*CLI, "demo", "--format", "json"], cwd=ROOT, env=server_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    run = json.loads(done.stdout)
    assert set(run) == {"server", "caller", "knowledge", "tools", "verdicts", "allowed_call",
                        "denied_call", "learned", "verdicts_after"}
    assert run["server"]["policy"] == "mission-control.toml"
    assert run["caller"]["sub"] == "alice"
    assert [t["name"] for t in run["tools"]][:2] == ["launch_rocket", "abort_launch"]
    assert {"name": "get_weather", "requirements": []} in run["tools"]
    assert run["allowed_call"] == {"tool": "launch_rocket", "arguments": {"vehicle": "Falcon 9"},
                                   "is_error": False, "text": "Falcon 9 has cleared the tower.",
                                   "structured_content": None}
    assert run["denied_call"]["is_error"] is True
    assert run["denied_call"]["structured_content"] == {
        "error": "unmet_requirements", "tool": "fuel_status",
        "unmet": ["state:range.safety_officer_on_duty"], "withheld": 0}
    assert run["learned"] == ["state:range.safety_officer_on_duty"]
    hidden_before = {v["name"] for v in run["verdicts"]["tools"] if v["hidden"]}
    hidden_after = {v["name"] for v in run["verdicts_after"]["tools"] if v["hidden"]}
    assert "stream_telemetry_v2" in hidden_before and "fuel_status" not in hidden_before
    assert hidden_after == hidden_before | {"fuel_status"}
    assert (run["verdicts_after"]["shown"], run["verdicts_after"]["total"]) == (5, 7)
