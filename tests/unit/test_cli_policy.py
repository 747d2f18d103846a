"""`mcp-preconditions policy validate|schema|test`, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_preconditions.policy import load_policy, policy_schema
from tests.fixtures.cli_main import run

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return name


# --- validate -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mission-control.toml", "minimal.toml"])
def test_the_shipped_policies_are_valid(capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = str(POLICIES / name)
    assert run(capsys, "policy", "validate", path) == (
        0, f"OK: {path} (revision {load_policy(path).revision})\n", "")


def test_every_schema_problem_by_key_path(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", 'environment = "production"\n[auth]\njwks_url = "https://x"\n'
                              '[tools.t]\nrequirements = [""]\n')
    assert run(capsys, "policy", "validate", "p.toml") == (2, "", (
        "mcp-preconditions: error: p.toml: environment: Input should be a valid list\n"
        "mcp-preconditions: error: p.toml: tools.t.requirements[0]: String should have at least 1 "
        "character\n"
        "mcp-preconditions: error: p.toml: auth.jwks_url: unknown key (a typo here would silently "
        "weaken the policy)\n"))


def test_requirements_no_resolver_accepts(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", '[tools."a.b"]\nrequirements = ["env:x", "auth:claim:role"]\n'
                              '[[capabilities.grants]]\ncapabilities = ["c"]\nwhen = ["auth:sope"]\n')
    assert run(capsys, "policy", "validate", "p.toml") == (2, "", (
        'mcp-preconditions: error: p.toml: tools."a.b".requirements[1]: requirement '
        "'auth:claim:role': auth:claim: needs a claim name and a value (auth:claim:NAME:VALUE) "
        "(accepted forms: auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE)\n"
        "mcp-preconditions: error: p.toml: capabilities.grants[0].when[0]: requirement 'auth:sope': "
        "unknown auth form (accepted forms: auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE)\n"))


def test_lint_warnings_do_not_fail_validation(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", '[tools.t]\nrequirements = ["env:x ", "env:y", "env:y"]\n')
    code, out, err = run(capsys, "policy", "validate", "p.toml")
    assert (code, out) == (0, f"OK: p.toml (revision {load_policy(tmp_path / 'p.toml').revision})\n")
    assert err.splitlines() == [
        "mcp-preconditions: warning: p.toml: tools.t.requirements[0]: requirement 'env:x ' has leading "
        "or trailing whitespace (it matches only itself, exactly)",
        "mcp-preconditions: warning: p.toml: tools.t.requirements[1]: requirement 'env:y' is listed "
        "more than once",
    ]


@pytest.mark.parametrize(("content", "problem"), [
    (None, "(file): cannot read: No such file or directory"),
    ("environment = [", "(file): not valid TOML: Invalid value (at end of document)"),
    (b"environment = ['\xff']", "(file): not UTF-8 (invalid start byte at byte 16)"),
])
def test_unreadable_policies(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch, content: str | bytes | None,
                             problem: str) -> None:
    monkeypatch.chdir(tmp_path)
    if isinstance(content, bytes):
        (tmp_path / "p.toml").write_bytes(content)
    elif content is not None:
        write(tmp_path, "p.toml", content)
    assert run(capsys, "policy", "validate", "p.toml") == (2, "", (
        f"mcp-preconditions: error: p.toml: {problem}\n"))


# --- schema -------------------------------------------------------------------------------------
def test_schema_is_the_policy_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "policy", "schema")
    assert (code, err) == (0, "")
    schema = json.loads(out)
    assert schema == policy_schema()
    assert schema["title"] == "mcp-preconditions policy"
    assert schema["additionalProperties"] is False


# --- test ---------------------------------------------------------------------------------------
def test_the_shipped_policy_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "policy", "test", str(POLICIES / "mission-control.tests.toml"))
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0] == "PASS  mission control may launch, abort and read telemetry"
    assert all(line.startswith("PASS  ") for line in lines[:-1])
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed"


def test_a_failing_case_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", '[tools.t]\nrequirements = ["auth:oauth2"]\n')
    write(tmp_path, "p.tests.toml", 'policy = "p.toml"\n'
                                    '[[cases]]\nname = "anonymous"\nexpect.t = { allowed = false }\n'
                                    '[[cases]]\nname = "wrong"\nexpect.t = { allowed = true }\n')
    assert run(capsys, "policy", "test", "p.tests.toml") == (1, (
        "PASS  anonymous\n"
        "FAIL  wrong\n"
        "      t: expected allowed, got denied (unmet [auth:oauth2])\n"
        "1 passed, 1 failed\n"), "")
    code, out, _ = run(capsys, "policy", "test", "p.tests.toml", "--format", "json")
    assert code == 1
    assert json.loads(out) == {"cases": [
        {"name": "anonymous", "passed": True, "differences": []},
        {"name": "wrong", "passed": False,
         "differences": ["t: expected allowed, got denied (unmet [auth:oauth2])"]},
    ], "passed": 1, "failed": 1}


def test_a_bad_test_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", "")
    write(tmp_path, "p.tests.toml", 'policy = "p.toml"\n[[cases]]\nname = "x"\nclaim = {}\n'
                                    'expect.t = { allowed = true }\n')
    assert run(capsys, "policy", "test", "p.tests.toml") == (2, "", (
        "mcp-preconditions: error: p.tests.toml: cases[0].claim: unknown key (a typo here would "
        "silently skip a check)\n"))


def test_policy_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "policy")
    assert code == 2
    assert err.endswith("mcp-preconditions policy: error: the following arguments are required: "
                        "COMMAND\n")


def test_absurd_nesting_in_a_policy_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # tomllib recurses per nesting level; parse_policy maps RecursionError to a policy problem.
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", "environment = " + "[" * 5000 + "]" * 5000)
    assert run(capsys, "policy", "validate", "p.toml") == (
        2, "", "mcp-preconditions: error: p.toml: (file): not usable TOML: nested too deeply\n")


# --- validate --format json ---------------------------------------------------------------------
def test_validate_json_of_a_valid_policy(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", '[tools.t]\nrequirements = ["env:x", "env:x"]\n')
    code, out, err = run(capsys, "policy", "validate", "p.toml", "--format", "json")
    assert code == 0
    assert json.loads(out) == {
        "policy": "p.toml", "valid": True, "revision": load_policy(tmp_path / "p.toml").revision,
        "errors": [], "warnings": ["tools.t.requirements[0]: requirement 'env:x' is listed more than once"]}
    assert err == ("mcp-preconditions: warning: p.toml: tools.t.requirements[0]: requirement 'env:x' is "
                   "listed more than once\n")


@pytest.mark.parametrize(("content", "revision", "errors"), [
    ('environment = "x"\n', False, ["environment: Input should be a valid list"]),
    ('[tools.t]\nrequirements = ["env:"]\n', True,
     ["tools.t.requirements[0]: requirement 'env:': env: needs a label name (env:NAME) (accepted "
      "forms: env:NAME)"]),
])
def test_validate_json_of_an_invalid_policy(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, content: str,
                                            revision: bool, errors: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", content)
    code, out, err = run(capsys, "policy", "validate", "p.toml", "--format", "json")
    assert code == 2
    assert json.loads(out) == {
        "policy": "p.toml", "valid": False, "errors": errors, "warnings": [],
        "revision": load_policy(tmp_path / "p.toml").revision if revision else None}
    assert err == "".join(f"mcp-preconditions: error: p.toml: {e}\n" for e in errors)
