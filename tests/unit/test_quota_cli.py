"""Quotas on the command line: `[quotas.NAME]` validation (every problem by key path, strict
scalars), the JSON Schema, `check` (a fresh memory store, said so), `policy test` (`quota_used`) and
`lint` (an undefined quota, a quota no tool requires). Exact output, in-process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_preconditions.policy import load_policy, parse_policy
from tests.fixtures.cli_main import ERR, run, write

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


@pytest.mark.parametrize(("body", "problems"), [
    ('calls = 3.0\nper_seconds = "60"\nby = "Subject"\nstore = "disk"\nburst = 2\n', [
        "quotas.q.calls: Input should be a valid integer",
        "quotas.q.per_seconds: Input should be a valid number",
        "quotas.q.by: Input should be 'subject', 'client' or 'global'",
        "quotas.q.store: Input should be 'memory' or 'redis'",
        "quotas.q.burst: unknown key (a typo here would silently weaken the policy)"]),
    ("calls = true\nper_seconds = true\n", ["quotas.q.calls: Input should be a valid integer",
                                            "quotas.q.per_seconds: Input should be a valid number"]),
    ("calls = 0\nper_seconds = -1\n", ["quotas.q.calls: Input should be greater than 0",
                                       "quotas.q.per_seconds: Input should be greater than 0"]),
    ("per_seconds = nan\n", ["quotas.q.calls: Field required",
                             "quotas.q.per_seconds: Input should be a finite number"]),
    ("calls = 2000001\nper_seconds = 2\n",
     ["quotas.q: at most 1,000,000 calls per second (calls / per_seconds)"]),
    ('calls = 1\nper_seconds = 1\nstore = "redis"\n',
     ['quotas.q.store: store = "redis" needs a [state.redis] connection']),
])
def test_every_quota_problem_by_key_path(capsys: pytest.CaptureFixture[str], body: str,
                                         problems: list[str]) -> None:
    write("p.toml", f"[quotas.q]\n{body}")
    assert run(capsys, "policy", "validate", "p.toml") == (
        2, "", "".join(f"{ERR}p.toml: {p}\n" for p in problems))


def test_a_redis_quota_with_a_connection_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", '[quotas."a.b"]\ncalls = 1\nper_seconds = 0.5\nby = "client"\nstore = "redis"\n'
                    '[state.redis]\nurl = "redis://127.0.0.1:1/0"\nquota_prefix = "q:"\n')
    code, out, err = run(capsys, "policy", "validate", "p.toml")
    assert (code, err) == (0, "") and out.startswith("OK: p.toml")


def test_the_schema_describes_quotas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "policy", "schema")
    schema = json.loads(out)
    quota = schema["$defs"]["Quota"]
    assert code == 0 and schema["properties"]["quotas"]["additionalProperties"] == {
        "$ref": "#/$defs/Quota"}
    assert sorted(quota["required"]) == ["calls", "per_seconds"]
    assert quota["additionalProperties"] is False
    assert quota["properties"]["by"]["enum"] == ["subject", "client", "global"]
    assert quota["properties"]["store"]["enum"] == ["memory", "redis"]


POLICY = """[quotas.hourly]
calls = 3
per_seconds = 3600
store = "redis"
[state.redis]
url = "redis://127.0.0.1:1/0"
[tools.launch]
requirements = ["auth:oauth2", "quota:hourly"]
"""


def test_check_counts_in_a_fresh_memory_store_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", POLICY)  # store = "redis" at a closed port: check never reaches it
    write("tools.json", '[{"name": "launch"}]')
    write("alice.json", '{"sub": "alice"}')
    revision = load_policy("p.toml").revision
    for _ in range(2):  # nothing is kept from one run (or one tool) to the next
        assert run(capsys, "check", "--policy", "p.toml", "--tools", "tools.json", "--claims",
                   "alice.json", "--tool", "launch") == (0, f"""policy: p.toml (revision {revision})
principal: alice (claims from alice.json)
quotas: counted in a fresh memory store: no earlier calls are counted and none is kept

TOOL    DECISION  UNMET
launch  ALLOWED

