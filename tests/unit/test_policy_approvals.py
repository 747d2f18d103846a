"""`[approvals.NAME]` in the policy file (SPEC §15): what a valid one holds, every bad value refused
with the exact line a user sees (key path first), and the exported JSON Schema agreeing.
"""

from __future__ import annotations

import jsonschema
import pytest

from mcp_preconditions import PolicyError, parse_policy, policy_schema


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text.encode(), "p.toml")
    return info.value.problems


def test_a_self_approval_and_an_approver_list_load_with_their_defaults() -> None:
    policy = parse_policy(b'[approvals.deploy]\napprovers = "self"\n'
                          b'[approvals.wire]\napprovers = ["auth:claim:role:release_manager"]\n'
                          b"expires_seconds = 60\n", "p.toml").policy
    deploy, wire = policy.approvals["deploy"], policy.approvals["wire"]
    assert (deploy.approvers, deploy.expires_seconds, deploy.timeout_seconds, deploy.store) == (
        "self", 600, 120, "memory")
    assert (wire.approvers, wire.expires_seconds) == (["auth:claim:role:release_manager"], 60)


def test_a_redis_store_with_a_connection_loads() -> None:
    policy = parse_policy(b'[state.redis]\nurl = "redis://127.0.0.1:6379/0"\n'
                          b'[approvals.d]\napprovers = "self"\nstore = "redis"\n', "p.toml").policy
    assert policy.approvals["d"].store == "redis"


APPROVAL = "[approvals.deploy]\n"


@pytest.mark.parametrize(("body", "lines"), [
    ('approvers = "admins"', ['approvals.deploy.approvers: must be "self" or a list of requirements '
                              "an approver must meet, got string 'admins'"]),
    ('approvers = "Self"', ['approvals.deploy.approvers: must be "self" or a list of requirements '
                            "an approver must meet, got string 'Self'"]),
    ("approvers = 1.5", ['approvals.deploy.approvers: must be "self" or a list of requirements an '
                         "approver must meet, got float 1.5"]),
    ("approvers = true", ['approvals.deploy.approvers: must be "self" or a list of requirements an '
                          "approver must meet, got boolean True"]),
    ("approvers = []", ['approvals.deploy.approvers: must name at least one requirement an approver '
                        'must meet (or be "self")']),
    ("approvers = [1]", ["approvals.deploy.approvers: [0] must be a requirement string, got integer 1"]),
    ('approvers = ["role"]', ["approvals.deploy.approvers: requirement 'role' has no namespace"]),
    ('approvers = ["auth:oauth2", "approval:other"]',
     ["approvals.deploy.approvers: an approver may not need an approval ('approval:other'): no cycles"]),
    ('approvers = ["quota:q"]', ["approvals.deploy.approvers: a quota is not an approver requirement "
                                 "('quota:q'): it counts calls, it says nothing of who approves"]),
    ("expires_seconds = 5", ["approvals.deploy.approvers: Field required"]),
    ('approvers = "self"\nexpires_seconds = 0.5',
     ["approvals.deploy.expires_seconds: Input should be greater than or equal to 1"]),
    ('approvers = "self"\nexpires_seconds = "600"',
     ["approvals.deploy.expires_seconds: Input should be a valid number"]),
    ('approvers = "self"\nexpires_seconds = true',
     ["approvals.deploy.expires_seconds: Input should be a valid number"]),
    ('approvers = "self"\nexpires_seconds = nan',
     ["approvals.deploy.expires_seconds: Input should be a finite number"]),
    ('approvers = "self"\ntimeout_seconds = 0',
     ["approvals.deploy.timeout_seconds: Input should be greater than 0"]),
    ('approvers = ["auth:oauth2"]\ntimeout_seconds = 30',
     ['approvals.deploy: timeout_seconds applies to approvers = "self" only (an approver list has '
      "expires_seconds)"]),
    ('approvers = "self"\nstore = "disk"', ["approvals.deploy.store: Input should be 'memory' or 'redis'"]),
    ('approvers = "self"\nstore = "redis"',
     ['approvals.deploy.store: store = "redis" needs a [state.redis] connection']),
    ('approvers = "self"\nexpire_seconds = 60',
     ["approvals.deploy.expire_seconds: unknown key (a typo here would silently weaken the policy)"]),
])
def test_a_bad_approval_is_refused_by_key_path(body: str, lines: list[str]) -> None:
    assert problems(APPROVAL + body) == lines


def test_every_problem_of_a_file_is_listed() -> None:
    text = ('[approvals.a]\napprovers = "admins"\n[approvals.b]\napprovers = "self"\nstore = "redis"\n'
            '[quotas.q]\ncalls = 1\nper_seconds = 1\nstore = "redis"\n')
    assert problems(text) == [
        'approvals.a.approvers: must be "self" or a list of requirements an approver must meet, '
        "got string 'admins'"]  # the model stops before the cross-section check while a section is bad
    text = '[approvals.b]\napprovers = "self"\nstore = "redis"\n[quotas.q]\ncalls = 1\nper_seconds = 1\n' \
           'store = "redis"\n'
    assert problems(text) == ['quotas.q.store: store = "redis" needs a [state.redis] connection',
                              'approvals.b.store: store = "redis" needs a [state.redis] connection']


@pytest.mark.parametrize("approval", [
    {"approvers": "self"}, {"approvers": ["auth:claim:role:ops"], "expires_seconds": 30},
    {"approvers": "self", "timeout_seconds": 10, "store": "memory"}])
def test_the_schema_accepts_what_loads(approval: dict[str, object]) -> None:
    jsonschema.validate({"approvals": {"d": approval}}, policy_schema())


@pytest.mark.parametrize("approval", [
    {"approvers": "admins"}, {"approvers": []}, {"approvers": [""]}, {"approvers": "self", "x": 1},
    {"approvers": "self", "expires_seconds": 0}, {"approvers": "self", "store": "disk"}, {}])
def test_the_schema_refuses_what_does_not_load(approval: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"approvals": {"d": approval}}, policy_schema())
