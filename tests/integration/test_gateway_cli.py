"""`mcp-preconditions gateway` command-line errors: one line each, exit 2, nothing started.

`main(argv)` in the test's own process, its stderr captured: each error is found before anything
starts. One row runs the real command as a process (the interop tier): the exit status and the one
line a shell sees, no traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mcp_preconditions.cli import main
from tests.fixtures.gateway_upstream import CLI, ROOT, upstream_env
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)

ERRORS = [
    ([], "no upstream: give --upstream-url URL or a command after --"),
    (["--upstream-url", "http://127.0.0.1:1/mcp", "--", "ls"],
     "two upstreams: give --upstream-url URL or a command after --, not both"),
    (["--", "no-such-command-anywhere"],
     "cannot start the upstream: command not found: no-such-command-anywhere"),
    (["--upstream-url", "ftp://127.0.0.1/mcp"], "--upstream-url: not an http(s) URL: 'ftp://127.0.0.1/mcp'"),
    (["--upstream-url", "127.0.0.1:8000"], "--upstream-url: not an http(s) URL: '127.0.0.1:8000'"),
    (["--upstream-url", "http://127.0.0.1:99999/mcp"],
     "--upstream-url: port out of range: 'http://127.0.0.1:99999/mcp'"),
    (["--listen", "http://127.0.0.1:70000", "--", "ls"], "--listen: port out of range (0-65535): 70000"),
    (["--listen", "tcp://127.0.0.1:8000", "--", "ls"],
     "--listen: expected 'stdio' or 'http://HOST:PORT', got 'tcp://127.0.0.1:8000'"),
    (["--upstream-url", "http://127.0.0.1:1/mcp", "--upstream-header", "Authorization=TOKEN"],
     "--upstream-header: expected NAME=env:VAR, got 'Authorization=TOKEN'"),
    (["--upstream-url", "http://127.0.0.1:1/mcp", "--upstream-header", "X-Key=env:GW_CLI_UNSET"],
     "--upstream-header X-Key: environment variable GW_CLI_UNSET is not set"),
    (["--upstream-header", "X-Key=env:PATH", "--", "ls"], "--upstream-header is for --upstream-url only"),
    (["--listen", "http://127.0.0.1:0", "--claims", "c.json", "--", "ls"],
     "--claims is for --listen stdio only; over HTTP each call's bearer token decides who is calling"),
]


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(("args", "message"), ERRORS)
def test_bad_command_lines_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    assert main(["gateway", "--policy", str(policy), *args]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message}\n"


@pytest.mark.usefixtures("restored_logging")
def test_a_bad_policy_is_named_before_anything_starts(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[gateway]\nunlisted_tools = "sometimes"\n', encoding="utf-8")
    assert main(["gateway", "--policy", str(policy), "--", "ls"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mcp-preconditions: error: {policy}: ")
    assert "gateway.unlisted_tools" in err


@pytest.mark.interop
def test_the_real_command_exits_2_with_one_line(tmp_path: Path) -> None:
    """Interop: the command as a shell runs it, a process whose exit status and stderr are the
    user's whole view of a mistake."""
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    done = subprocess.run([*CLI, "gateway", "--policy", str(policy), "--listen",
                           "tcp://127.0.0.1:8000", "--", "ls"], capture_output=True, text=True,
                          env=upstream_env(tmp_path / "u.jsonl"), cwd=ROOT, timeout=10,
                          stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("mcp-preconditions: error: --listen: expected 'stdio' or "
                           "'http://HOST:PORT', got 'tcp://127.0.0.1:8000'\n")
