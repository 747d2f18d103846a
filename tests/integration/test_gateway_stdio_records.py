"""Over stdio a desktop client shows the gateway's stderr to its user, who is the caller (issue 29):
the decision records there name no confidential requirement (counted in `withheld`, as the denial
counts them) and no reason or label the caller may not see; the operator's whole record goes to
the file `--decision-log` names.

In-process (tests/fixtures/inprocess.py): a gateway wired for stdio from its command line in the
test's event loop, its upstream in memory, its records read as its logger writes them. One test
stays interop: a real stdio gateway process driven by the MCP SDK's client, because what a desktop
client shows its user is that process's whole stderr (its logging as the command sets it up, and
every other line it writes), which only the process has.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_preconditions.cli import main
from tests.fixtures.gateway_upstream import UPSTREAM_STDIO, gateway_stdio, tool_calls
from tests.fixtures.inprocess import logging_gateway
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)
from tests.integration.test_gateway_calls import raw_call
from tests.integration.test_gateway_confidential import CONFIDENTIAL, files, named

PREFIX = "mcp_preconditions.decisions: "


async def _calls(params: StdioServerParameters, err: Any) -> dict[str, dict[str, Any]]:
    async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
        return {name: await raw_call(client, name) for name in ("echo", "secret", "env")}


@pytest.mark.asyncio(loop_scope="module")
async def test_the_stdio_records_name_no_confidential_requirement_and_the_decision_log_has_them_all(
        tmp_path: Path) -> None:
    policy, claims, log = files(tmp_path, "result")
    decisions = tmp_path / "decisions.jsonl"
    async with logging_gateway(policy, log, "--claims", str(claims), "--decision-log",
                               str(decisions)) as gw:
        async with gw.client() as client:
            seen = {name: await raw_call(client, name) for name in ("echo", "secret", "env")}
        await gw.logged(r'mcp_preconditions\.decisions: .*"tool": "env"')
        shown = gw.output()
    check(shown, seen, decisions, log)


@pytest.mark.interop
def test_stderr_names_no_confidential_requirement_and_the_decision_log_has_them_all(
        tmp_path: Path) -> None:
    """Interop: a stdio gateway process's whole stderr, as a desktop client shows it."""
    policy, claims, log = files(tmp_path, "result")
    decisions, stderr = tmp_path / "decisions.jsonl", tmp_path / "gateway.err"
    params = gateway_stdio(policy, log, "--claims", str(claims), "--decision-log", str(decisions))
    with stderr.open("wb") as err:
        seen = anyio.run(_calls, params, err)
    check(stderr.read_text(encoding="utf-8"), seen, decisions, log)


def check(shown: str, seen: dict[str, dict[str, Any]], decisions: Path, log: Path) -> None:
    """What the caller saw, what the stdio records said (`shown`), and the operator's file."""
    records = [json.loads(line[len(PREFIX):]) for line in shown.splitlines()
               if line.startswith(PREFIX)]
    operator = [json.loads(line) for line in decisions.read_text(encoding="utf-8").splitlines()]
    # What the caller saw in the denials ...
    assert seen["echo"]["structuredContent"]["withheld"] == 1
    assert seen["secret"]["structuredContent"]["withheld"] == 1
    assert seen["env"].get("isError", False) is False
    # ... is all that stderr says: no part of a confidential requirement, anywhere on it.
    assert named(shown) == [], shown
    assert [(r["tool"], r["allowed"], r["unmet"], r["withheld"]) for r in records] == [
        ("echo", False, [], 1), ("secret", False, [], 1), ("env", True, [], 0)]
    assert all(r["subject"] == "o" and r["server"] == "upstream" for r in records)
    assert not any("upstream" in r or "replica" in r for r in records)  # the operator's labels
    # The operator's file has the whole record, confidential requirements and labels included.
    assert [(r["tool"], r["unmet"]) for r in operator] == [
        ("echo", [CONFIDENTIAL[0]]), ("secret", [CONFIDENTIAL[1]]), ("env", [])]
    assert all(r["subject"] == "o" and "replica" in r and "upstream" in r for r in operator)
    assert tool_calls(log) == ["env"]


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--decision-log", "{tmp}/no/such/dir/decisions.jsonl",
     "--decision-log: cannot open '{tmp}/no/such/dir/decisions.jsonl' for appending: No such file "
     "or directory"),
    ("--max-sessions-per-principal", "0", "--max-sessions-per-principal: expected a positive "
                                          "number, got '0'"),
    ("--max-streams-per-principal", "many", "--max-streams-per-principal: expected a positive "
                                            "number, got 'many'"),
    ("--max-sessions", "1.5", "--max-sessions: expected a positive number, got '1.5'"),
    ("--sse-poll-seconds", "0", "--sse-poll-seconds: expected a positive number, got '0'"),
    ("--sse-poll-seconds", "soon", "--sse-poll-seconds: expected a positive number, got 'soon'"),
])
def test_a_bad_listener_or_decision_log_flag_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str,
        message: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("# nothing\n", encoding="utf-8")
    listen = [] if flag == "--decision-log" else ["--listen", "http://127.0.0.1:0"]
    argv = ["gateway", "--policy", str(policy), *listen, flag, value.format(tmp=tmp_path), "--",
            *UPSTREAM_STDIO]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message.format(tmp=tmp_path)}\n"
