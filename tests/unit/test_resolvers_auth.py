"""`auth:oauth2`, `auth:claim:NAME:VALUE` and `auth:scope:SCOPE` (SPEC §4) over a verified principal:
the split rule, arrays, booleans/integers by JSON text, claim aliases, scopes and declared implications.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import (
    ANONYMOUS,
    Credentials,
    Guard,
    Identity,
    Outcome,
    PolicyError,
    Principal,
    parse_policy,
)
from mcp_preconditions.resolvers.auth import AuthResolver, split_claim

AUTH = """
[auth]
[auth.claim_aliases]
realm_roles = ["realm_access", "roles"]
grp = "urn:org:groups"
deep = ["a", "b", "c"]
[auth.scope_implications]
"files:admin" = ["files:write"]
"files:write" = ["files:read"]
"x" = ["y"]
"y" = ["x"]
"""


async def outcome(requirement: str, credentials: Credentials = ANONYMOUS, policy: str = AUTH) -> Outcome:
    g = Guard(parse_policy(policy.encode(), "p.toml"), {"t": [requirement]}, entry_points=False)
    decision = await g.check("t", credentials)
    assert decision.allowed is decision.outcomes[0].ok
    return decision.outcomes[0]


def who(**claims: Any) -> Credentials:
    return Credentials(principal=Principal.from_claims(claims))


# -- auth:oauth2 --------------------------------------------------------------------------------
async def test_oauth2_holds_for_a_verified_principal() -> None:
    assert await outcome("auth:oauth2", who(sub="alice")) == Outcome.satisfied(
        "auth:oauth2", "access token verified (claims)")
    sdk = Credentials(principal=Principal(scopes=frozenset({"a"}), kind="sdk"))
    assert await outcome("auth:oauth2", sdk) == Outcome.satisfied("auth:oauth2",
                                                                  "access token verified (sdk)")


async def test_oauth2_fails_without_a_verified_token() -> None:
    assert await outcome("auth:oauth2") == Outcome.unsatisfied("auth:oauth2", "no access token")
    assert await outcome("auth:oauth2", Credentials(token="abc.def.ghi")) == Outcome.unsatisfied(
        "auth:oauth2", "a bearer token was presented but the policy configures no token verification "
                       "([auth] issuer and keys)")


async def test_an_authentication_backend_failure_is_an_error() -> None:
    g = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:oauth2", "auth:claim:a:b", "auth:scope:s"]},
              entry_points=False)
    down = Identity(failure="JWKS endpoint unreachable", error=True)
    decision = await g.check_identity("t", down)
    assert not decision.allowed
    assert decision.errors == ("auth:oauth2", "auth:claim:a:b", "auth:scope:s")
    assert {o.reason for o in decision.outcomes} == {"JWKS endpoint unreachable"}


# -- auth:claim:NAME:VALUE ----------------------------------------------------------------------
@pytest.mark.parametrize(("requirement", "parts"), [
    ("auth:claim:role:mission_control", ("role", "mission_control")),
    ("auth:claim:groups:urn:org:ops", ("groups", "urn:org:ops")),
    ("auth:claim:a::", ("a", ":")),
    ("auth:claim:role", None), ("auth:claim::x", None), ("auth:claim:x:", None),
])
def test_the_split_rule(requirement: str, parts: tuple[str, str] | None) -> None:
    assert split_claim(requirement) == parts


async def test_a_string_claim_equal_to_the_value() -> None:
    assert await outcome("auth:claim:role:mission_control", who(role="mission_control")) == (
        Outcome.satisfied("auth:claim:role:mission_control", "claim 'role' has 'mission_control'"))


async def test_a_value_containing_colons() -> None:
    assert (await outcome("auth:claim:groups:urn:org:ops", who(groups="urn:org:ops"))).ok
    assert (await outcome("auth:claim:groups:urn:org:ops", who(groups=["x", "urn:org:ops"]))).ok
    assert not (await outcome("auth:claim:groups:urn:org:ops", who(groups="urn:org"))).ok
    assert not (await outcome("auth:claim:groups:urn:org", who(groups="urn:org:ops"))).ok


@pytest.mark.parametrize(("claims", "requirement"), [
    ({"groups": ["a", "ops"]}, "auth:claim:groups:ops"),
    ({"admin": True}, "auth:claim:admin:true"),
    ({"admin": False}, "auth:claim:admin:false"),
    ({"level": 42}, "auth:claim:level:42"),
    ({"level": -7}, "auth:claim:level:-7"),
    ({"big": 10**20}, "auth:claim:big:100000000000000000000"),
    ({"flags": [True, 3, "x"]}, "auth:claim:flags:true"),
    ({"flags": [True, 3, "x"]}, "auth:claim:flags:3"),
])
async def test_matching_claims(claims: dict[str, Any], requirement: str) -> None:
    assert (await outcome(requirement, who(**claims))).ok


@pytest.mark.parametrize(("claims", "requirement"), [
    ({"role": "Mission_control"}, "auth:claim:role:mission_control"),
    ({"role": "mission_control "}, "auth:claim:role:mission_control"),
    ({"role": "mission_cоntrol"}, "auth:claim:role:mission_control"),
    ({"Role": "mission_control"}, "auth:claim:role:mission_control"),
    ({"admin": True}, "auth:claim:admin:True"),
    ({"admin": True}, "auth:claim:admin:1"),
    ({"admin": "true"}, "auth:claim:admin:True"),
    ({"level": 1}, "auth:claim:level:true"),
    ({"level": 42}, "auth:claim:level:42.0"),
    ({"level": 42.0}, "auth:claim:level:42"),
    ({"level": 42.0}, "auth:claim:level:42.0"),
    ({"level": 0.5}, "auth:claim:level:0.5"),
    ({"level": None}, "auth:claim:level:null"),
    ({"level": "042"}, "auth:claim:level:42"),
    ({"groups": [["ops"]]}, "auth:claim:groups:ops"),
    ({"groups": {"ops": True}}, "auth:claim:groups:ops"),
    ({"groups": "ops admins"}, "auth:claim:groups:ops"),
])
async def test_non_matching_claims(claims: dict[str, Any], requirement: str) -> None:
    got = await outcome(requirement, who(**claims))
    name, value = requirement.split(":", 3)[2:]
    if name in claims:
        assert got == Outcome.unsatisfied(requirement, f"claim '{name}' does not have '{value}'")
    else:
        assert got == Outcome.unsatisfied(requirement, f"token has no claim '{name}'")


async def test_anonymous_callers_have_no_claims() -> None:
    assert await outcome("auth:claim:role:x") == Outcome.unsatisfied("auth:claim:role:x",
                                                                     "no access token")


# -- aliases ------------------------------------------------------------------------------------
async def test_an_alias_reaches_a_nested_claim() -> None:
    alice = who(realm_access={"roles": ["engineer", "pilot"]})
    assert await outcome("auth:claim:realm_roles:engineer", alice) == Outcome.satisfied(
        "auth:claim:realm_roles:engineer", "claim 'realm_roles (alias of realm_access.roles)' has "
                                           "'engineer'")
    assert await outcome("auth:claim:realm_roles:admin", alice) == Outcome.unsatisfied(
        "auth:claim:realm_roles:admin", "claim 'realm_roles (alias of realm_access.roles)' does not "
                                        "have 'admin'")


async def test_an_alias_reaches_a_claim_name_containing_colons() -> None:
    assert await outcome("auth:claim:grp:ops", who(**{"urn:org:groups": ["ops"]})) == Outcome.satisfied(
        "auth:claim:grp:ops", "claim 'grp (alias of urn:org:groups)' has 'ops'")


@pytest.mark.parametrize("claims", [
    {}, {"a": "x"}, {"a": {"b": "c"}}, {"a": {"b": ["c"]}}, {"a": {"x": {"c": "v"}}},
])
async def test_an_alias_path_that_is_not_there(claims: dict[str, Any]) -> None:
    assert await outcome("auth:claim:deep:v", who(**claims)) == Outcome.unsatisfied(
        "auth:claim:deep:v", "token has no claim 'deep (alias of a.b.c)'")


async def test_a_deep_alias_matches() -> None:
    assert (await outcome("auth:claim:deep:v", who(a={"b": {"c": "v"}}))).ok


async def test_an_alias_shadows_a_claim_of_the_same_name() -> None:
    # the literal top-level claim "realm_roles" is not consulted once the name is an alias
    assert not (await outcome("auth:claim:realm_roles:engineer", who(realm_roles=["engineer"]))).ok


async def test_without_an_alias_a_dotted_name_is_a_literal_claim_name() -> None:
    assert not (await outcome("auth:claim:realm_access.roles:engineer",
                              who(realm_access={"roles": ["engineer"]}))).ok
    assert (await outcome("auth:claim:realm_access.roles:engineer",
                          who(**{"realm_access.roles": "engineer"}))).ok


def test_an_alias_name_may_not_contain_a_colon() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(b'[auth]\nclaim_aliases = { "urn:g" = "g" }\n', "p.toml")
    assert info.value.problems == ["auth.claim_aliases: alias 'urn:g' may not contain ':'"]


# -- auth:scope:SCOPE ---------------------------------------------------------------------------
async def test_scopes_from_the_scope_string_and_the_scp_array() -> None:
    assert await outcome("auth:scope:files:read", who(scope="openid files:read")) == Outcome.satisfied(
        "auth:scope:files:read", "token has scope 'files:read'")
    assert (await outcome("auth:scope:files:read", who(scp=["files:read"]))).ok
    assert (await outcome("auth:scope:b", who(scope="a", scp=["b"]))).ok


@pytest.mark.parametrize("claims", [
    {"scope": "files:read.all"}, {"scope": "Files:read"}, {"scope": "files"}, {"scp": ["files:"]},
    {"scope": "files:read\u200b"}, {"scope": ["files:read"]}, {"scp": [["files:read"]]}, {},
    {"scope": "files:read,openid"},
])
async def test_a_scope_must_be_held_exactly(claims: dict[str, Any]) -> None:
    assert await outcome("auth:scope:files:read", who(**claims)) == Outcome.unsatisfied(
        "auth:scope:files:read", "token lacks scope 'files:read'")


async def test_sdk_principal_scopes() -> None:
    sdk = Credentials(principal=Principal(scopes=frozenset({"files:read"}), kind="sdk"))
    assert (await outcome("auth:scope:files:read", sdk)).ok


async def test_declared_implications_including_transitive_ones() -> None:
    assert await outcome("auth:scope:files:write", who(scope="files:admin")) == Outcome.satisfied(
        "auth:scope:files:write", "scope 'files:admin' implies 'files:write'")
    assert await outcome("auth:scope:files:read", who(scope="files:admin")) == Outcome.satisfied(
        "auth:scope:files:read", "scope 'files:admin' implies 'files:read'")


async def test_no_implication_that_is_not_declared() -> None:
    assert not (await outcome("auth:scope:files:admin", who(scope="files:write"))).ok
    assert not (await outcome("auth:scope:files:read", who(scope="files:admin"), "")).ok
    assert not (await outcome("auth:scope:files:read", who(scope="Files:admin"))).ok


async def test_implication_cycles_terminate() -> None:
    assert (await outcome("auth:scope:x", who(scope="y"))).ok
    assert not (await outcome("auth:scope:z", who(scope="x"))).ok


def test_the_resolver_without_a_policy() -> None:
    resolver = AuthResolver()
    assert resolver.validate("auth:oauth2") is None
    assert resolver.validate("auth:oauth2 ") == "unknown auth form"
    assert resolver.validate("auth:scope:a:b") is None
    assert resolver.implied == {}
