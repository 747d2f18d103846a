"""`--resolver SPEC` on check, lint, policy validate, policy test and serve: a resolver in a plain .py
file (or an importable module) for one run, and one error line, exit 2, for every bad SPEC."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mcp_preconditions.cli._resolvers import add_resolver_option, resolvers_from
from mcp_preconditions.errors import InputError
from tests.fixtures.cli_main import run

RESOLVER = '''
from mcp_preconditions import Outcome


class ShiftResolver:
    """`shift:NAME`: satisfied for the day shift only."""

    namespace = "shift"

    def validate(self, requirement):
        return None if requirement.partition(":")[2] else "shift: needs a shift name"

    def resolve(self, requirement, context):
        name = requirement.partition(":")[2]
        return Outcome.satisfied(requirement, "day shift") if name == "day" else \\
            Outcome.unsatisfied(requirement, f"not the {name} shift")


resolver = ShiftResolver()
broken = 42


def factory():
    return ShiftResolver()


def exploding():
    raise RuntimeError("no config")
'''
TOOLS = [{"name": "day_job", "execution": {"requirements": ["shift:day"]}},
         {"name": "night_job", "execution": {"requirements": ["shift:night"]}}]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    (tmp_path / "shifts.py").write_text(RESOLVER, encoding="utf-8")
    (tmp_path / "t.json").write_text(json.dumps(TOOLS), encoding="utf-8")
    (tmp_path / "p.toml").write_text('[tools.day_job]\nrequirements = ["shift:day"]\n',
                                     encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("spec", ["shifts.py:resolver", "shifts.py:ShiftResolver", "shifts.py:factory"])
def test_check_with_a_resolver_from_a_file(capsys: pytest.CaptureFixture[str], workdir: Path,
                                           spec: str) -> None:
    code, out, err = run(capsys, "check", "--policy", "p.toml", "--tools", "t.json", "--resolver", spec,
                         "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["tools"] == [
        {"name": "day_job", "allowed": True, "unmet": [], "errors": []},
        {"name": "night_job", "allowed": False, "unmet": ["shift:night"], "errors": []}]


def test_without_the_resolver_the_namespace_is_unknown(capsys: pytest.CaptureFixture[str],
                                                       workdir: Path) -> None:
    code, _, err = run(capsys, "check", "--policy", "p.toml", "--tools", "t.json")
    assert code == 2
    assert err.startswith("mcp-preconditions: error: t.json: tool 'day_job': requirement 'shift:day': "
                          "unknown namespace 'shift' (known namespaces: 'approval', 'auth', ")


def test_a_module_on_sys_path(capsys: pytest.CaptureFixture[str], workdir: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(workdir))
    code, out, err = run(capsys, "lint", "--tools", "t.json", "--resolver", "shifts:resolver")
    assert (code, out, err) == (0, "0 error(s), 0 warning(s) in 2 tool(s)\n", "")


def test_policy_validate_knows_the_resolver_forms(capsys: pytest.CaptureFixture[str],
                                                  workdir: Path) -> None:
    (workdir / "bad.toml").write_text('[tools.x]\nrequirements = ["shift:"]\n', encoding="utf-8")
    code, _, err = run(capsys, "policy", "validate", "bad.toml", "--resolver", "shifts.py:resolver")
    assert (code, err) == (2, "mcp-preconditions: error: bad.toml: tools.x.requirements[0]: "
                              "requirement 'shift:': shift: needs a shift name (accepted forms: "
                              "shift:...)\n")
    code, out, err = run(capsys, "policy", "validate", "p.toml", "--resolver", "shifts.py:resolver")
    assert (code, err) == (0, "") and out.startswith("OK: p.toml (revision ")


@pytest.mark.parametrize(("spec", "message"), [
    ("shifts.py", "--resolver shifts.py: expected 'path/to/file.py:attribute' or 'module:attribute'"),
    ("shifts.py:", "--resolver shifts.py:: expected 'path/to/file.py:attribute' or 'module:attribute'"),
    ("missing.py:resolver", "--resolver missing.py: no such file"),
    ("shifts.py:nope", "--resolver shifts.py:nope: shifts.py has no attribute 'nope'"),
    ("shifts.py:broken", "--resolver shifts.py:broken: not a resolver (it needs a 'namespace' string "
                         "and 'validate' and 'resolve' methods), got int"),
    ("shifts.py:exploding", "--resolver shifts.py:exploding: creating the resolver failed: "
                            "RuntimeError: no config"),
    ("no_such_module_xyz:r", "--resolver no_such_module_xyz:r: cannot import no_such_module_xyz: "
                             "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("syntax.py:r", "--resolver syntax.py:r: cannot import syntax.py: SyntaxError: invalid syntax "
                    "(syntax.py, line 1)"),
])
def test_a_bad_resolver_is_one_line(capsys: pytest.CaptureFixture[str], workdir: Path, spec: str,
                                    message: str) -> None:
    (workdir / "syntax.py").write_text("def (:\n", encoding="utf-8")
    for command in (["check", "--policy", "p.toml", "--tools", "t.json"], ["lint", "--tools", "t.json"],
                    ["policy", "validate", "p.toml"], ["serve", "--policy", "p.toml"]):
        assert run(capsys, *command, "--resolver", spec) == (
            2, "", f"mcp-preconditions: error: {message}\n"), command


def test_the_option_repeats_and_keeps_order(workdir: Path) -> None:
    (workdir / "tickets.py").write_text(RESOLVER.replace('"shift"', '"ticket"'), encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_resolver_option(parser)
    args = parser.parse_args(["--resolver", "tickets.py:resolver", "--resolver", "shifts.py:factory"])
    assert [r.namespace for r in resolvers_from(args)] == ["ticket", "shift"]
    assert resolvers_from(parser.parse_args([])) == []


def test_two_resolvers_for_one_namespace_name_both_options(capsys: pytest.CaptureFixture[str],
                                                           workdir: Path) -> None:
    (workdir / "other.py").write_text(RESOLVER, encoding="utf-8")
    code, out, err = run(capsys, "lint", "--tools", "t.json", "--resolver", "shifts.py:resolver",
                         "--resolver", "other.py:factory")
    assert (code, out, err) == (2, "", (
        "mcp-preconditions: error: --resolver other.py:factory: namespace 'shift' is already given "
        "by --resolver shifts.py:resolver (one resolver per namespace)\n"))


def test_a_resolver_for_a_builtin_namespace_names_both_files(capsys: pytest.CaptureFixture[str],
                                                             workdir: Path) -> None:
    import mcp_preconditions.resolvers.env as builtin

    (workdir / "envs.py").write_text(RESOLVER.replace('"shift"', '"env"'), encoding="utf-8")
    code, out, err = run(capsys, "lint", "--tools", "t.json", "--resolver", "envs.py:resolver")
    assert (code, out, err) == (2, "", (
        f"mcp-preconditions: error: two resolvers for namespace 'env': EnvResolver "
        f"({builtin.__file__}) and ShiftResolver ({workdir / 'envs.py'})\n"))


def test_resolvers_from_raises_input_error(workdir: Path) -> None:
    with pytest.raises(InputError):
        resolvers_from(argparse.Namespace(resolver=["shifts.py:nope"]))


def test_policy_test_with_a_resolver_from_a_file(capsys: pytest.CaptureFixture[str],
                                                 workdir: Path) -> None:
    (workdir / "p.tests.toml").write_text(
        'policy = "p.toml"\ntools = "t.json"\n[[cases]]\nname = "shifts"\n'
        "expect.day_job = { allowed = true }\n"
        'expect.night_job = { allowed = false, unmet = ["shift:night"] }\n', encoding="utf-8")
    code, out, err = run(capsys, "policy", "test", "p.tests.toml", "--resolver", "shifts.py:resolver")
    assert (code, out, err) == (0, "PASS  shifts\n1 passed, 0 failed\n", "")
    code, _, err = run(capsys, "policy", "test", "p.tests.toml")
    assert code == 2 and "unknown namespace 'shift'" in err
