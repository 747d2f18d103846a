"""The `mcp-preconditions` entry point: help for every subcommand, the exit-code contract, errors as
one line without a traceback, and the installed console script run as a real subprocess."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_preconditions import __version__
from mcp_preconditions.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "mission-control.toml")
TOOLS = str(ROOT / "examples" / "mission-control-tools.json")
OBSERVER = str(ROOT / "examples" / "claims" / "observer.json")
SCRIPT = Path(sys.executable).parent / "mcp-preconditions"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def every_command() -> list[list[str]]:
    found: list[list[str]] = []
    for name, sub in subcommands(build_parser()).items():
        found.append([name])
        found += [[name, nested] for nested in subcommands(sub)]
    return found


def test_the_core_subcommands_are_registered() -> None:
    names = set(subcommands(build_parser()))
    assert {"check", "filter", "lint", "policy", "route", "present"} <= names
    assert set(subcommands(subcommands(build_parser())["policy"])) == {"validate", "schema", "test"}


def test_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: mcp-preconditions [-h] [--version] COMMAND ...")
    for name in ("check", "filter", "lint", "policy", "route", "present"):
        assert f"\n    {name} " in out
    assert "Exit codes: 0 done, 1 findings" in out


@pytest.mark.parametrize("command", every_command(), ids=" ".join)
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"usage: mcp-preconditions {' '.join(command)} ")
    assert out.err == ""


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"mcp-preconditions {__version__}\n"


@pytest.mark.parametrize(("argv", "tail"), [
    ([], "mcp-preconditions: error: the following arguments are required: COMMAND\n"),
    (["launch"], "mcp-preconditions: error: argument COMMAND: invalid choice: 'launch' (choose from "),
    (["check", "--tools", TOOLS], "mcp-preconditions check: error: the following arguments are "
                                  "required: --policy\n"),
    (["lint", "--tools", TOOLS, "--format", "yaml"],
     "mcp-preconditions lint: error: argument --format: invalid choice: 'yaml' (choose from "),
    (["check", "--policy", "p\u202e.toml", "--format", "x\u202e"],
     "mcp-preconditions check: error: argument --format: invalid choice: 'x\\u202e' (choose from "),
])
def test_usage_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                              tail: str) -> None:
    """One line like every other error, control and bidi characters escaped; `--help` shows the
    usage."""
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(tail) and out.err.count("\n") == 1


def test_a_library_error_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('[state.callables]\n"k" = "no_such_module_xyz:f"\n', encoding="utf-8")
    assert main(["check", "--policy", "p.toml", "--tools", TOOLS]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "mcp-preconditions: error: p.toml: state.callables.k: cannot "
                                      "import 'no_such_module_xyz:f': No module named "
                                      "'no_such_module_xyz'\n")


def test_an_os_error_is_one_line(capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("mcp_preconditions.cli.core_cmds.read_tools", refuse)
    assert main(["check", "--policy", POLICY, "--tools", "x.json"]) == 2
    assert capsys.readouterr().err == "mcp-preconditions: error: x.json: Permission denied\n"


# --- the installed console script ---------------------------------------------------------------
def script(*argv: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"console script not installed at {SCRIPT}"
    env = {k: v for k, v in os.environ.items() if k != "MCP_PRECONDITIONS_ENVIRONMENT"}
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=10,
                          check=False)


def test_the_console_script_denies_the_observer_a_launch() -> None:
    done = script("check", "--policy", POLICY, "--tools", TOOLS, "--claims", OBSERVER, "--format", "json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["tools"][0] == {
        "name": "launch_rocket", "allowed": False,
        "unmet": ["auth:claim:role:mission_control", "capability:rocket.launch"], "errors": []}


def test_the_console_script_reports_bad_input_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"tools": [{"name": "a"}, {"name": 1}]}', encoding="utf-8")
    done = script("lint", "--tools", str(bad))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"mcp-preconditions: error: {bad}: tools[1].name: must be a string, got number\n"


def test_the_console_script_runs_the_policy_tests() -> None:
    done = script("policy", "test", str(ROOT / "policies" / "mission-control.tests.toml"))
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].endswith(" passed, 0 failed")


def test_docs_cli_md_covers_every_subcommand() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    headings = {line[4:].strip() for line in text.splitlines() if line.startswith("### ")}
    for command in every_command():
        if command[0] == "policy" and len(command) == 1:
            continue  # its own subcommands share one section
        name = "policy validate, schema, test" if command[0] == "policy" else command[0]
        assert name in headings, f"docs/cli.md has no '### {name}' section"
        assert f"mcp-preconditions {' '.join(command)}" in text, command
    assert "draft" not in text.lower() and "SPEC §" not in text
