"""Argument conditions on capability grants: the policy's validation messages, JSON Pointer corners,
typed exact equality, explanations and the argument-dependent mark."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import Guard, Identity, Principal
from mcp_preconditions.arguments import MISSING, ArgumentCondition, parse_pointer, resolve_pointer
from mcp_preconditions.errors import PolicyError
from mcp_preconditions.policy.load import parse_policy

OPS = Identity(principal=Principal.from_claims({"sub": "ada", "role": "mission_control"}))


def grant_policy(arguments: str, extra: str = "") -> bytes:
    return (f'[[capabilities.grants]]\ncapabilities = ["rocket.launch"]\n'
            f'when = ["auth:claim:role:mission_control"]\narguments = {arguments}\n'
            f'[tools.launch_rocket]\nrequirements = ["capability:rocket.launch"]\n{extra}').encode()


def launch(arguments: Any, policy: str = '{ "/vehicle" = ["falcon9", "starship"] }',
           identity: Identity = OPS) -> Any:
    guard = Guard(parse_policy(grant_policy(policy), "p.toml"), entry_points=False)
    return guard.decide("launch_rocket", identity, arguments, record=False)


@pytest.mark.parametrize(("arguments", "problem"), [
    ('{ "vehicle" = ["x"] }', 'capabilities.grants[0].arguments.vehicle: a JSON Pointer starts with '
                              "'/' (did you mean '/vehicle'?)"),
    ('{ "" = ["x"] }', 'capabilities.grants[0].arguments."": the empty pointer names the whole '
                       "arguments object, never a scalar; use '/NAME'"),
    ('{ "/a~2" = ["x"] }', 'capabilities.grants[0].arguments."/a~2": \'~\' must be followed by \'0\' '
                           "(for '~') or '1' (for '/')"),
    ('{ "/v" = [] }', 'capabilities.grants[0].arguments."/v": List should have at least 1 item after '
                      "validation, not 0"),
    ('{ "/v" = [1.5] }', 'capabilities.grants[0].arguments."/v"[0]: must be a string, an integer or '
                         "a boolean, got float 1.5"),
    ('{ "/v" = ["ok", [1]] }', 'capabilities.grants[0].arguments."/v"[1]: must be a string, an '
                               "integer or a boolean, got array [1]"),
    ('{ "/v" = [{ a = 1 }] }', 'capabilities.grants[0].arguments."/v"[0]: must be a string, an '
                               "integer or a boolean, got table {'a': 1}"),
    ('{ "/v" = "falcon9" }', 'capabilities.grants[0].arguments."/v": Input should be a valid list'),
])
def test_bad_conditions_are_refused_naming_the_key_path(arguments: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(grant_policy(arguments), "p.toml")
    assert err.value.problems == [problem]


@pytest.mark.parametrize(("pointer", "tokens"), [
    ("/vehicle", ("vehicle",)), ("/a~1b", ("a/b",)), ("/t~0", ("t~",)), ("/~01", ("~1",)),
    ("/list/0", ("list", "0")), ("/", ("",)),
])
def test_pointers_are_parsed_as_rfc_6901_says(pointer: str, tokens: tuple[str, ...]) -> None:
    assert parse_pointer(pointer) == tokens


@pytest.mark.parametrize(("tokens", "expected"), [
    (("list", "0"), "a"), (("list", "1"), "b"), (("list", "2"), MISSING), (("list", "01"), MISSING),
    (("list", "-"), MISSING), (("list", "\u0661"), MISSING), (("a/b",), 1), (("t~",), 2),
    (("p", "kind"), "satellite"), (("p", "kind", "x"), MISSING), (("nope",), MISSING), (("",), 3),
])
def test_pointers_resolve_exactly(tokens: tuple[str, ...], expected: Any) -> None:
    document = {"list": ["a", "b"], "a/b": 1, "t~": 2, "p": {"kind": "satellite"}, "": 3}
    found = resolve_pointer(document, tokens)
    assert found is MISSING if expected is MISSING else found == expected


@pytest.mark.parametrize(("value", "listed", "matches"), [
    (1, [True], False), (True, [1], False), ("1", [1], False), (1, ["1"], False), (1.0, [1], False),
    (0, [False], False), ("falcon9", ["falcon9"], True), ("Falcon9", ["falcon9"], False),
    ("falcon9 ", ["falcon9"], False), ("f\u0430lcon9", ["falcon9"], False), (True, [True], True),
    (42, [42], True), (None, ["null"], False), (["falcon9"], ["falcon9"], False),
])
def test_equality_is_typed_and_exact(value: Any, listed: list[Any], matches: bool) -> None:
    condition = ArgumentCondition.of("/v", listed)
    assert (condition.failure({"v": value}) is None) is matches


def test_the_grant_applies_only_for_a_listed_vehicle() -> None:
    allowed = launch({"vehicle": "falcon9"})
    assert allowed.allowed
    assert allowed.outcomes[0].reason == "grant #0 gives 'rocket.launch'"
    denied = launch({"vehicle": "saturn5"})
    assert (denied.allowed, denied.unmet) == (False, ("capability:rocket.launch",))
    assert denied.outcomes[0].reason == ('capability \'rocket.launch\' not granted: grant #0: argument '
                                         '/vehicle is "saturn5" (allowed: "falcon9", "starship")')
    assert denied.argument_dependent == frozenset({"capability:rocket.launch"})


def test_a_missing_argument_means_the_grant_does_not_apply() -> None:
    for arguments in ({}, None, {"Vehicle": "falcon9"}):
        denied = launch(arguments)
        assert not denied.allowed
        assert denied.outcomes[0].reason.endswith("argument /vehicle is missing (allowed: "
                                                  '"falcon9", "starship")')


def test_every_pointer_must_match() -> None:
    policy = '{ "/vehicle" = ["falcon9"], "/payload/kind" = ["satellite"] }'
    assert launch({"vehicle": "falcon9", "payload": {"kind": "satellite"}}, policy).allowed
    assert not launch({"vehicle": "falcon9", "payload": {"kind": "crew"}}, policy).allowed
    assert not launch({"vehicle": "falcon9"}, policy).allowed


def test_a_caller_the_when_refuses_is_not_argument_dependent() -> None:
    observer = Identity(principal=Principal.from_claims({"sub": "bob", "role": "observer"}))
    denied = launch({"vehicle": "falcon9"}, identity=observer)
    assert not denied.allowed
    assert denied.argument_dependent == frozenset()  # no arguments would help: a client may learn it


def test_a_confidential_condition_is_never_named_in_an_explanation() -> None:
    source = parse_policy(
        b'confidential = ["state:pad.clear"]\n[state.values]\n"pad.clear" = false\n'
        b'[[capabilities.grants]]\ncapabilities = ["rocket.launch"]\nwhen = ["state:pad.clear"]\n'
        b'[tools.launch_rocket]\nrequirements = ["capability:rocket.launch"]\n', "p.toml")
    decision = Guard(source, entry_points=False).decide("launch_rocket", OPS, record=False)
    assert decision.outcomes[0].reason == ("capability 'rocket.launch' not granted: grant #0 needs "
                                           "a confidential requirement")
