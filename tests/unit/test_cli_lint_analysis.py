"""`lint --policy` reports rules that can never match on the shipped example; `--strict` makes
warnings findings (exit 1)."""

from __future__ import annotations

import pytest

from mcp_preconditions.cli import main

TOOLS, POLICY = "examples/mission-control-tools.json", "policies/mission-control.toml"


def test_the_shipped_example_shows_the_never_match_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--tools", TOOLS, "--policy", POLICY]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{POLICY}: warning: tool 'schedule_maintenance': no caller can ever be allowed: env:staging "
        "(environment label 'staging' is not among this server's labels)",
        f"{POLICY}: warning: tool 'stream_telemetry_v2': no caller can ever be allowed: "
        "feature:telemetry.v2 (flag 'telemetry.v2' is false (policy))",
        f"{POLICY}: warning: tool 'fuel_status': no caller can ever be allowed: "
        "state:range.safety_officer_on_duty (state 'range.safety_officer_on_duty' is not true "
        "(policy))",
        "0 error(s), 3 warning(s) in 7 tool(s)"]


def test_strict_turns_warnings_into_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--tools", TOOLS, "--policy", POLICY, "--strict"]) == 1
    assert capsys.readouterr().out.endswith("0 error(s), 3 warning(s) in 7 tool(s)\n")
