"""`mcp-preconditions demo --format json`: the same run as the narrative, as one JSON document (the
listing, both verdict rounds, the allowed and the denied call, what the client learned).

In the test's own process: `main(["demo", "--format", "json"])`, with the server the demo starts
(`serve --transport stdio --claims C ...`, its command line read from what the demo asks for) guarded
in this process and reached in memory (the SDK's client takes a server object where the demo hands
it a stdio transport). The demo as a user runs it, the server a real stdio process, is the interop
tier's: tests/integration/test_mcp_demo.py.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.client.stdio
import pytest
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.cli import build_parser, main
from mcp_preconditions.examples_server import build_server
from mcp_preconditions.files import read_claims
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.principal import Credentials, Principal


def demo_server(params: StdioServerParameters, errlog: Any = None) -> Any:
    """What the demo's `serve` command line serves over stdio, as a server object: the embedded
    policy, the caller its `--claims` name, nothing refreshed."""
    argv = list(params.args)
    args = build_parser().parse_args(argv[argv.index("serve"):])
    assert (args.transport, args.refresh_seconds) == ("stdio", 0)
    caller = Credentials(principal=Principal.from_claims(read_claims(args.claims)))
    return build_server(Guard(load_policy(args.policy)), credentials=lambda _request: caller)


def test_demo_as_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    monkeypatch.setattr(mcp.client.stdio, "stdio_client", demo_server)
    status = main(["demo", "--format", "json"])
    done = capsys.readouterr()
    assert (status, done.err) == (0, ""), done.err
    run = json.loads(done.out)
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
