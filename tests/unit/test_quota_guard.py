"""Quotas through the Guard (memory store, a test clock): a unit is taken only by a call every other
requirement allows, from every quota of a tool or from none; used-up quotas deny with the seconds
until they refill; listing takes nothing; reloads refill no one; whose bucket a call draws on.
"""

from __future__ import annotations

import asyncio

import pytest

from mcp_preconditions import Credentials, Guard, Identity, LiveSources, Principal, Status, parse_policy
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.memo import CallerMemo
from mcp_preconditions.outcomes import Outcome
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from mcp_preconditions.resolvers import MemoryQuotaStore

HOUR = 3600 * 10**9
POLICY = """
[quotas.hourly]
calls = 3
per_seconds = 3600
[quotas.wide]
calls = 5
per_seconds = 3600
by = "global"
[quotas.client]
calls = 2
per_seconds = 60
by = "client"
[tools.launch]
requirements = ["auth:oauth2", "auth:claim:role:mc", "quota:hourly"]
[tools.both]
requirements = ["quota:hourly", "auth:oauth2", "quota:wide"]
[tools.wide_only]
requirements = ["quota:wide"]
[tools.per_client]
requirements = ["quota:client"]
"""


class Clock:
    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now


def caller(**claims: object) -> Identity:
    return Identity(principal=Principal.from_claims(claims))


ALICE = caller(sub="alice", role="mc")


def guard(policy: str = POLICY) -> tuple[Guard, Clock]:
    clock = Clock()
    live = LiveSources(quota_memory=MemoryQuotaStore(clock=clock))
    return Guard(parse_policy(policy.encode(), "q.toml"), {}, live=live, entry_points=False), clock


def test_three_calls_then_a_denial_that_says_when_it_refills() -> None:
    g, clock = guard()
    assert [g.decide("launch", ALICE).allowed for _ in range(4)] == [True, True, True, False]
    denied = g.decide("launch", ALICE)
    outcome = denied.outcome("quota:hourly")
    assert outcome is not None and outcome.status is Status.UNSATISFIED and outcome.transient
    assert outcome.retry_after_seconds == 1200.0  # one unit back every 3600 / 3 s
    assert denied.denial_payload() == {"error": "unmet_requirements", "tool": "launch",
                                       "unmet": ["quota:hourly"], "withheld": 0,
                                       "retry_after_seconds": 1200.0}
    assert denied.denial_text() == ("Tool 'launch' was not run: unmet requirements: quota:hourly. "
                                    "Retry after 1200 s.")
    clock.now += 1199 * 10**9
    assert g.decide("launch", ALICE).denial_payload()["retry_after_seconds"] == 1.0
    clock.now += 10**9
    assert [g.decide("launch", ALICE).allowed for _ in range(2)] == [True, False]


def test_a_call_denied_for_another_requirement_takes_no_unit() -> None:
    g, _ = guard()
    mallory = caller(sub="alice", role="observer")  # the same subject, without the role
    for _ in range(10):
        denied = g.decide("launch", mallory)
        assert denied.unmet == ("auth:claim:role:mc",)
        assert denied.outcome("quota:hourly") is None  # not asked, so never reported satisfied
    assert [g.decide("launch", ALICE).allowed for _ in range(4)] == [True, True, True, False]


def test_a_used_up_quota_is_not_named_when_another_requirement_refuses_the_call() -> None:
    g, _ = guard()
    for _ in range(3):
        assert g.decide("launch", ALICE).allowed
    denied = g.decide("launch", caller(sub="alice"))
    assert denied.unmet == ("auth:claim:role:mc",)  # the quota was not asked: nothing to name
    assert denied.transient == frozenset() and denied.retry_after_seconds is None
    assert not g.decide("launch", ALICE).allowed  # ... and it is still used up


def test_a_tool_with_two_quotas_takes_from_both_or_neither() -> None:
    g, _ = guard()
    assert [g.decide("both", ALICE).allowed for _ in range(4)] == [True, True, True, False]
    refused = g.decide("both", ALICE)
    assert refused.unmet == ("quota:hourly",)  # `wide` had room, and gave nothing
    wide = refused.outcome("quota:wide")
    assert wide is not None and wide.ok and "no unit taken" in wide.reason
    # `wide` (5 for everyone) gave exactly the 3 units of the allowed calls.
    assert [g.decide("wide_only", caller(sub="bob")).allowed for _ in range(3)] == [True, True, False]


def test_outcomes_keep_the_tools_order_wherever_the_quotas_sit() -> None:
    g, _ = guard()
    decision = g.decide("both", ALICE)
    assert [o.requirement for o in decision.outcomes] == ["quota:hourly", "auth:oauth2", "quota:wide"]


def test_listing_takes_nothing_and_keeps_a_tool_whose_quota_is_used_up() -> None:
    g, _ = guard()
    credentials = Credentials(principal=ALICE.principal)
    for _ in range(5):
        assert asyncio.run(g.callable_tools(credentials, ["launch"])) == ["launch"]
    assert [g.decide("launch", ALICE).allowed for _ in range(4)] == [True, True, True, False]
    assert asyncio.run(g.callable_tools(credentials, ["launch"])) == ["launch"]


def test_a_reload_refills_nobody() -> None:
    g, _ = guard()
    for _ in range(3):
        assert g.decide("launch", ALICE).allowed
    g.reload(parse_policy((POLICY + "# a new revision\n").encode(), "q.toml"))
    g.add_tool("other", ["env:x"])
    assert not g.decide("launch", ALICE).allowed


