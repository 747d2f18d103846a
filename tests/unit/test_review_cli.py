"""Review findings (CLI): bad input that ends in a traceback, or in a tool reported ALLOWED because
its requirements field was garbage. Each test fails today.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_preconditions.cli import main

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "mission-control.toml")
TOOLS = str(ROOT / "examples" / "mission-control-tools.json")
HUGE = "1" + "0" * 400


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_claims_with_a_huge_integer_exp_are_bad_input_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Principal.from_claims: float(10**400) raises OverflowError, which main() does not catch.
    claims = write(tmp_path, "claims.json", '{"sub": "a", "exp": ' + HUGE + '}')
    code = main(["check", "--policy", POLICY, "--tools", TOOLS, "--claims", claims])
    assert code in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_policy_test_case_claims_with_a_huge_exp_are_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.toml").write_bytes(Path(POLICY).read_bytes())
    cases = write(tmp_path, "t.toml", 'policy = "p.toml"\n[[cases]]\nname = "x"\n'
                                      f'claims = {{ sub = "a", exp = {HUGE} }}\n'
                                      'expect.launch_rocket = { allowed = false }\n')
    code = main(["policy", "test", cases])
    assert code in (0, 1, 2)


def test_check_does_not_report_a_tool_with_a_malformed_execution_field_as_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `execution` is a string: raw_requirements() returns None, so the tool counts as requirement-free
    # and `check` prints ALLOWED (lint only warns). SPEC §8: tools failing start-up validation exit 2.
    tools = write(tmp_path, "tools.json",
                  '{"tools": [{"name": "launch", "execution": "auth:oauth2"}]}')
    code = main(["check", "--policy", POLICY, "--tools", tools, "--format", "json"])
    out = capsys.readouterr()
    assert code == 2, out.out
    assert "launch" in out.err


def test_duplicate_json_keys_in_a_tools_file_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The second `execution` silently replaces the first: the requirements vanish without a word.
    tools = write(tmp_path, "tools.json", '{"tools": [{"name": "launch", "execution": '
                                          '{"requirements": ["auth:oauth2"]}, "execution": {}}]}')
    code = main(["check", "--policy", POLICY, "--tools", tools, "--format", "json"])
    out = capsys.readouterr()
    assert code == 2, out.out
    assert "duplicate" in out.err


@pytest.mark.parametrize("spec", [":fn", ".relative:fn"])
def test_an_unimportable_state_callable_is_bad_input_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str) -> None:
    # resolvers.import_callable catches ImportError/AttributeError only; importlib raises
    # ValueError (empty module name) and TypeError (relative import) for these.
    policy = write(tmp_path, "p.toml", f'[state]\ncallables = {{ k = "{spec}" }}\n')
    code = main(["policy", "validate", policy])
    assert code == 2
    assert "state.callables.k" in capsys.readouterr().err
