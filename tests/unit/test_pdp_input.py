"""`[pdp.NAME]` on the command line (SPEC §16): every bad table is one line naming the key path and
exit 2 (a missing or non-HTTP(S) `url`, http off loopback, an unknown key, a token that is not an
`env:` reference or names an unset variable, a `pdp:NAME` with no such table, with the tables that
exist); `lint` knows the namespace; `check` asks no decision point for an anonymous caller.
Exact output, in-process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_main import ERR, run, write


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PDP_TOKEN", raising=False)


URL_RULE = ("must be an https URL (or http on a loopback address) with no query or fragment: the "
            "decision point's base, before /access/v1/evaluation")


@pytest.mark.parametrize(("body", "problem"), [
    ("timeout_seconds = 1\n", "pdp.corp.url: Field required"),
    ('url = "ftp://pdp.example.com"\n', f"pdp.corp.url: {URL_RULE}"),
    ('url = "pdp.example.com"\n', f"pdp.corp.url: {URL_RULE}"),
    ('url = "https://pdp.example.com/?x=1"\n', f"pdp.corp.url: {URL_RULE}"),
    ('url = "http://pdp.example.com"\n',
     "pdp.corp.url: http is allowed on a loopback address only (127.0.0.1, ::1, "
     "localhost), got host 'pdp.example.com': use https"),
    ('url = "https://pdp.example.com"\ncache_secs = 3\n',
     "pdp.corp.cache_secs: unknown key (a typo here would silently weaken the policy)"),
    ('url = "https://pdp.example.com"\ntoken = "hunter2"\n',
     "pdp.corp.token: must be env:VAR, naming an environment variable (a secret is "
     "never written in a policy)"),
    ('url = "https://pdp.example.com"\ntimeout_seconds = "1"\n',
     "pdp.corp.timeout_seconds: Input should be a valid number"),
    ('url = "https://pdp.example.com"\nsubject_claims = "roles"\n',
     "pdp.corp.subject_claims: Input should be a valid list"),
])
def test_every_pdp_table_problem_is_one_line_by_key_path(
        capsys: pytest.CaptureFixture[str], body: str, problem: str) -> None:
    write("p.toml", f"[pdp.corp]\n{body}")
    assert run(capsys, "policy", "validate", "p.toml") == (2, "", f"{ERR}p.toml: {problem}\n")


def test_a_pdp_with_no_such_table_names_the_tables_there_are(
        capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[pdp.corp]\nurl = "https://pdp.example.com"\n'
                    '[tools.x]\nrequirements = ["pdp:crop"]\n')
    assert run(capsys, "policy", "validate", "p.toml") == (2, "", (
        f"{ERR}p.toml: tools.x.requirements[0]: requirement 'pdp:crop': the policy defines no "
        "decision point 'crop' (defined: 'corp') (accepted forms: pdp:NAME, where the policy "
        "defines [pdp.NAME])\n"))


def test_a_token_variable_that_is_not_set_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[pdp.corp]\nurl = "https://pdp.example.com"\ntoken = "env:PDP_TOKEN"\n'
                    '[tools.x]\nrequirements = ["pdp:corp"]\n')
    write("tools.json", '[{"name": "x"}]')
    assert run(capsys, "check", "--policy", "p.toml", "--tools", "tools.json") == (
        2, "", f"{ERR}p.toml: pdp.corp.token: environment variable PDP_TOKEN is not set\n")


def test_lint_knows_the_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[pdp.corp]\nurl = "https://pdp.example.com"\n'
                    '[pdp.spare]\nurl = "http://127.0.0.1:8592"\n')
    write("tools.json", json.dumps([{"name": "x", "execution": {"requirements": ["pdp:corp"]}},
                                    {"name": "y", "execution": {"requirements": ["pdp:corp "]}}]))
    code, out, _ = run(capsys, "lint", "--tools", "tools.json", "--policy", "p.toml")
    assert code == 1
    assert out.splitlines()[0] == (
        "tools.json: error: tool 'y': requirement 'pdp:corp ': the policy defines no decision "
        "point 'corp ' (defined: 'corp', 'spare') (accepted forms: pdp:NAME, where the policy "
        "defines [pdp.NAME])")
    assert "p.toml: warning: tool '(policy pdp.spare)': no tool requires pdp:spare" in out
    assert "unknown namespace" not in out


def test_a_grant_may_not_name_a_pdp(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[pdp.corp]\nurl = "https://pdp.example.com"\n'
                    '[[capabilities.grants]]\ncapabilities = ["c"]\nwhen = ["pdp:corp"]\n')
    write("tools.json", '[{"name": "x"}]')
    code, out, _ = run(capsys, "lint", "--tools", "tools.json", "--policy", "p.toml")
    assert code == 1
    assert out.splitlines()[0] == (
        "p.toml: error: tool '(policy capabilities.grants[0].when)': requirement 'pdp:corp': a "
        "decision point decides a call to a tool, after its other requirements: it is not a grant "
        "condition")


def test_check_asks_no_pdp_for_an_anonymous_caller(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[pdp.corp]\nurl = "http://127.0.0.1:9"\n[tools.x]\nrequirements = '
                    '["pdp:corp"]\n')
    write("tools.json", '[{"name": "x"}]')
    code, out, _ = run(capsys, "check", "--policy", "p.toml", "--tools", "tools.json", "--format",
                       "json")
    assert code == 0
    assert json.loads(out)["tools"][0]["unmet"] == ["pdp:corp"]


def test_check_asks_the_pdp_for_a_verified_caller_and_not_for_a_refused_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fixtures.misbehaving_pdp import misbehaving_pdp

    write("tools.json", '[{"name": "x"}]')
    write("ops.json", '{"sub": "ada", "team": "ops"}')
    write("sales.json", '{"sub": "ada", "team": "sales"}')
    with misbehaving_pdp("500") as pdp:
        write("p.toml", f'[pdp.corp]\nurl = "{pdp.url}"\n[tools.x]\nrequirements = '
                        '["auth:claim:team:ops", "pdp:corp"]\n')
        code, out, _ = run(capsys, "check", "--policy", "p.toml", "--tools", "tools.json",
                           "--claims", "ops.json", "--tool", "x")
        assert (code, pdp.posts) == (0, 1)
        assert out.splitlines()[-3:] == [
            "  STATUS     REQUIREMENT          REASON",
            "  satisfied  auth:claim:team:ops  claim 'team' has 'ops'",
            "  error      pdp:corp (error)     the decision point 'corp' gave no decision"]
        code, out, _ = run(capsys, "check", "--policy", "p.toml", "--tools", "tools.json",
                           "--claims", "sales.json", "--tool", "x")
        assert (code, pdp.posts) == (0, 1)  # refused for its claim: the PDP is not asked
        assert out.splitlines()[-1] == ("  not_asked    pdp:corp             not asked: the call "
                                        "is refused for another requirement")