def test_every_call_draws_afresh_even_when_the_caller_alone_decides_the_rest() -> None:
    g, _ = guard()
    compiled = g.snapshot.tools["launch"]
    assert compiled.reads is None and compiled.late is not None
    assert compiled.late.rest.reads is not None  # auth: alone is remembered per caller
    assert [g.decide("launch", ALICE).allowed for _ in range(4)] == [True, True, True, False]


def test_the_memo_never_keeps_a_transient_outcome() -> None:
    memo = CallerMemo()
    principal = Principal.from_claims({"sub": "a"})
    quota = Outcome(requirement="quota:q", status=Status.SATISFIED, transient=True)
    memo.keep(("t", id(principal)), principal, (True, (quota,)))
    assert memo.lookup(("t", id(principal)), principal) is None


def test_by_subject_each_caller_has_a_bucket_and_unidentified_callers_share_one() -> None:
    g, _ = guard(POLICY.replace('requirements = ["auth:oauth2", "auth:claim:role:mc", "quota:hourly"]',
                                'requirements = ["quota:hourly"]'))
    assert [g.decide("launch", ALICE).allowed for _ in range(4)] == [True, True, True, False]
    assert g.decide("launch", caller(sub="bob")).allowed
    assert g.decide("launch", caller(sub="alice", iss="https://other.example")).allowed
    unidentified = [ANONYMOUS_IDENTITY, caller(role="mc"), Identity(failure="token expired")]
    assert [g.decide("launch", who).allowed for who in unidentified * 2] == [True] * 3 + [False] * 3


def test_by_client_callers_of_one_client_share_a_bucket() -> None:
    g, _ = guard()
    one = [caller(sub="a", client_id="app"), caller(sub="b", azp="app"), caller(sub="c", client_id="app")]
    assert [g.decide("per_client", who).allowed for who in one] == [True, True, False]
    assert g.decide("per_client", caller(sub="a", client_id="other")).allowed
    # No client id: the shared bucket of callers the quota cannot tell apart.
    assert [g.decide("per_client", caller(sub=s)).allowed for s in "xyz"] == [True, True, False]


def test_an_identity_lost_to_a_backend_failure_is_an_error_never_a_bucket() -> None:
    g, _ = guard(POLICY.replace('requirements = ["auth:oauth2", "auth:claim:role:mc", "quota:hourly"]',
                                'requirements = ["quota:hourly"]'))
    decision = g.decide("launch", Identity(failure="JWKS down", error=True))
    assert not decision.allowed and decision.errors == ("quota:hourly",)
    assert g.decide("wide_only", Identity(failure="JWKS down", error=True)).allowed  # global


def test_a_full_memory_store_refuses_new_callers_and_keeps_serving_known_ones() -> None:
    clock = Clock()
    store = MemoryQuotaStore(clock=clock, max_buckets=2)
    g = Guard(parse_policy(b'[quotas.q]\ncalls = 2\nper_seconds = 60\n[tools.t]\nrequirements = '
                           b'["quota:q"]\n', "q.toml"), {}, live=LiveSources(quota_memory=store))
    assert g.decide("t", caller(sub="a")).allowed and g.decide("t", caller(sub="b")).allowed
    refused = g.decide("t", caller(sub="c"))
    assert refused.errors == ("quota:q",)
    assert refused.outcomes[0].reason == ("resolver 'quota' raised BackendError: the memory quota "
                                          "store holds its maximum of 2 buckets that are in use")
    assert g.decide("t", caller(sub="a")).allowed
    clock.now += 60 * 10**9  # every bucket full again: their entries go, room for a new caller
    assert g.decide("t", caller(sub="c")).allowed and len(store) <= 2


@pytest.mark.parametrize(("requirement", "message"), [
    ("quota:Hourly", "q.toml: tool 'x': requirement 'quota:Hourly': the policy defines no quota "
                     "'Hourly' (defined quotas: 'hourly') (accepted forms: quota:NAME, where the "
                     "policy defines [quotas.NAME])"),
    ("quota:", "q.toml: tool 'x': requirement 'quota:': the policy defines no quota '' (defined "
               "quotas: 'hourly') (accepted forms: quota:NAME, where the policy defines "
               "[quotas.NAME])"),
])
def test_a_quota_the_policy_does_not_define_refuses_start_up(requirement: str, message: str) -> None:
    policy = f'[quotas.hourly]\ncalls = 1\nper_seconds = 1\n[tools.x]\nrequirements = ["{requirement}"]'
    with pytest.raises(RequirementError) as raised:
        Guard(parse_policy(policy.encode(), "q.toml"), {}, entry_points=False)
    assert raised.value.messages == [message]


def test_a_quota_in_a_grant_condition_refuses_start_up() -> None:
    policy = ('[quotas.hourly]\ncalls = 1\nper_seconds = 1\n[[capabilities.grants]]\n'
              'capabilities = ["c"]\nwhen = ["quota:hourly"]\n')
    with pytest.raises(RequirementError) as raised:
        Guard(parse_policy(policy.encode(), "q.toml"), {}, entry_points=False)
    assert raised.value.messages == [
        "q.toml: tool '(policy capabilities.grants[0].when)': requirement 'quota:hourly': a quota "
        "is not a grant condition: put it in the tool's requirements, where an allowed call takes "
        "a unit"]


def test_a_confidential_quota_is_withheld_and_its_refill_time_with_it() -> None:
    g, _ = guard('confidential = ["quota:hourly"]\n' + POLICY)
    for _ in range(3):
        assert g.decide("launch", ALICE).allowed
    payload = g.decide("launch", ALICE).denial_payload()
    assert payload == {"error": "unmet_requirements", "tool": "launch", "unmet": [], "withheld": 1}
