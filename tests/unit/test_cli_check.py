"""`mcp-preconditions check`: the guard's decision per tool for one principal, run in-process."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.fixtures.cli_main import run

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "mission-control.toml")
TOOLS = str(ROOT / "examples" / "mission-control-tools.json")
OBSERVER = str(ROOT / "examples" / "claims" / "observer.json")
MISSION_CONTROL = str(ROOT / "examples" / "claims" / "mission-control.json")


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def check_json(capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--format", "json",
                         *extra)
    assert (code, err) == (0, "")
    return json.loads(out)


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return name


# --- the done-when check ------------------------------------------------------------------------
def test_an_observer_may_not_launch_and_is_told_exactly_why(capsys: pytest.CaptureFixture[str]) -> None:
    result = check_json(capsys, "--claims", OBSERVER)
    launch = result["tools"][0]
    assert launch == {"name": "launch_rocket", "allowed": False,
                      "unmet": ["auth:claim:role:mission_control", "capability:rocket.launch"],
                      "errors": []}


def test_the_json_lists_every_tool_in_file_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_json(capsys, "--claims", OBSERVER) == {"tools": [
        {"name": "launch_rocket", "allowed": False,
         "unmet": ["auth:claim:role:mission_control", "capability:rocket.launch"], "errors": []},
        {"name": "abort_launch", "allowed": False,
         "unmet": ["capability:rocket.abort", "auth:scope:mission:write"], "errors": []},
        {"name": "read_telemetry", "allowed": True, "unmet": [], "errors": []},
        {"name": "schedule_maintenance", "allowed": False,
         "unmet": ["env:staging", "auth:claim:realm_roles:engineer"], "errors": []},
        {"name": "stream_telemetry_v2", "allowed": False, "unmet": ["feature:telemetry.v2"], "errors": []},
        {"name": "fuel_status", "allowed": False, "unmet": ["state:range.safety_officer_on_duty"],
         "errors": []},
        {"name": "get_weather", "allowed": True, "unmet": [], "errors": []},
    ]}


def test_mission_control_may_launch(capsys: pytest.CaptureFixture[str]) -> None:
    tools = {t["name"]: t["allowed"] for t in check_json(
        capsys, "--claims", MISSION_CONTROL, "--arguments", '{"vehicle": "Falcon 9"}')["tools"]}
    assert tools == {"launch_rocket": True, "abort_launch": True, "read_telemetry": True,
                     "schedule_maintenance": False, "stream_telemetry_v2": False,
                     "fuel_status": False, "get_weather": True}


def test_mission_control_may_not_launch_a_vehicle_the_policy_does_not_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--claims",
                         MISSION_CONTROL, "--tool", "launch_rocket", "--arguments",
                         '{"vehicle": "saturn5"}')
    assert (code, err) == (0, "")
    assert "launch_rocket  DENIED    capability:rocket.launch\n" in out
    assert ('capability \'rocket.launch\' not granted: token claim \'capabilities\' does not list '
            'it; grant #0: argument /vehicle is "saturn5" (allowed: "Falcon 9", "Falcon Heavy", '
            '"Starship")') in out
    assert "weather.clear (confidential)  state" in out  # confidential: marked, never explained away


@pytest.mark.parametrize(("value", "message"), [
    ("[1]", "--arguments: the call's arguments must be a JSON object, got array"),
    ("{", "--arguments: not valid JSON (line 1, column 2): Expecting property name enclosed in "
          "double quotes"),
    ('{"vehicle": ["\\ud800"]}', "--arguments: vehicle[0]: lone surrogate \\ud800: not Unicode text"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], value: str,
                                              message: str) -> None:
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--arguments", value)
    assert (code, out, err) == (2, "", f"mcp-preconditions: error: {message}\n")


def test_arguments_from_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    path = tmp_path / "args.json"
    path.write_text('{"vehicle": "Starship"}', encoding="utf-8")
    tools = {t["name"]: t["allowed"] for t in check_json(
        capsys, "--claims", MISSION_CONTROL, "--arguments", f"@{path}")["tools"]}
    assert tools["launch_rocket"] is True


def test_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--claims", OBSERVER)
    assert (code, err) == (0, "")
    revision = out.splitlines()[0].rsplit(" ", 1)[1].rstrip(")")
    assert out == f"""policy: {POLICY} (revision {revision})
principal: bob (claims from {OBSERVER})

