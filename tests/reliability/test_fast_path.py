"""The guard's fast path (identity-only plans compiled per tool) must decide exactly as the full
evaluation does: the same outcomes, reasons included, and the same verdict, for random policies
(grants, aliases, scope implications, a capability claim) and random callers.
"""

from __future__ import annotations

import functools
import gc
import json
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import (
    CallContext,
    Guard,
    Identity,
    Outcome,
    Principal,
    Status,
    parse_policy,
)
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from mcp_preconditions.resolvers import AuthResolver

from .tally import TALLY

ROLES = ["ops", "admin", "Ops", "42", "true", "urn:org:ops"]
SCOPES = ["files:read", "files:write", "files:admin", "mail"]
CAPS = ["deploy", "read", "nuke"]
CONDITIONS = ["auth:oauth2", "env:prod", "env:dev", "feature:on", "feature:off", "state:up",
              "state:down", *(f"auth:claim:role:{r}" for r in ROLES),
              *(f"auth:scope:{s}" for s in SCOPES), "auth:claim:groups:urn:org:ops",
              "auth:claim:deep:x"]
REQUIREMENTS = [*CONDITIONS, *(f"capability:{c}" for c in CAPS), "capability:unknown"]

claim_values = st.one_of(st.sampled_from(ROLES), st.lists(st.sampled_from(ROLES), max_size=3),
                         st.integers(40, 43), st.booleans(), st.none(), st.floats(0, 1),
                         st.dictionaries(st.sampled_from(["roles"]), st.lists(st.just("x"))))
claims = st.fixed_dictionaries({"sub": st.sampled_from(["alice", "bob"])}, optional={
    "role": claim_values, "groups": claim_values, "caps": claim_values,
    "scope": st.lists(st.sampled_from(SCOPES), max_size=3).map(" ".join),
    "realm": st.fixed_dictionaries({}, optional={"roles": claim_values})})
identities = st.one_of(
    st.builds(lambda c, kind: Identity(principal=Principal.from_claims(c, kind=kind)), claims,
              st.sampled_from(["jwt", "opaque", "sdk", "claims"])),
    st.just(ANONYMOUS_IDENTITY), st.just(Identity(failure="JWKS down", error=True)))
grants = st.lists(st.tuples(st.lists(st.sampled_from(CAPS), min_size=1, max_size=2, unique=True),
                            st.lists(st.sampled_from(CONDITIONS), max_size=3)), max_size=4)


def policy(grant_list: list[tuple[list[str], list[str]]], claim: bool, implications: bool) -> str:
    lines = ['environment = ["prod"]', 'environment_variable = "FAST_PATH_UNSET"',
             "[features.flags]", "on = true", "off = false", "[state.values]", "up = true",
             "down = false"]
    if claim:
        lines += ["[capabilities]", 'claim = "caps"']
    for caps, when in grant_list:
        lines += ["[[capabilities.grants]]", f"capabilities = {json.dumps(caps)}",
                  f"when = {json.dumps(when)}"]
    lines += ["[auth]", 'claim_aliases = { deep = ["realm", "roles"] }']
    if implications:
        lines.append('scope_implications = { "files:admin" = ["files:write"], '
                     '"files:write" = ["files:read"] }')
    return "\n".join(lines) + "\n"


def full_evaluation(guard: Guard, tool: str, identity: Identity) -> tuple[Any, bool]:
    """The path without plans: every requirement through its resolver, with a CallContext."""
    snap = guard.snapshot
    compiled = snap.tools[tool]
    outcomes = snap.evaluate(compiled, CallContext(tool, identity, {}, snap.evaluate_one))  # type: ignore[arg-type]
    assert isinstance(outcomes, list)  # everything here is sync
    return tuple(outcomes), bool(outcomes) and all(o.ok for o in outcomes)


