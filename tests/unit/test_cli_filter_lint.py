"""`mcp-preconditions filter` (client verdicts) and `lint` (bad or suspicious requirements), in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.wire import META_KEY
from tests.fixtures.cli_main import run

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "mission-control.toml")
TOOLS = str(ROOT / "examples" / "mission-control-tools.json")
KNOWLEDGE = str(ROOT / "examples" / "knowledge.json")


def write(tmp_path: Path, name: str, content: Any) -> str:
    text = content if isinstance(content, str) else json.dumps(content)
    (tmp_path / name).write_text(text, encoding="utf-8")
    return name


# --- filter -------------------------------------------------------------------------------------
def test_filter_hide_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "filter", "--tools", TOOLS, "--knowledge", KNOWLEDGE)
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "kept": ["launch_rocket", "abort_launch", "read_telemetry", "schedule_maintenance",
                 "fuel_status", "get_weather"],
        "hidden": [{"name": "stream_telemetry_v2", "unsatisfiable": ["feature:telemetry.v2"]}]}


def test_filter_demote_json_moves_failures_last(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "filter", "--tools", TOOLS, "--knowledge", KNOWLEDGE, "--mode", "demote")
    result = json.loads(out)
    assert code == 0
    assert result["kept"] == ["launch_rocket", "abort_launch", "read_telemetry", "schedule_maintenance",
                              "fuel_status", "get_weather", "stream_telemetry_v2"]
    assert result["hidden"] == []
    assert result["verdicts"][3] == {"name": "schedule_maintenance", "verdict": "proceed",
                                     "unsatisfiable": ["env:staging"],
                                     "unknown": ["auth:claim:realm_roles:engineer"]}
    assert result["verdicts"][6] == {"name": "stream_telemetry_v2", "verdict": "will_fail",
                                     "unsatisfiable": ["feature:telemetry.v2"], "unknown": []}


def test_filter_hide_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "filter", "--tools", TOOLS, "--knowledge", KNOWLEDGE,
                         "--format", "table")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "TOOL                  VERDICT             WHY",
        "launch_rocket         proceed             unknown: auth:claim:role:mission_control, "
        "capability:rocket.launch, state:weather.clear, feature:launch_window.open",
        "abort_launch          proceed             unknown: capability:rocket.abort, "
        "auth:scope:mission:write",
        "read_telemetry        proceed",
        "schedule_maintenance  proceed             unsatisfiable: env:staging; unknown: "
        "auth:claim:realm_roles:engineer",
        "fuel_status           proceed             unknown: state:range.safety_officer_on_duty",
        "get_weather           proceed",
        "stream_telemetry_v2   will fail (hidden)  unsatisfiable: feature:telemetry.v2",
    ]


def test_filter_annotate_keeps_order_and_warns_about_garbage(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tools = write(tmp_path, "t.json", [
        {"name": "bad", "execution": {"requirements": "env:prod"}},
        {"name": "off", "execution": {"requirements": ["env:prod"]}}])
    knowledge = write(tmp_path, "k.json", {"unsatisfiable": ["env:prod"]})
    code, out, err = run(capsys, "filter", "--tools", tools, "--knowledge", knowledge, "--mode",
                         "annotate", "--format", "table")
    assert code == 0
    assert err == ("mcp-preconditions: warning: t.json: tool 'bad': requirements must be a list of "
                   "strings, got str; proceeding as if absent\n")
    assert out.splitlines() == ["TOOL  VERDICT    WHY", "bad   proceed",
                                "off   will fail  unsatisfiable: env:prod"]


@pytest.mark.parametrize(("knowledge", "message"), [
    ({"satisfied": ["a:b"], "unsatisfied": []},
     "k.json: invalid knowledge: unknown key(s) 'unsatisfied' (expected 'satisfied', 'unsatisfiable')"),
    ('{"satisfied": [', "k.json: not valid JSON (line 1, column 16): Expecting value"),
])
def test_filter_bad_knowledge_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, knowledge: Any,
                                      message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "k.json", knowledge)
    assert run(capsys, "filter", "--tools", TOOLS, "--knowledge", "k.json") == (
        2, "", f"mcp-preconditions: error: {message}\n")


def test_filter_unknown_mode_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "filter", "--tools", TOOLS, "--knowledge", KNOWLEDGE, "--mode", "drop")
    assert code == 2
    assert "argument --mode: invalid choice: 'drop'" in err


# --- lint ---------------------------------------------------------------------------------------
LINT_TOOLS = {"tools": [
    {"name": "clean", "execution": {"requirements": ["auth:oauth2"]}},
    {"name": "typo", "execution": {"requirements": [
        "auth:clam:x", "env:production ", "env:prod\u200buction", "env:prоduction", "env:production",
        "env:production"]}},
    {"name": "mirror", "execution": {"requirements": ["env:a"]}, "_meta": {META_KEY: ["env:b"]}},
    {"name": "odd", "execution": "env:a"},
    {"name": "garbage", "execution": {"requirements": ["env:a", 7]}},
    {"name": "hinted", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                                       "required": ["q"]},
     "capabilityHints": {"tiers": {"small": {"inputSchema": {
         "type": "object", "properties": {"x": {"type": "string"}}}}}}},
]}


def test_lint_lists_errors_and_warnings_by_file_and_tool(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "t.json", LINT_TOOLS)
    code, out, err = run(capsys, "lint", "--tools", "t.json")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "t.json: error: tool 'typo': requirement 'auth:clam:x': unknown auth form (accepted forms: "
        "auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE)",
        "t.json: warning: tool 'typo': requirement 'env:production ' has leading or trailing "
        "whitespace (it matches only itself, exactly)",
        "t.json: warning: tool 'typo': requirement 'env:prod\\u200buction' contains control or "
        "invisible characters: U+200B",
        "t.json: warning: tool 'typo': requirement 'env:prоduction' mixes scripts: CYRILLIC, LATIN",
        "t.json: warning: tool 'typo': requirement 'env:production' is listed more than once",
        "t.json: warning: tool 'mirror': the _meta mirror 'io.github.mcp-preconditions/requirements' "
        "differs from execution.requirements (clients see different lists)",
        "t.json: error: tool 'odd': execution must be an object holding 'requirements', got str",
        "t.json: error: tool 'garbage': requirement #1 must be a string, got int 7",
        "t.json: error: tool 'hinted': capabilityHints.tiers.small.inputSchema has property 'x' that "
        "the full inputSchema lacks",
        "t.json: error: tool 'hinted': capabilityHints.tiers.small.inputSchema does not require 'q', "
        "which the full inputSchema requires",
        "5 error(s), 5 warning(s) in 6 tool(s)",
    ]


def test_lint_with_a_policy_json(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "t.json", [{"name": "clean", "execution": {"requirements": ["auth:oauth2"]}}])
    write(tmp_path, "p.toml", '[tools.clean]\nrequirements = ["feature:beta "]\n'
                              '[tools.gone]\nrequirements = ["env:x"]\n')
    code, out, err = run(capsys, "lint", "--tools", "t.json", "--policy", "p.toml", "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"findings": [
        {"severity": "warning", "tool": "clean", "requirement": "feature:beta ", "source": "p.toml",
         "message": "requirement 'feature:beta ' has leading or trailing whitespace (it matches only "
                    "itself, exactly)"},
        {"severity": "warning", "tool": "clean", "requirement": None, "source": "p.toml",
         "message": "no caller can ever be allowed: feature:beta  (flag 'beta ' is not defined "
                    "(policy))"},
        {"severity": "warning", "tool": "gone", "requirement": None, "source": "p.toml",
         "message": "the policy's [tools.gone] names a tool that is not in t.json"},
    ], "errors": 0, "warnings": 3}


def test_lint_uses_the_policy_namespaces(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "t.json", [{"name": "t", "execution": {"requirements": ["nonamespace"]}}])
    code, out, _ = run(capsys, "lint", "--tools", "t.json", "--policy", POLICY)
    from mcp_preconditions.guard import Guard
    known = ", ".join(f"'{n}'" for n in Guard().snapshot.registry.namespaces())
    assert code == 1
    assert out.splitlines()[0] == (f"t.json: error: tool 't': requirement 'nonamespace' has no "
                                   f"namespace (expected NAMESPACE:..., known namespaces: {known})")


def test_lint_of_the_shipped_examples_has_no_errors(capsys: pytest.CaptureFixture[str]) -> None:
    # Its three warnings are the tools the example policy never allows (test_cli_lint_analysis.py).
    code, out, err = run(capsys, "lint", "--tools", TOOLS, "--policy", POLICY)
    assert (code, out.splitlines()[-1], err) == (0, "0 error(s), 3 warning(s) in 7 tool(s)", "")


@pytest.mark.parametrize(("argv", "message"), [
    (["--tools", "none.json"], "none.json: cannot read: No such file or directory"),
    (["--tools", "t.json", "--policy", "p.toml"],
     "p.toml: tols: unknown key (a typo here would silently weaken the policy)"),
])
def test_lint_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "t.json", [])
    write(tmp_path, "p.toml", "[tols.x]\nrequirements = []\n")
    assert run(capsys, "lint", *argv) == (2, "", f"mcp-preconditions: error: {message}\n")


def test_lint_reports_a_near_miss_policy_name_as_an_error_naming_both(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "t.json", {"tools": [{"name": "write_file"}, {"name": "read_file"},
                                         {"name": "list_directory"}]})
    write(tmp_path, "p.toml", '[tools.write-file]\nrequirements = ["env:production"]\n'
                              '[tools."re\u0430d_file"]\nrequirements = ["env:production"]\n'
                              '[tools.list_directroy]\nrequirements = ["env:production"]\n'
                              '[tools.ghost_tool]\nrequirements = []\n')
    code, out, err = run(capsys, "lint", "--tools", "t.json", "--policy", "p.toml")
    tail = ("names no tool, but nearly matches the tool {} (names are compared exactly; a typo "
            "here would leave that tool less guarded than the policy says)")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "p.toml: error: tool 'write_file': tools.\"write-file\": " + tail.format('"write_file"'),
        "p.toml: error: tool 'read_file': tools.\"re\\u0430d_file\": " + tail.format('"read_file"'),
        "p.toml: error: tool 'list_directory': tools.\"list_directroy\": "
        + tail.format('"list_directory"'),
        "p.toml: warning: tool 'ghost_tool': the policy's [tools.ghost_tool] names a tool that is "
        "not in t.json",
        "3 error(s), 1 warning(s) in 3 tool(s)",
    ]
