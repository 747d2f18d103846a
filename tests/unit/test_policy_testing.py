"""Policy test files: the shipped mission-control tests, how cases differ from expectations, the
overrides (a copy, never the loaded policy), and the exact message for every bad test file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_preconditions.drivers.policy_tests import (
    case_policy,
    load_tests,
    parse_test_file,
    report,
    run_tests,
)
from mcp_preconditions.errors import InputError, PolicyError, ToolsFileError
from mcp_preconditions.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "mission-control.toml"
TOOLS = ROOT / "examples" / "mission-control-tools.json"
ALICE = '{ sub = "alice", role = "mission_control", scope = "mission:write" }'


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def write_tests(tmp_path: Path, cases: str, head: str | None = None) -> Path:
    path = tmp_path / "p.tests.toml"
    head = head if head is not None else f'policy = "{POLICY}"\ntools = "{TOOLS}"\n'
    path.write_text(head + cases, encoding="utf-8")
    return path


def problems_of(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_tests(path)
    return str(info.value)


# --- the shipped file ---------------------------------------------------------------------------
def test_the_mission_control_tests_all_pass() -> None:
    results = run_tests(load_tests(ROOT / "policies" / "mission-control.tests.toml"))
    assert len(results) >= 6
    assert [r.differences for r in results] == [()] * len(results)
    assert report(results).splitlines()[-1] == f"{len(results)} passed, 0 failed"


def test_the_shipped_tests_ignore_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PRECONDITIONS_ENVIRONMENT", "staging")
    results = run_tests(load_tests(ROOT / "policies" / "mission-control.tests.toml"))
    assert all(r.passed for r in results)


# --- cases --------------------------------------------------------------------------------------
def test_differences_name_the_tool_and_what_differs(tmp_path: Path) -> None:
    path = write_tests(tmp_path, f"""
[[cases]]
name = "wrong on purpose"
claims = {ALICE}
arguments = {{ vehicle = "Starship" }}
state = {{ "weather.clear" = false }}
expect.launch_rocket = {{ allowed = false, unmet = ["env:production"], withheld = 0 }}
expect.fuel_status = {{ allowed = true }}
expect.get_weather = {{ allowed = false }}
""")
    [result] = run_tests(load_tests(path))
    assert result.differences == (
        "launch_rocket: unmet [state:weather.clear], expected [env:production] (expected but met: "
        "[env:production]; unmet but not expected: [state:weather.clear])",
        "launch_rocket: withheld 1, expected 0",
        "fuel_status: expected allowed, got denied (unmet [state:range.safety_officer_on_duty])",
        "get_weather: expected denied, got allowed",
    )
    assert report([result]) == "\n".join([
        "FAIL  wrong on purpose",
        *(f"      {d}" for d in result.differences),
        "0 passed, 1 failed"])


def test_unmet_compares_as_a_set(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
[[cases]]
name = "anonymous, unmet listed out of order"
expect.launch_rocket = { allowed = false, unmet = [
  "capability:rocket.launch", "auth:oauth2", "auth:claim:role:mission_control"] }
""")
    assert [r.passed for r in run_tests(load_tests(path))] == [True]


def test_a_missing_unmet_requirement_is_reported(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
[[cases]]
name = "anonymous"
expect.launch_rocket = { allowed = false, unmet = ["auth:oauth2"] }
""")
    [result] = run_tests(load_tests(path))
    assert result.differences == (
        "launch_rocket: unmet [auth:oauth2, auth:claim:role:mission_control, capability:rocket.launch], "
        "expected [auth:oauth2] (unmet but not expected: [auth:claim:role:mission_control, "
        "capability:rocket.launch])",)


def test_overrides_build_a_copy_and_leave_the_policy_alone(tmp_path: Path) -> None:
    path = write_tests(tmp_path, f"""
[[cases]]
name = "everything overridden"
claims = {ALICE}
state = {{ "weather.clear" = false }}
flags = {{ "telemetry.v2" = true }}
environment = ["staging"]
expect.stream_telemetry_v2 = {{ allowed = true }}
""")
    tests = load_tests(path)
    before = tests.policy.policy.model_dump()
    copy = case_policy(tests.policy, tests.cases[0]).policy
    assert copy.state.values == {"weather.clear": False, "range.safety_officer_on_duty": False}
    assert copy.features.flags == {"launch_window.open": True, "telemetry.v2": True}
    assert (copy.environment, copy.environment_variable) == (["staging"], None)
    assert tests.policy.policy.model_dump() == before
    assert tests.policy.policy.state.values["weather.clear"] is True


def test_without_a_tools_file_the_policy_tools_are_tested(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
[[cases]]
name = "observer"
claims = { sub = "bob", role = "observer", scope = "mission:read" }
expect.read_telemetry = { allowed = true }
expect.abort_launch = { allowed = false, unmet = ["capability:rocket.abort", "auth:scope:mission:write"] }
""", head=f'policy = "{POLICY}"\n')
    tests = load_tests(path)
    assert tests.tools == {}
    assert [r.passed for r in run_tests(tests)] == [True]