@settings(max_examples=300, deadline=None)
@given(grant_list=grants, claim=st.booleans(), implications=st.booleans(),
       requirements=st.lists(st.sampled_from(REQUIREMENTS), min_size=1, max_size=12, unique=True),
       identity=identities)
def test_the_fast_path_decides_exactly_as_the_full_evaluation(
        grant_list: list[tuple[list[str], list[str]]], claim: bool, implications: bool,
        requirements: list[str], identity: Identity) -> None:
    source = parse_policy(policy(grant_list, claim, implications).encode(), "fast.toml")
    guard = Guard(source, {"t": requirements}, entry_points=False)
    fast = guard.decide("t", identity, record=False)
    outcomes, allowed = full_evaluation(guard, "t", identity)
    TALLY.add("fast path = full evaluation", cases=1, calls=2,
              wrongly_allowed=int(fast.allowed and not allowed))
    assert fast.outcomes == outcomes
    assert fast.allowed is allowed


def test_the_plan_is_used_where_it_applies() -> None:
    source = parse_policy(policy([(["deploy"], ["auth:claim:role:ops", "env:prod"])], True, True)
                          .encode(), "fast.toml")
    guard = Guard(source, {"t": ["auth:oauth2", "capability:deploy", "feature:on"]},
                  entry_points=False)
    assert guard.snapshot.tools["t"].plan is not None
    who = Identity(principal=Principal.from_claims({"sub": "a", "role": ["x", "ops"]}))
    decision = guard.decide("t", who, record=False)
    assert decision.allowed
    assert [o.reason for o in decision.outcomes] == [
        "access token verified (claims)", "grant #0 gives 'deploy'", "flag 'on' is true (policy)"]


class Fickle:
    """A custom `zz:` resolver whose fast check returns what each test picks (its `resolve` says
    no): whatever is not an Outcome must send the call to the full evaluation."""

    namespace = "zz"

    def __init__(self, fast: Any) -> None:
        self.fast = fast

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        return Outcome.unsatisfied(requirement, "resolve said no")

    def fast_check(self, requirement: str, condition: Any) -> Any:
        return lambda identity: self.fast


@pytest.mark.parametrize("fast", [True, "satisfied", None, Outcome.satisfied("zz:a", "fast")])
@pytest.mark.parametrize("claims_before", [1, 9], ids=["unrolled", "loop"])
def test_a_fast_check_that_returns_no_outcome_defers_to_resolve(fast: Any, claims_before: int) -> None:
    # 1 or 9 identity checks before the custom one: the straight-line plan, and the looping plan
    # used past 8 identity checks.
    requirements = [f"auth:claim:c{i}:v" for i in range(claims_before)] + ["zz:a"]
    guard = Guard(parse_policy(b"", "fast.toml"), {"t": requirements}, resolvers=[Fickle(fast)],
                  entry_points=False)
    assert guard.snapshot.tools["t"].plan is not None
    who = Identity(principal=Principal.from_claims(
        {"sub": "a", **{f"c{i}": "v" for i in range(claims_before)}}))
    decision = guard.decide("t", who, record=False)
    last = decision.outcomes[-1]
    if isinstance(fast, Outcome):  # a real Outcome from the fast check is the answer
        assert (decision.allowed, last) == (True, fast)
    else:
        assert (decision.allowed, last) == (False, Outcome.unsatisfied("zz:a", "resolve said no"))
    assert all(o.ok for o in decision.outcomes[:-1])


