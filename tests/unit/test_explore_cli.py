"""`mcp-preconditions explore` command-line errors: one line each, exit 2, nothing served."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_preconditions.cli import main

MISSION = ["--policy", "policies/mission-control.toml", "--tools", "examples/mission-control-tools.json"]
REMOTE = ("is not a loopback address, and the page shows the whole policy, confidential requirements "
          "included, to whoever has its URL, whose token crosses the network unencrypted; add "
          "--allow-remote to serve it to other machines anyway")


USAGE, INPUT = "mcp-preconditions explore: error: ", "mcp-preconditions: error: "
ONE_WAY = ("give the tools one way: --tools T, --config gateway.toml, --servers FILE, --upstream-url URL, "
           "or a command after --")


@pytest.mark.parametrize(("args", "message"), [
    # usage: options that do not fit together, said with the command's name as argparse says its own
    (["--listen", "http://0.0.0.0:8088"], f"{USAGE}--listen: 0.0.0.0 {REMOTE}"),
    (["--listen", "http://[::]:8088"], f"{USAGE}--listen: :: {REMOTE}"),
    (["--listen", "http://example.org:8088"], f"{USAGE}--listen: example.org {REMOTE}"),
    (["--servers", "examples/desktop-config.json"], f"{USAGE}{ONE_WAY}"),
    (["--config", "gateway.toml"], f"{USAGE}{ONE_WAY}"),
    (["--", "ls"], f"{USAGE}{ONE_WAY}"),
    (["--no-such-option"], f"{USAGE}unrecognized arguments: --no-such-option"),
    # bad input: a value or a file, named
    (["--listen", "127.0.0.1:8088"], f"{INPUT}--listen: expected 'http://HOST:PORT', got '127.0.0.1:8088'"),
    (["--listen", "http://127.0.0.1:70000"], f"{INPUT}--listen: port out of range (0-65535): 70000"),
    (["--claims", "no-such-claims.json"],
     f"{INPUT}no-such-claims.json: cannot read: No such file or directory"),
    (["--knowledge", "examples/claims/observer.json"],
     f"{INPUT}examples/claims/observer.json: invalid knowledge: unknown key(s) 'sub', 'role', 'scope' "
     "(expected 'satisfied', 'unsatisfiable')"),
    (["--resolver", "nowhere.py:Thing"], f"{INPUT}--resolver nowhere.py: no such file"),
])
def test_bad_command_lines_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                                message: str) -> None:
    assert main(["explore", *MISSION, *args]) == 2
    assert capsys.readouterr().err == f"{message}\n"


@pytest.mark.parametrize(("servers", "message"), [
    ("no-such-servers.json", "no-such-servers.json: (file): cannot read: No such file or directory"),
    ("policies/minimal.toml", "policies/minimal.toml: (file): not valid JSON: Expecting value at line 1 "
                              "column 1"),
])
def test_a_servers_file_that_cannot_be_read_stops_it(capsys: pytest.CaptureFixture[str], servers: str,
                                                     message: str) -> None:
    assert main(["explore", "--policy", "policies/mission-control.toml", "--servers", servers]) == 2
    assert capsys.readouterr().err == f"{INPUT}{message}\n"


@pytest.mark.parametrize(("content", "message"), [
    (None, "(file): cannot read: No such file or directory"),
    (b"\xff\xfe", "(file): not UTF-8 (invalid start byte at byte 0)"),
])
def test_a_policy_that_cannot_be_read_stops_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               content: bytes | None, message: str) -> None:
    policy = tmp_path / "p.toml"
    if content is not None:
        policy.write_bytes(content)
    code = main(["explore", "--policy", str(policy), "--tools", "examples/mission-control-tools.json"])
    assert (code, capsys.readouterr().err) == (2, f"mcp-preconditions: error: {policy}: {message}\n")


def test_a_bad_tools_file_stops_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tools = tmp_path / "t.json"
    tools.write_text('{"tools": [{"name": ""}]}', encoding="utf-8")
    assert main(["explore", "--policy", "policies/mission-control.toml", "--tools", str(tools)]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {tools}: tools[0].name: must not be empty\n"


def test_a_remote_listen_is_refused_before_any_file_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--policy", "nowhere.toml", "--tools", "nowhere.json",
                 "--listen", "http://10.0.0.1:8088"]) == 2
    assert capsys.readouterr().err == f"{USAGE}--listen: 10.0.0.1 {REMOTE}\n"