def test_paths_are_relative_to_the_test_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "p.toml").write_text('[tools.t]\nrequirements = ["env:x"]\n', encoding="utf-8")
    (tmp_path / "tools.json").write_text('[{"name": "t"}, {"name": "u"}]', encoding="utf-8")
    path = tmp_path / "sub" / "p.tests.toml"
    path.write_text('policy = "p.toml"\ntools = "../tools.json"\n[[cases]]\nname = "x"\n'
                    'environment = ["x"]\nexpect.t = { allowed = true }\nexpect.u = { allowed = true }\n',
                    encoding="utf-8")
    monkeypatch.chdir(ROOT)
    assert [r.passed for r in run_tests(load_tests(path))] == [True]


# --- bad test files -----------------------------------------------------------------------------
def test_every_schema_problem_by_key_path(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
colour = "blue"
[[cases]]
name = ""
claims = "alice"
state = { "weather.clear" = "yes" }
expect.launch_rocket = { allowed = "no", unmett = [] }
[[cases]]
name = "no expectations"
""")
    text = problems_of(path)
    assert text.splitlines() == [
        f"{path}: invalid policy test file (7 problem(s)):",
        "  cases[0].name: String should have at least 1 character",
        "  cases[0].claims: Input should be a valid dictionary",
        '  cases[0].state."weather.clear": Input should be a valid boolean',
        "  cases[0].expect.launch_rocket.allowed: Input should be a valid boolean",
        "  cases[0].expect.launch_rocket.unmett: unknown key (a typo here would silently skip a check)",
        "  cases[1].expect: required key is missing",
        "  colour: unknown key (a typo here would silently skip a check)",
    ]


def test_consistency_problems(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
[[cases]]
name = "a"
expect.launch_rockt = { allowed = false }
expect.get_weather = { allowed = true, unmet = ["env:production"] }
[[cases]]
name = "a"
expect.launch_rocket = { allowed = false, unmet = ["auth:oauth2", "auth:oauth2"] }
""")
    known = ("launch_rocket, abort_launch, read_telemetry, schedule_maintenance, stream_telemetry_v2, "
             "fuel_status, get_weather")
    assert problems_of(path).splitlines() == [
        f"{path}: invalid policy test file (4 problem(s)):",
        f"  cases[0].expect.launch_rockt: unknown tool (known tools: {known})",
        "  cases[0].expect.get_weather: an allowed tool has no unmet requirements",
        "  cases[1].name: duplicate case name 'a' (first at cases[0])",
        "  cases[1].expect.launch_rocket.unmet: lists a requirement more than once",
    ]


def test_a_toml_date_is_not_a_claim(tmp_path: Path) -> None:
    path = write_tests(tmp_path, """
[[cases]]
name = "dated"
claims = { sub = "x", nested = { exp = 2030-01-01T00:00:00Z } }
expect.get_weather = { allowed = true }
""")
    assert problems_of(path).splitlines() == [
        f"{path}: invalid policy test file (1 problem(s)):",
        "  cases[0].claims: nested.exp: a TOML date or time is not a JSON value "
        "(use a number or a string)",
    ]


def test_no_cases(tmp_path: Path) -> None:
    path = write_tests(tmp_path, "cases = []\n")
    assert problems_of(path).splitlines() == [
        f"{path}: invalid policy test file (1 problem(s)):",
        "  cases: List should have at least 1 item after validation, not 0"]