# -- what a plan must not trust (found in review) ------------------------------------------------
class TenantRole:
    """`tenant:ROLE`: the `role` claim, for tenant 'acme' only. Its fast check wraps the built-in
    claim check with functools.wraps, which copies the wrapped function's attributes."""

    namespace = "tenant"

    def __init__(self) -> None:
        self.auth = AuthResolver()

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        principal = context.identity.principal
        if principal is None or principal.claims.get("tenant") != "acme":
            return Outcome.unsatisfied(requirement, "wrong tenant")
        inner = self.auth.resolve("auth:claim:role:" + requirement.partition(":")[2], context)
        return Outcome(requirement, inner.status, inner.reason)

    def fast_check(self, requirement: str, condition: Any) -> Any:
        inner = self.auth.fast_check("auth:claim:role:" + requirement.partition(":")[2], condition)
        assert inner is not None
        deny = Outcome.unsatisfied(requirement, "wrong tenant")

        @functools.wraps(inner)
        def check(identity: Identity) -> Outcome | None:
            principal = identity.principal
            if principal is None:
                return None
            if principal.claims.get("tenant") != "acme":
                return deny
            outcome = inner(identity)
            return None if outcome is None else Outcome(requirement, outcome.status, outcome.reason)
        return check


@pytest.mark.parametrize("claims_before", [0, 9], ids=["unrolled", "loop"])
def test_a_wrapped_builtin_check_runs_its_wrapper(claims_before: int) -> None:
    requirements = [f"auth:claim:c{i}:v" for i in range(claims_before)] + ["tenant:admin"]
    guard = Guard(parse_policy(b"", "fast.toml"), {"t": requirements}, resolvers=[TenantRole()],
                  entry_points=False)
    evil = Identity(principal=Principal.from_claims(
        {"sub": "mallory", "tenant": "evil", "role": "admin",
         **{f"c{i}": "v" for i in range(claims_before)}}))
    decision = guard.decide("t", evil, record=False)
    assert not decision.allowed
    assert decision.outcomes[-1] == Outcome.unsatisfied("tenant:admin", "wrong tenant")


class Liar:
    """A `zz:` resolver whose answers (fast and full) are what each test picks."""

    namespace = "zz"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Any:
        return self.answer

    def fast_check(self, requirement: str, condition: Any) -> Any:
        return lambda identity: self.answer


class Fake:
    """Looks satisfied, is not an Outcome."""

    status = Status.SATISFIED
    requirement = "zz:a"
    reason = "fake"


@pytest.mark.parametrize("claims_before", [0, 9], ids=["unrolled", "loop"])
def test_a_fast_answer_for_another_requirement_is_an_error(claims_before: int) -> None:
    requirements = [f"auth:claim:c{i}:v" for i in range(claims_before)] + ["zz:a"]
    guard = Guard(parse_policy(b"", "fast.toml"), {"t": requirements},
                  resolvers=[Liar(Outcome.satisfied("zz:other", "wrong requirement"))],
                  entry_points=False)
    who = Identity(principal=Principal.from_claims(
        {"sub": "a", **{f"c{i}": "v" for i in range(claims_before)}}))
    decision = guard.decide("t", who, record=False)
    assert not decision.allowed
    assert decision.outcomes[-1] == Outcome.error(
        "zz:a", "resolver 'zz' returned an outcome for 'zz:other'")


@pytest.mark.parametrize("answer", [Fake(), Outcome.satisfied("zz:other", "wrong requirement")],
                         ids=["not-an-outcome", "another-requirement"])
@pytest.mark.parametrize("tool", [["capability:deploy"], ["auth:oauth2", "capability:deploy"]],
                         ids=["alone", "with-auth"])
def test_a_grant_condition_must_answer_a_proper_outcome(answer: Any, tool: list[str]) -> None:
    policy = b'[[capabilities.grants]]\ncapabilities = ["deploy"]\nwhen = ["zz:a"]\n'
    guard = Guard(parse_policy(policy, "fast.toml"), {"t": tool}, resolvers=[Liar(answer)],
                  entry_points=False)
    who = Identity(principal=Principal.from_claims({"sub": "a"}))
    decision = guard.decide("t", who, record=False)
    assert not decision.allowed
    assert decision.outcome("capability:deploy").status is Status.ERROR  # type: ignore[union-attr]