launch: ALLOWED
  STATUS     REQUIREMENT   REASON
  satisfied  auth:oauth2   access token verified (claims)
  satisfied  quota:hourly  quota 'hourly' has room: the call takes one unit (a fresh memory store: \
no earlier calls are counted and none is kept)
""", "")


def test_check_shows_the_quota_of_a_refused_call_as_not_asked(
        capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", POLICY)
    write("tools.json", '[{"name": "launch"}]')
    revision = load_policy("p.toml").revision
    base = ["check", "--policy", "p.toml", "--tools", "tools.json", "--tool", "launch"]
    # Anonymous: refused for its token, so no quota store is asked: no outcome, and not unmet.
    assert run(capsys, *base) == (0, f"""policy: p.toml (revision {revision})
principal: anonymous (no access token)
quotas: counted in a fresh memory store: no earlier calls are counted and none is kept

TOOL    DECISION  UNMET
launch  DENIED    auth:oauth2

launch: DENIED
  STATUS       REQUIREMENT   REASON
  unsatisfied  auth:oauth2   no access token
  not_asked    quota:hourly  not asked: the call is refused for another requirement
""", "")
    code, out, err = run(capsys, *base, "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"tools": [{
        "name": "launch", "allowed": False, "unmet": ["auth:oauth2"], "errors": [], "outcomes": [
            {"requirement": "auth:oauth2", "status": "unsatisfied", "reason": "no access token"},
            {"requirement": "quota:hourly", "status": "not_asked",
             "reason": "not asked: the call is refused for another requirement"}]}]}


TESTS = """policy = "p.toml"
[[cases]]
name = "room"
claims = {{ sub = "alice" }}
quota_used = {{ hourly = 2 }}
expect.launch = {{ allowed = true }}
[[cases]]
name = "used up"
claims = {{ sub = "alice" }}
quota_used = {{ {used} }}
expect.launch = {{ allowed = false, unmet = ["quota:hourly"] }}
"""


def test_policy_test_cases_state_the_units_used(capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", POLICY)
    write("p.tests.toml", TESTS.format(used="hourly = 3"))
    assert run(capsys, "policy", "test", "p.tests.toml") == (
        0, "PASS  room\nPASS  used up\n2 passed, 0 failed\n", "")


@pytest.mark.parametrize(("used", "problem"), [
    ("Hourly = 3", "cases[1].quota_used.Hourly: the policy defines no such quota (defined quotas: "
                   "'hourly')"),
    ("hourly = -1", "cases[1].quota_used.hourly: Input should be greater than or equal to 0"),
    ('hourly = "3"', "cases[1].quota_used.hourly: Input should be a valid integer"),
])
def test_a_bad_quota_used_is_named(capsys: pytest.CaptureFixture[str], used: str, problem: str) -> None:
    write("p.toml", POLICY)
    write("p.tests.toml", TESTS.format(used=used))
    assert run(capsys, "policy", "test", "p.tests.toml") == (2, "", f"{ERR}p.tests.toml: {problem}\n")


def test_the_shipped_everything_policy_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "policy", "test", str(ROOT / "policies" / "everything.tests.toml"))
    assert (code, err) == (0, "") and out.endswith("3 passed, 0 failed\n")


def test_lint_names_an_undefined_quota_and_one_no_tool_requires(
        capsys: pytest.CaptureFixture[str]) -> None:
    write("p.toml", POLICY + "[quotas.spare]\ncalls = 1\nper_seconds = 1\n")
    write("tools.json", '[{"name": "launch"}, {"name": "x", "execution": {"requirements": '
                        '["quota:hourly ", "quota:hourly"]}}]')
    code, out, _ = run(capsys, "lint", "--tools", "tools.json", "--policy", "p.toml")
    assert code == 1
    assert out.splitlines() == [
        "tools.json: error: tool 'x': requirement 'quota:hourly ': the policy defines no quota "
        "'hourly ' (defined quotas: 'hourly', 'spare') (accepted forms: quota:NAME, where the policy "
        "defines [quotas.NAME])",
        "tools.json: warning: tool 'x': requirement 'quota:hourly ' has leading or trailing "
        "whitespace (it matches only itself, exactly)",
        "p.toml: warning: tool 'x': no caller can ever be allowed: quota:hourly  (form rejected by "
        "resolver)",
        "p.toml: warning: tool '(policy quotas.spare)': no tool requires quota:spare",
        "1 error(s), 3 warning(s) in 2 tool(s)"]


def test_the_policy_on_the_quotas_page_is_valid() -> None:
    text = (ROOT / "docs" / "quotas.md").read_text(encoding="utf-8")
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    quota = parse_policy(example.encode(), "docs/quotas.md").policy.quotas["launch.hourly"]
    assert (quota.calls, quota.per_seconds, quota.by, quota.store) == (3, 3600, "subject", "memory")
