"""Requirement strings (SPEC §2, §3): the namespace split, exact union, start-up validation errors and
lint warnings, each asserted with the exact message a user sees.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import (
    Finding,
    Guard,
    RequirementError,
    body_of,
    lint,
    merge,
    namespace_of,
    parse_policy,
)
from mcp_preconditions.requirements import validate
from mcp_preconditions.resolvers import AuthResolver, EnvResolver, FeatureResolver, Registry

KNOWN = "known namespaces: 'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state'"
AUTH_FORMS = "accepted forms: auth:oauth2, auth:claim:NAME:VALUE, auth:scope:SCOPE"


def startup_errors(tools: dict[str, Any]) -> list[str]:
    with pytest.raises(RequirementError) as info:
        Guard(None, tools, entry_points=False)
    assert str(info.value) == "\n".join(info.value.messages)
    return info.value.messages


# -- the split ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("requirement", "namespace", "body"), [
    ("env:production", "env", "production"),
    ("auth:claim:groups:urn:org:ops", "auth", "claim:groups:urn:org:ops"),
    ("state:", "state", ""),
    ("nonamespace", None, ""),
    (":leading", None, "leading"),
    ("Env:production", "Env", "production"),
    (" env:x", " env", "x"),
    ("ticket:OPS-1", "ticket", "OPS-1"),
])
def test_namespace_is_the_text_before_the_first_colon(requirement: str, namespace: str | None,
                                                       body: str) -> None:
    assert namespace_of(requirement) == namespace
    assert body_of(requirement) == body


def test_merge_is_an_exact_union_in_first_seen_order() -> None:
    merged = merge(["env:b", "env:a", "env:b"], ("env:A", "env:a", "env:a "), [])
    assert merged == ("env:b", "env:a", "env:A", "env:a ")


def test_merge_of_nothing_is_empty() -> None:
    assert merge() == ()
    assert merge([], ()) == ()


# -- start-up validation errors -----------------------------------------------------------------
def test_requirements_not_a_list() -> None:
    assert startup_errors({"t": "env:production"}) == [
        "tool 't': requirements must be a list of strings, got str"]
    assert startup_errors({"t": {"env": "production"}}) == [
        "tool 't': requirements must be a list of strings, got dict"]


def test_requirement_not_a_string() -> None:
    assert startup_errors({"t": ["env:a", 1, None]}) == [
        "tool 't': requirement #1 must be a string, got int 1",
        "tool 't': requirement #2 must be a string, got NoneType None",
    ]


def test_requirement_empty() -> None:
    assert startup_errors({"t": ["env:a", ""]}) == ["tool 't': requirement #1 is empty"]


@pytest.mark.parametrize("requirement", ["production", ":production", " "])
def test_requirement_without_namespace(requirement: str) -> None:
    assert startup_errors({"deploy": [requirement]}) == [
        f"tool 'deploy': requirement {requirement!r} has no namespace "
        f"(expected NAMESPACE:..., {KNOWN})"]


@pytest.mark.parametrize(("requirement", "namespace"), [
    ("ticket:OPS-1", "ticket"), ("Env:production", "Env"), ("env :production", "env "),
])
def test_unknown_namespace(requirement: str, namespace: str) -> None:
    assert startup_errors({"deploy": [requirement]}) == [
        f"tool 'deploy': requirement {requirement!r}: unknown namespace '{namespace}' ({KNOWN})"]


@pytest.mark.parametrize(("requirement", "problem"), [
    ("auth:claim:role", "auth:claim: needs a claim name and a value (auth:claim:NAME:VALUE) "
                        f"({AUTH_FORMS})"),
    ("auth:claim::ops", "auth:claim: needs a claim name and a value (auth:claim:NAME:VALUE) "
                        f"({AUTH_FORMS})"),
    ("auth:claim:role:", "auth:claim: needs a claim name and a value (auth:claim:NAME:VALUE) "
                         f"({AUTH_FORMS})"),
    ("auth:bogus", f"unknown auth form ({AUTH_FORMS})"),
    ("auth:OAuth2", f"unknown auth form ({AUTH_FORMS})"),
    ("auth:scope:", f"auth:scope: needs a scope ({AUTH_FORMS})"),
    ("env:", "env: needs a label name (env:NAME) (accepted forms: env:NAME)"),
    ("feature:", "feature: needs a flag key (feature:KEY) (accepted forms: feature:KEY)"),
    ("state:", "state: needs a key (state:KEY) (accepted forms: state:KEY)"),
    ("capability:", "capability: needs a name (capability:NAME) (accepted forms: capability:NAME)"),
])
def test_form_the_resolver_rejects(requirement: str, problem: str) -> None:
    assert startup_errors({"launch": [requirement]}) == [
        f"tool 'launch': requirement {requirement!r}: {problem}"]


def test_every_bad_tool_and_requirement_is_listed_together() -> None:
    messages = startup_errors({"ok": ["env:a"], "a": ["x", "env:"], "b": 3})
    assert messages == [
        f"tool 'a': requirement 'x' has no namespace (expected NAMESPACE:..., {KNOWN})",
        "tool 'a': requirement 'env:': env: needs a label name (env:NAME) (accepted forms: env:NAME)",
        "tool 'b': requirements must be a list of strings, got int",
    ]


def test_accepted_forms_are_valid() -> None:
    guard = Guard(None, {"t": ["auth:oauth2", "auth:claim:groups:urn:org:ops", "auth:scope:files:read",
                               "env:x", "feature:y", "state:z", "capability:w"]}, entry_points=False)
    assert not [f for f in guard.findings if f.severity == "error"]


def test_validate_over_a_registry_returns_findings() -> None:
    registry = Registry([EnvResolver([]), AuthResolver(), FeatureResolver({})])
    findings = validate("t", ["env:a", "zz:b", "auth:x"], registry)
    assert [(f.severity, f.tool, f.requirement) for f in findings] == [
        ("error", "t", "zz:b"), ("error", "t", "auth:x")]
    assert findings[0].message == ("requirement 'zz:b': unknown namespace 'zz' "
                                   "(known namespaces: 'env', 'auth', 'feature')")
    assert validate("t", None, registry) == []


def test_finding_text_and_dict_name_the_file_and_tool() -> None:
    finding = Finding("error", "launch", "requirement 'x' is bad", "x", "tools.json")
    assert str(finding) == "tools.json: tool 'launch': requirement 'x' is bad"
    assert finding.to_dict() == {"severity": "error", "tool": "launch", "requirement": "x",
                                 "message": "requirement 'x' is bad", "source": "tools.json"}


# -- lint warnings ------------------------------------------------------------------------------
def messages(requirements: list[str]) -> list[str]:
    findings = lint("t", requirements)
    assert all(f.severity == "warning" and f.tool == "t" for f in findings)
    return [f.message for f in findings]


@pytest.mark.parametrize("requirement", [" env:production", "env:production ", "env:production\n"])
def test_lint_leading_or_trailing_whitespace(requirement: str) -> None:
    assert messages([requirement])[0] == (f"requirement {requirement!r} has leading or trailing "
                                          "whitespace (it matches only itself, exactly)")


@pytest.mark.parametrize(("requirement", "codes"), [
    ("env:prod\u200buction", "U+200B"),          # zero-width space
    ("env:prod\u00a0uction", "U+00A0"),          # no-break space
    ("env:\u202enoitcudorp", "U+202E"),          # right-to-left override
    ("env:a\u200db\ufeff", "U+200D, U+FEFF"),     # zero-width joiner, BOM
    ("env:a\x00b\x07", "U+0000, U+0007"),         # control characters
])
def test_lint_control_or_invisible_characters(requirement: str, codes: str) -> None:
    assert messages([requirement]) == [
        f"requirement {requirement!r} contains control or invisible characters: {codes}"]


@pytest.mark.parametrize(("requirement", "codes"), [
    ("env:production\ufe0f", "U+FE0F"),          # variation selector-16 (a combining mark)
    ("env:prod\u034fuction", "U+034F"),          # combining grapheme joiner
])
def test_lint_default_ignorable_marks_are_invisible_too(requirement: str, codes: str) -> None:
    # Default_Ignorable_Code_Point characters render as nothing, like U+200B, but are category Mn.
    assert messages([requirement]) == [
        f"requirement {requirement!r} contains control or invisible characters: {codes}"]


def test_lint_mixed_scripts() -> None:
    requirement = "env:prоduction"  # Cyrillic о
    assert messages([requirement]) == [f"requirement {requirement!r} mixes scripts: CYRILLIC, LATIN"]
    greek = "feature:αlpha"
    assert messages([greek]) == [f"requirement {greek!r} mixes scripts: GREEK, LATIN"]


def test_lint_duplicates_once_per_repeat() -> None:
    assert messages(["env:a", "env:b", "env:a", "env:a"]) == [
        "requirement 'env:a' is listed more than once",
        "requirement 'env:a' is listed more than once",
    ]


def test_lint_accepts_plain_requirements_including_digits_and_punctuation() -> None:
    assert messages(["env:eu-west-1", "auth:claim:groups:urn:org:ops", "state:weather.clear",
                     "auth:scope:files:read"]) == []


def test_lint_findings_are_warnings_that_do_not_refuse_start_up() -> None:
    guard = Guard(None, {"t": ["env:a ", "env:a\u200b", "env:а", "env:b", "env:b"]}, entry_points=False)
    assert [f.severity for f in guard.findings] == ["warning"] * 4
    assert guard.requirements_for("t") == ("env:a ", "env:a\u200b", "env:а", "env:b")


def test_lint_of_policy_requirements_is_reported_too() -> None:
    source = parse_policy(b'[tools.t]\nrequirements = ["env:a "]\n', "p.toml")
    guard = Guard(source, {}, entry_points=False)
    assert [str(f) for f in guard.findings] == [
        "p.toml: tool 't': requirement 'env:a ' has leading or trailing whitespace (it matches only "
        "itself, exactly)"]


def test_a_requirement_in_both_code_and_policy_is_not_a_duplicate() -> None:
    source = parse_policy(b'[tools.t]\nrequirements = ["env:a", "env:b"]\n', "p.toml")
    guard = Guard(source, {"t": ["env:a"]}, entry_points=False)
    assert guard.findings == []
    assert guard.requirements_for("t") == ("env:a", "env:b")