class Unreadable:
    """An identity-like object whose principal cannot be read."""

    failure = None
    error = False

    @property
    def principal(self) -> Any:
        raise RuntimeError("no principal for you")


@pytest.mark.parametrize("count", [1, 9], ids=["unrolled", "loop"])
def test_a_plan_never_raises_for_an_odd_identity(count: int) -> None:
    guard = Guard(parse_policy(b"", "fast.toml"),
                  {"t": ["auth:oauth2", *(f"auth:claim:c{i}:v" for i in range(count - 1))]},
                  entry_points=False)
    plan = guard.snapshot.tools["t"].plan
    assert plan is not None
    odd: Any = Unreadable()
    assert plan(odd) is None  # undecided: the full evaluation decides, and fails closed


def test_replaced_snapshots_and_their_plans_are_freed() -> None:
    # Plans and the checks written into them must not keep a snapshot alive after a reload (a
    # capability check refers to its resolver, which refers to its snapshot).
    source = parse_policy(policy([(["deploy"], ["auth:claim:role:ops"])], True, True).encode(),
                          "fast.toml")
    guard = Guard(source, {"t": ["auth:oauth2", "capability:deploy", "auth:scope:files:read"]},
                  entry_points=False)
    old = [weakref.ref(guard.snapshot)]
    for _ in range(3):
        guard.reload(source)
        old.append(weakref.ref(guard.snapshot))
    gc.collect()
    assert [r() is not None for r in old] == [False, False, False, True]


class Behaving:
    """A custom `zz:` resolver; each `zz:BEHAVIOUR` requirement answers the same way on the fast
    path and in `resolve`: an Outcome, None (fast path: undecided), an exception, not an Outcome,
    or an Outcome for another requirement."""

    namespace = "zz"

    def validate(self, requirement: str) -> str | None:
        return None

    def _answer(self, requirement: str, fast: bool) -> Any:
        behaviour = requirement[3:]
        if behaviour == "sat":
            return Outcome.satisfied(requirement, "yes")
        if behaviour == "unsat":
            return Outcome.unsatisfied(requirement, "no")
        if behaviour == "none":
            return None if fast else Outcome.satisfied(requirement, "decided in full")
        if behaviour == "raise":
            raise RuntimeError("resolver bug")
        if behaviour == "garbage":
            return Fake()
        return Outcome.satisfied("zz:elsewhere", "for another requirement")

    def resolve(self, requirement: str, context: CallContext) -> Any:
        return self._answer(requirement, fast=False)

    def fast_check(self, requirement: str, condition: Any) -> Any:
        return lambda identity: self._answer(requirement, fast=True)


CUSTOM = [f"zz:{b}" for b in ("sat", "unsat", "none", "raise", "garbage", "other")]


@settings(max_examples=300, deadline=None)
@given(grant_list=st.lists(st.tuples(st.lists(st.sampled_from(CAPS), min_size=1, max_size=2,
                                              unique=True),
                                     st.lists(st.sampled_from([*CONDITIONS, *CUSTOM]), max_size=3)),
                           max_size=4),
       claim=st.booleans(),
       requirements=st.lists(st.sampled_from([*REQUIREMENTS, *CUSTOM]), min_size=1, max_size=12,
                             unique=True),
       identity=identities)
def test_custom_fast_checks_never_change_a_decision(
        grant_list: list[tuple[list[str], list[str]]], claim: bool, requirements: list[str],
        identity: Identity) -> None:
    source = parse_policy(policy(grant_list, claim, True).encode(), "fast.toml")
    guard = Guard(source, {"t": requirements}, resolvers=[Behaving()], entry_points=False)
    fast = guard.decide("t", identity, record=False)
    outcomes, allowed = full_evaluation(guard, "t", identity)
    TALLY.add("fast path = full evaluation", cases=1, calls=2,
              wrongly_allowed=int(fast.allowed and not allowed))
    assert fast.outcomes == outcomes
    assert fast.allowed is allowed