TOOL                  DECISION  UNMET
launch_rocket         DENIED    auth:claim:role:mission_control, capability:rocket.launch
abort_launch          DENIED    capability:rocket.abort, auth:scope:mission:write
read_telemetry        ALLOWED
schedule_maintenance  DENIED    env:staging, auth:claim:realm_roles:engineer
stream_telemetry_v2   DENIED    feature:telemetry.v2
fuel_status           DENIED    state:range.safety_officer_on_duty
get_weather           ALLOWED
"""


# --- --tool -------------------------------------------------------------------------------------
def test_one_tool_with_its_outcomes(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_json(capsys, "--claims", OBSERVER, "--tool", "abort_launch") == {"tools": [{
        "name": "abort_launch", "allowed": False,
        "unmet": ["capability:rocket.abort", "auth:scope:mission:write"], "errors": [],
        "outcomes": [
            {"requirement": "auth:oauth2", "status": "satisfied",
             "reason": "access token verified (claims)"},
            {"requirement": "capability:rocket.abort", "status": "unsatisfied",
             "reason": "capability 'rocket.abort' not granted: token claim 'capabilities' does not "
                       "list it; grant #1 needs auth:claim:role:mission_control (claim 'role' does "
                       "not have 'mission_control')"},
            {"requirement": "auth:scope:mission:write", "status": "unsatisfied",
             "reason": "token lacks scope 'mission:write'"},
        ]}]}


def test_one_tool_without_requirements(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_json(capsys, "--tool", "get_weather") == {"tools": [
        {"name": "get_weather", "allowed": True, "unmet": [], "errors": [], "outcomes": []}]}
    code, out, _ = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--tool", "get_weather")
    assert (code, out.splitlines()[3:]) == (0, [
        "TOOL         DECISION  UNMET", "get_weather  ALLOWED", "", "get_weather: ALLOWED",
        "  (no requirements)"])


def test_the_table_marks_confidential_requirements(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    policy = write(tmp_path, "p.toml", 'confidential = ["state:weather.clear"]\n'
                                       '[tools.launch_rocket]\nrequirements = ["state:weather.clear"]\n')
    tools = write(tmp_path, "t.json", '[{"name": "launch_rocket"}]')
    code, out, err = run(capsys, "check", "--policy", policy, "--tools", tools, "--tool", "launch_rocket")
    assert (code, err) == (0, "")
    assert out.splitlines()[3:] == [
        "TOOL           DECISION  UNMET",
        "launch_rocket  DENIED    state:weather.clear (confidential)",
        "",
        "launch_rocket: DENIED",
        "  STATUS       REQUIREMENT                         REASON",
        "  unsatisfied  state:weather.clear (confidential)  state 'weather.clear' is not known to any "
        "state source",
    ]


def test_resolver_errors_are_listed_and_marked(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # os:getcwd returns a string, not a boolean: the state lookup ends as `error` (fail closed).
    policy = write(tmp_path, "p.toml", '[state.callables]\n"door.open" = "os:getcwd"\n')
    tools = write(tmp_path, "t.json", '[{"name": "enter", "execution": {"requirements": '
                                      '["state:door.open"]}}]')
    code, out, err = run(capsys, "check", "--policy", policy, "--tools", tools, "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"tools": [{"name": "enter", "allowed": False,
                                          "unmet": ["state:door.open"], "errors": ["state:door.open"]}]}
    code, out, _ = run(capsys, "check", "--policy", policy, "--tools", tools)
    assert out.splitlines()[-1] == "enter  DENIED    state:door.open (error)"


# --- principals ---------------------------------------------------------------------------------
def test_anonymous_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    launch = check_json(capsys)["tools"][0]
    assert launch["unmet"] == ["auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch"]


def test_an_unverifiable_token_is_reported_and_denied(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--token", "abc.def.ghi",
                         "--tool", "read_telemetry", "--format", "json")
    assert code == 0
    assert err.startswith("mcp-preconditions: warning: the token was not accepted: ")
    assert "abc.def.ghi" not in err + out
    result = json.loads(out)["tools"][0]
    assert (result["allowed"], result["unmet"][0]) == (False, "auth:oauth2")


def test_a_token_verified_by_a_static_key(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    policy = write(tmp_path, "p.toml", '[auth]\nissuer = "https://issuer.test"\naudience = "urn:test"\n'
                                       'public_keys_pem = ["key.pem"]\nalgorithms = ["ES256"]\n'
                                       '[tools.t]\nrequirements = ["auth:oauth2", "auth:claim:role:pilot"]\n')
    tools = write(tmp_path, "t.json", '[{"name": "t"}]')
    now = int(time.time())
    token = jwt.encode({"iss": "https://issuer.test", "aud": "urn:test", "sub": "alice", "role": "pilot",
                        "iat": now, "exp": now + 600}, key, algorithm="ES256")
    code, out, err = run(capsys, "check", "--policy", policy, "--tools", tools, "--token", token)
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == ["principal: alice (verified jwt token)", "", "TOOL  DECISION  UNMET",
                                    "t     ALLOWED"]


def test_a_token_from_standard_input(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("abc.def.ghi\n"))
    code, out, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--token", "-")
    assert code == 0
    assert err.startswith("mcp-preconditions: warning: the token was not accepted: ")
    assert "principal: none: " in out


def test_an_empty_token_is_bad_input(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--token", "-") == (
        2, "", "mcp-preconditions: error: --token: the token is empty\n")


def test_claims_and_token_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", "--policy", POLICY, "--tools", TOOLS, "--claims", OBSERVER,
                       "--token", "x")
    assert code == 2
    assert err.endswith("mcp-preconditions check: error: argument --token: not allowed with argument "
                        "--claims\n")


# --- bad input ----------------------------------------------------------------------------------
def test_an_unknown_tool_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tools = write(tmp_path, "t.json", '[{"name": "a"}, {"name": "b"}]')
    assert run(capsys, "check", "--policy", POLICY, "--tools", tools, "--tool", "c") == (
        2, "", "mcp-preconditions: error: --tool: no tool named 'c' in t.json (tools: a, b)\n")


def test_tools_failing_start_up_validation_exit_2_naming_them(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tools = write(tmp_path, "t.json", json.dumps([
        {"name": "ok", "execution": {"requirements": ["env:production"]}},
        {"name": "typo", "execution": {"requirements": ["auth:clam:role:x", "env:"]}},
        {"name": "garbage", "execution": {"requirements": "auth:oauth2"}},
    ]))
    assert run(capsys, "check", "--policy", POLICY, "--tools", tools) == (2, "", (
        "mcp-preconditions: error: t.json: tool 'typo': requirement 'auth:clam:role:x': unknown auth "
        "form (accepted forms: auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE)\n"
        "mcp-preconditions: error: t.json: tool 'typo': requirement 'env:': env: needs a label name "
        "(env:NAME) (accepted forms: env:NAME)\n"
        "mcp-preconditions: error: t.json: tool 'garbage': requirements must be a list of strings, "
        "got str\n"))


@pytest.mark.parametrize(("files", "argv", "message"), [
    ({}, ["--policy", "p.toml", "--tools", "t.json"],
     "p.toml: (file): cannot read: No such file or directory"),
    ({"p.toml": 'environment = "prod"\nenviroment = ["x"]\n'}, ["--policy", "p.toml", "--tools", "t.json"],
     "p.toml: environment: Input should be a valid list\n"
     "mcp-preconditions: error: p.toml: enviroment: unknown key (a typo here would silently weaken "
     "the policy)"),
    ({"p.toml": ""}, ["--policy", "p.toml", "--tools", "t.json"],
     "t.json: cannot read: No such file or directory"),
    ({"p.toml": "", "t.json": '{"tools": [{"name": "a"}, {"nam": "b"}]}'},
     ["--policy", "p.toml", "--tools", "t.json"], 't.json: tools[1]: missing "name"'),
    ({"p.toml": "", "t.json": "[]", "c.json": '{"sub": "x",}'},
     ["--policy", "p.toml", "--tools", "t.json", "--claims", "c.json"],
     "c.json: not valid JSON (line 1, column 13): Expecting property name enclosed in double quotes"),
    ({"p.toml": "", "t.json": "[]", "c.json": '"bob"'},
     ["--policy", "p.toml", "--tools", "t.json", "--claims", "c.json"],
     "c.json: expected a JSON object of claims, got string"),
])
def test_bad_files_exit_2_with_one_message(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, files: dict[str, str],
                                           argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        write(tmp_path, name, text)
    assert run(capsys, "check", *argv) == (2, "", f"mcp-preconditions: error: {message}\n")


def test_a_bad_requirement_is_blamed_on_the_file_it_came_from(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.toml", '[tools.a]\nrequirements = ["env:"]\n')
    write(tmp_path, "t.json", json.dumps([{"name": "a", "execution": {"requirements": ["auth:bogus"]}}]))
    code, out, err = run(capsys, "check", "--policy", "p.toml", "--tools", "t.json")
    assert (code, out) == (2, "")
    assert sorted(err.splitlines()) == [
        "mcp-preconditions: error: p.toml: tool 'a': requirement 'env:': env: needs a label name "
        "(env:NAME) (accepted forms: env:NAME)",
        "mcp-preconditions: error: t.json: tool 'a': requirement 'auth:bogus': unknown auth form "
        "(accepted forms: auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE)"]
