"""`argument_claims` on capability grants: an argument equal to a claim of the caller (exact, typed),
the policy's messages for a bad entry, the argument-dependent mark, aliases, explanations that never
show a claim's value, `lint` against an inputSchema, and `check --arguments` (SPEC §11, §16)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import Guard, Identity, Principal
from mcp_preconditions.cli import main
from mcp_preconditions.errors import PolicyError
from mcp_preconditions.policy.load import parse_policy, policy_schema
from mcp_preconditions.principal import ANONYMOUS_IDENTITY

ROOT = Path(__file__).resolve().parents[2]
MORTY = {"sub": "morty", "email": "morty@the-citadel.com", "roles": ["editor"]}


def policy(claims: str = '{ "/ownerID" = "email" }', extra: str = "") -> bytes:
    return (f'[[capabilities.grants]]\ncapabilities = ["todo.update"]\n'
            f'when = ["auth:claim:roles:editor"]\nargument_claims = {claims}\n'
            f'[tools.update_todo]\nrequirements = ["capability:todo.update"]\n{extra}').encode()


def update(arguments: Any, claims: dict[str, Any] | None = None, text: bytes | None = None) -> Any:
    guard = Guard(parse_policy(text or policy(), "p.toml"), entry_points=False)
    identity = (ANONYMOUS_IDENTITY if claims is None
                else Identity(principal=Principal.from_claims(claims)))
    return guard.decide("update_todo", identity, arguments, record=False)


@pytest.mark.parametrize(("claims", "problem"), [
    ('{ "ownerID" = "email" }', "capabilities.grants[0].argument_claims.ownerID: a JSON Pointer "
                                "starts with '/' (did you mean '/ownerID'?)"),
    ('{ "/ownerID" = "" }', 'capabilities.grants[0].argument_claims."/ownerID": String should have '
                            "at least 1 character"),
    ('{ "/ownerID" = ["email"] }', 'capabilities.grants[0].argument_claims."/ownerID": Input should '
                                   "be a valid string"),
    ('{ "/ownerID" = 1 }', 'capabilities.grants[0].argument_claims."/ownerID": Input should be a '
                           "valid string"),
])
def test_a_bad_entry_is_refused_naming_its_key_path(claims: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(policy(claims), "p.toml")
    assert err.value.problems == [problem]


def test_the_owner_may_change_its_own_todo_and_no_other() -> None:
    own = update({"ownerID": "morty@the-citadel.com"}, MORTY)
    other = update({"ownerID": "rick@the-citadel.com"}, MORTY)
    assert own.allowed and own.outcomes[0].argument_dependent
    assert not other.allowed and other.unmet == ("capability:todo.update",)
    assert other.outcomes[0].reason == (
        "capability 'todo.update' not granted: grant #0: argument /ownerID is "
        "\"rick@the-citadel.com\", not the caller's claim 'email'")
    assert other.argument_dependent == {"capability:todo.update"}  # a client never learns it


def test_each_call_is_decided_afresh_for_the_same_caller() -> None:
    """The caller memo keys a tool by listed values only: a claim grant must never be remembered
    (the same principal, first allowed, then another owner)."""
    guard = Guard(parse_policy(policy(), "p.toml"), entry_points=False)
    identity = Identity(principal=Principal.from_claims(MORTY))
    decided = [guard.decide("update_todo", identity, {"ownerID": owner}, record=False).allowed
               for owner in ("morty@the-citadel.com", "rick@the-citadel.com",
                             "morty@the-citadel.com")]
    assert decided == [True, False, True]


@pytest.mark.parametrize(("argument", "claim", "allowed"), [
    ("morty@the-citadel.com", "morty@the-citadel.com", True),
    ("Morty@the-citadel.com", "morty@the-citadel.com", False),  # no case folding
    ("morty@the-citadel.com ", "morty@the-citadel.com", False),  # no trimming
    (7, 7, True), ("7", 7, False), (7, "7", False),  # typed
    (True, True, True), (1, True, False), (True, 1, False),  # a boolean is not an integer
    (7.0, 7, False),  # a float argument never equals
    (["a"], ["a"], False), ({"a": 1}, {"a": 1}, False),  # arrays and objects never compare
])
def test_equality_is_typed_and_exact(argument: Any, claim: Any, allowed: bool) -> None:
    decision = update({"ownerID": argument}, {**MORTY, "email": claim})
    assert decision.allowed is allowed


def test_a_missing_claim_or_argument_never_matches() -> None:
    assert not update({}, {**MORTY, "email": None}).allowed
    assert not update({}, MORTY).allowed
    missing = update({"ownerID": "x"}, {"sub": "m", "roles": ["editor"]})
    assert missing.outcomes[0].reason.endswith(
        "argument /ownerID needs the caller's claim 'email', which is missing")


def test_an_array_claim_is_never_a_value_and_its_value_is_never_shown() -> None:
    decision = update({"ownerID": "team-a"}, {**MORTY, "email": ["team-a", "secret-team"]})
    assert not decision.allowed
    assert "secret-team" not in decision.outcomes[0].reason
    assert decision.outcomes[0].reason.endswith(
        "needs the caller's claim 'email', which is not a string, an integer or a boolean")


def test_an_anonymous_caller_is_refused() -> None:
    text = policy().replace(b'when = ["auth:claim:roles:editor"]\n', b"")
    assert not update({"ownerID": "morty@the-citadel.com"}, None, text).allowed


def test_a_claim_alias_reaches_a_nested_claim() -> None:
    text = policy('{ "/ownerID" = "mail" }', '[auth.claim_aliases]\nmail = ["profile", "email"]\n')
    claims = {**MORTY, "profile": {"email": "m@x"}}
    assert update({"ownerID": "m@x"}, claims, text).allowed
    assert not update({"ownerID": "morty@the-citadel.com"}, claims, text).allowed


def test_both_forms_on_one_grant_must_hold() -> None:
    text = policy('{ "/ownerID" = "email" }').replace(
        b"argument_claims", b'arguments = { "/kind" = ["chore"] }\nargument_claims')
    assert update({"ownerID": "morty@the-citadel.com", "kind": "chore"}, MORTY, text).allowed
    assert not update({"ownerID": "morty@the-citadel.com", "kind": "task"}, MORTY, text).allowed
    assert not update({"ownerID": "rick@the-citadel.com", "kind": "chore"}, MORTY, text).allowed


def test_lint_warns_about_a_pointer_or_type_the_schema_rules_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.toml").write_bytes(policy('{ "/owner" = "email", "/tags" = "email" }'))
    (tmp_path / "t.json").write_text('[{"name": "update_todo", "inputSchema": {"type": "object", '
                                     '"properties": {"tags": {"type": "array"}}}}]')
    assert main(["lint", "--policy", str(tmp_path / "p.toml"), "--tools",
                 str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{tmp_path / 'p.toml'}: warning: tool 'update_todo': capabilities.grants[0].argument_claims "
        "'/owner' can never match: /owner names no property of the tool's inputSchema",
        f"{tmp_path / 'p.toml'}: warning: tool 'update_todo': capabilities.grants[0].argument_claims "
        "'/tags' can never match: the inputSchema says /tags is array, and the claim 'email' is "
        "compared as a string, an integer or a boolean",
        "0 error(s), 2 warning(s) in 1 tool(s)"]


def test_the_todo_policy_lints_clean_against_its_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--strict", "--policy", str(ROOT / "policies" / "authzen-todo.toml"),
                 "--tools", str(ROOT / "examples" / "todo-tools.json")]) == 0
    assert capsys.readouterr().out.endswith("0 error(s), 0 warning(s) in 5 tool(s)\n")


def test_check_arguments_explains_a_claim_mismatch(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "morty.json").write_text('{"sub": "morty", "email": "morty@the-citadel.com", '
                                         '"roles": ["editor"]}')
    argv = ["check", "--policy", str(ROOT / "policies" / "authzen-todo.toml"), "--tools",
            str(ROOT / "examples" / "todo-tools.json"), "--claims", str(tmp_path / "morty.json"),
            "--tool", "update_todo", "--format", "json", "--arguments"]
    assert main([*argv, '{"ownerID": "morty@the-citadel.com"}']) == 0
    assert '"allowed": true' in capsys.readouterr().out
    assert main([*argv, '{"ownerID": "rick@the-citadel.com"}']) == 0
    out = capsys.readouterr().out
    assert '"allowed": false' in out
    assert "grant #4: argument /ownerID is \\\"rick@the-citadel.com\\\", not the caller's claim " \
           "'email'" in out


def test_the_todo_policy_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "test", str(ROOT / "policies" / "authzen-todo.tests.toml")]) == 0
    assert capsys.readouterr().out.endswith("7 passed, 0 failed\n")


def test_the_json_schema_exports_the_new_keys() -> None:
    schema = policy_schema()
    grant = schema["$defs"]["Grant"]["properties"]["argument_claims"]
    assert grant["additionalProperties"] == {"minLength": 1, "type": "string"}
    assert set(schema["$defs"]["PdpServer"]["properties"]) == {"url", "actions", "subjects"}
    assert schema["$defs"]["PdpServer"]["additionalProperties"] is False