def test_bad_toml_and_bad_bytes() -> None:
    with pytest.raises(InputError) as info:
        parse_test_file(b"policy = \n", "x.toml")
    assert str(info.value) == ("x.toml: invalid policy test file (1 problem(s)):\n"
                               "  (file): not valid TOML: Invalid value (at line 1, column 10)")
    with pytest.raises(InputError) as info:
        parse_test_file(b'policy = "\xff"', "x.toml")
    assert str(info.value) == ("x.toml: invalid policy test file (1 problem(s)):\n"
                               "  (file): not UTF-8 (invalid start byte at byte 10)")


def test_a_missing_test_file(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "none.toml") == f"{tmp_path / 'none.toml'}: cannot read: " \
                                                  "No such file or directory"


def test_a_missing_policy_is_named(tmp_path: Path) -> None:
    path = write_tests(tmp_path, '[[cases]]\nname = "x"\nexpect.t = { allowed = true }\n',
                       head='policy = "gone.toml"\n')
    with pytest.raises(PolicyError) as info:
        load_tests(path)
    assert str(info.value) == (f"{tmp_path / 'gone.toml'}: invalid policy (1 problem(s)):\n"
                               "  (file): cannot read: No such file or directory")


def test_a_missing_tools_file_is_named(tmp_path: Path) -> None:
    path = write_tests(tmp_path, '[[cases]]\nname = "x"\nexpect.t = { allowed = true }\n',
                       head=f'policy = "{POLICY}"\ntools = "gone.json"\n')
    with pytest.raises(ToolsFileError) as info:
        load_tests(path)
    assert str(info.value) == f"{tmp_path / 'gone.json'}: cannot read: No such file or directory"


def test_the_loaded_policy_is_the_one_named(tmp_path: Path) -> None:
    path = write_tests(tmp_path, '[[cases]]\nname = "x"\nexpect.get_weather = { allowed = true }\n')
    assert load_tests(path).policy.revision == load_policy(POLICY).revision


def test_resolver_errors_are_shown_when_a_case_fails(tmp_path: Path) -> None:
    # os:getcwd returns a string, not a boolean: the state lookup ends as `error` (fail closed).
    (tmp_path / "p.toml").write_text('[state.callables]\n"door.open" = "os:getcwd"\n'
                                     '[tools.enter]\nrequirements = ["state:door.open"]\n',
                                     encoding="utf-8")
    path = write_tests(tmp_path, '[[cases]]\nname = "x"\nexpect.enter = { allowed = true }\n',
                       head='policy = "p.toml"\n')
    [result] = run_tests(load_tests(path))
    assert result.differences == ("enter: expected allowed, got denied (unmet [state:door.open])",
                                  "enter: resolver errors: [state:door.open]")


def test_absurd_nesting_is_a_clean_error() -> None:
    with pytest.raises(InputError) as info:
        parse_test_file(b"a = " + b"[" * 5000 + b"]" * 5000, "x.toml")
    assert str(info.value) == ("x.toml: invalid policy test file (1 problem(s)):\n"
                               "  (file): not usable TOML: nested too deeply")


def test_a_case_calls_with_its_arguments(tmp_path: Path) -> None:
    path = write_tests(tmp_path, f"""
[[cases]]
name = "a vehicle the range does not fly"
claims = {ALICE}
arguments = {{ vehicle = "Saturn V" }}
expect.launch_rocket = {{ allowed = true }}
""")
    [result] = run_tests(load_tests(path))
    assert result.differences == (
        "launch_rocket: expected allowed, got denied (unmet [capability:rocket.launch])",)


def test_tools_that_fail_start_up_validation(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('[tools.t]\nrequirements = ["auth:oauth3"]\n', encoding="utf-8")
    path = write_tests(tmp_path, '[[cases]]\nname = "x"\nexpect.t = { allowed = true }\n',
                       head='policy = "p.toml"\n')
    assert problems_of(path) == (
        f"{path}: the tools under test fail start-up validation (1 problem(s)):\n"
        f"  {tmp_path / 'p.toml'}: tool 't': requirement 'auth:oauth3': unknown auth form "
        "(accepted forms: auth:oauth2, "
        "auth:claim:NAME:VALUE, auth:scope:SCOPE)")
