"""The compiled guard against the reference evaluator (tests/properties/reference.py) over random
policies, principals and tools; and fail closed when a custom namespace raises, times out or returns
garbage for a random subset of requirements (also inside capability grants).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions import (
    ANONYMOUS,
    CallContext,
    Credentials,
    Guard,
    Identity,
    Outcome,
    Policy,
    PolicySource,
    Principal,
    Status,
)
from mcp_preconditions.principal import ANONYMOUS_IDENTITY
from tests.properties.reference import World, decide

SETTINGS = settings(max_examples=200, deadline=None)

# Small pools, so that random policies and requirements collide often (and near-misses are common).
NAMES = ["a", "b", "A", "a ", "а", "x.y", "café", "cafe\u0301"]
VALUES = ["ops", "Ops", "true", "True", "false", "1", "42", "0", "-1", "42.0", "urn:org:ops", "null"]
SCOPES = ["s", "s:read", "s:write", "S"]
CLAIM_NAMES = ["role", "Role", "lvl", "r", "g", "realm", "urn:g"]
TOOLS = ["t0", "t1", "t2", "t3"]

scalar = st.one_of(st.sampled_from(VALUES), st.booleans(), st.sampled_from([0, 1, 42, -1, 10**20]),
                   st.sampled_from([1.0, 42.0, 0.5]), st.none())
claim_value = st.one_of(scalar, st.lists(scalar, max_size=3), st.lists(st.lists(scalar, max_size=1),
                                                                          max_size=1))


def requirement(custom: list[str] | None = None, capabilities: bool = True) -> st.SearchStrategy[str]:
    options = [
        st.sampled_from(NAMES).map(lambda n: f"env:{n}"),
        st.sampled_from(NAMES).map(lambda n: f"feature:{n}"),
        st.sampled_from(NAMES).map(lambda n: f"state:{n}"),
        st.just("auth:oauth2"),
        st.tuples(st.sampled_from(CLAIM_NAMES[:-1]), st.sampled_from(VALUES)).map(
            lambda p: f"auth:claim:{p[0]}:{p[1]}"),
        st.sampled_from(SCOPES).map(lambda s: f"auth:scope:{s}"),
    ]
    if capabilities:
        options.append(st.sampled_from(NAMES).map(lambda n: f"capability:{n}"))
    if custom:
        options.append(st.sampled_from(custom))
    return st.one_of(*options)


@st.composite
def claims(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()) and draw(st.booleans()):
        return None  # anonymous, a quarter of the time
    out: dict[str, Any] = {"sub": "someone"}
    for name in draw(st.lists(st.sampled_from(CLAIM_NAMES), unique=True)):
        out[name] = draw(claim_value)
    if draw(st.booleans()):
        out["realm"] = {"roles": draw(claim_value)}
    if draw(st.booleans()):
        out["scope"] = " ".join(draw(st.lists(st.sampled_from([*SCOPES, ""]), max_size=3)))
    if draw(st.booleans()):
        out["scp"] = draw(st.lists(st.sampled_from([*SCOPES, 1]), max_size=3))
    if draw(st.booleans()):
        out["caps"] = draw(st.one_of(st.sampled_from(NAMES), st.lists(st.sampled_from([*NAMES, 7]))))
    return out


@st.composite
def worlds(draw: st.DrawFn, custom: list[str] | None = None) -> World:
    condition = requirement(custom, capabilities=False)
    return World(
        labels=set(draw(st.lists(st.sampled_from(NAMES)))),
        flags=draw(st.dictionaries(st.sampled_from(NAMES), st.booleans())),  # a policy takes booleans
        state=draw(st.dictionaries(st.sampled_from(NAMES), st.booleans())),
        grants=draw(st.lists(st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
                                       st.lists(condition, max_size=3)), max_size=4)),
        capability_claim=draw(st.sampled_from([None, "caps"])),
        aliases=draw(st.sampled_from([{}, {"r": ["realm", "roles"]}, {"r": ["realm", "roles"],
                                                                      "g": ["urn:g"]}])),
        implications=draw(st.dictionaries(st.sampled_from(SCOPES), st.lists(st.sampled_from(SCOPES)))),
        claims=draw(claims()),
    )


def policy_source(w: World, policy_tools: dict[str, list[str]], timeout: float = 0.5) -> PolicySource:
    data = {
        "environment": sorted(w.labels),
        "environment_variable": "MCP_PRECONDITIONS_TEST_UNSET_VARIABLE",
        "features": {"flags": w.flags},
        "state": {"values": w.state},
        "capabilities": {"grants": [{"capabilities": g[0], "when": g[1],
                                     **({"arguments": g[2]} if len(g) > 2 else {}),
                                     **({"argument_claims": g[3]} if len(g) > 3 else {})}
                                    for g in w.grants],
                         **({"claim": w.capability_claim} if w.capability_claim else {})},
        # a one-key path is given as a plain string, as a policy author would write it
        "auth": {"claim_aliases": {k: (v[0] if len(v) == 1 else v) for k, v in w.aliases.items()},
                 "scope_implications": w.implications},
        "tools": {name: {"requirements": reqs} for name, reqs in policy_tools.items()},
        "guard": {"lookup_timeout_seconds": timeout},
    }
    return PolicySource(Policy.model_validate(data), "(generated)", "rev", Path("."))


def identity_of(w: World) -> Identity:
    return ANONYMOUS_IDENTITY if w.claims is None else Identity(principal=Principal.from_claims(w.claims))


tool_lists = st.dictionaries(st.sampled_from(TOOLS), st.lists(requirement(), max_size=5))


@SETTINGS
@given(worlds(), tool_lists, tool_lists)
def test_the_guard_agrees_with_the_reference(w: World, code: dict[str, list[str]],
                                             policy_tools: dict[str, list[str]]) -> None:
    guard = Guard(policy_source(w, policy_tools), code, entry_points=False)
    identity = identity_of(w)
    expected_callable = []
    for tool in TOOLS:
        allowed, unmet = decide([*code.get(tool, []), *policy_tools.get(tool, [])], w)
        decision = guard.decide(tool, identity, record=False)
        assert (decision.allowed, decision.unmet, decision.errors) == (allowed, unmet, ())
        if allowed:
            expected_callable.append(tool)
    credentials = ANONYMOUS if w.claims is None else Credentials(principal=Principal.from_claims(w.claims))
    assert asyncio.run(guard.callable_tools(credentials, TOOLS)) == expected_callable


# -- fail closed --------------------------------------------------------------------------------
CUSTOM = [f"zz:k{i}" for i in range(6)]
GOOD = ["ok", "async_ok"]
BAD = ["no", "raise", "async_raise", "timeout", "none", "one", "yes", "other_outcome", "async_garbage"]


class Faulty:
    """The `zz:` namespace; each requirement behaves as the test drew it."""

    namespace = "zz"

    def __init__(self, behaviour: dict[str, str]) -> None:
        self.behaviour = behaviour

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Any:
        kind = self.behaviour.get(requirement, "no")
        sync = {"ok": True, "no": False, "none": None, "one": 1, "yes": "yes",
                "other_outcome": Outcome.satisfied("zz:elsewhere")}
        if kind in sync:
            return sync[kind]
        if kind == "raise":
            raise RuntimeError("injected")
        return self._async(kind)

    async def _async(self, kind: str) -> Any:
        if kind == "timeout":
            await asyncio.sleep(30)  # a resolver that hangs
        if kind == "async_raise":
            raise ConnectionError("injected")
        return True if kind == "async_ok" else "garbage"


@SETTINGS
@given(worlds(CUSTOM), st.dictionaries(st.sampled_from(CUSTOM), st.sampled_from(GOOD + BAD)),
       st.dictionaries(st.sampled_from(TOOLS), st.lists(requirement(CUSTOM), max_size=5)))
def test_faults_never_allow_a_call(w: World, behaviour: dict[str, str],
                                   code: dict[str, list[str]]) -> None:
    w.custom = {r for r in CUSTOM if behaviour.get(r) in GOOD}
    guard = Guard(policy_source(w, {}, timeout=0.02), code, resolvers=[Faulty(behaviour)],
                  entry_points=False)
    identity = identity_of(w)
    for tool, reqs in code.items():
        decision = guard.decide(tool, identity, record=False)
        allowed, unmet = decide(reqs, w)
        assert (decision.allowed, decision.unmet) == (allowed, unmet)
        faulty = [r for r in dict.fromkeys(reqs) if r in CUSTOM and behaviour.get(r) in BAD]
        if faulty:
            assert not decision.allowed
        for r in faulty:
            outcome = decision.outcome(r)
            assert outcome is not None
            expected = Status.UNSATISFIED if behaviour[r] == "no" else Status.ERROR
            assert outcome.status is expected
