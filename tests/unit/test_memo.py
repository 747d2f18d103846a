"""The per-caller memo: only tools the caller alone decides are remembered (a resolver that does not
declare `dependencies`, or declares them wrongly, is asked on every call); failures are never
remembered; a reload, another principal or an unlisted argument value is decided afresh; bounded.
"""

from __future__ import annotations

from typing import Any

from mcp_preconditions import Guard, Identity, Outcome, Principal, parse_policy
from mcp_preconditions.arguments import ArgumentCondition
from mcp_preconditions.memo import CallerMemo, key_form, reads_of
from mcp_preconditions.outcomes import ruling
from mcp_preconditions.resolvers.base import CallContext, Dependencies

POLICY = """
[[capabilities.grants]]
capabilities = ["launch"]
when = ["auth:claim:role:pilot"]
arguments = { "/vehicle" = ["falcon", 1] }
[state.values]
"clear" = true
"""


class Counted:
    """A custom namespace answering from `answers` (popped per call), counting its calls."""

    namespace = "ext"

    def __init__(self, *answers: Any, dependencies: Any = "undeclared") -> None:
        self.answers = list(answers)
        self.calls = 0
        if dependencies != "undeclared":
            self.dependencies = lambda requirement: dependencies

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return Outcome.satisfied(requirement) if answer else Outcome.unsatisfied(requirement, "no")


def guard(tools: dict[str, list[str]], *resolvers: Any, policy: str = POLICY) -> Guard:
    return Guard(parse_policy(policy.encode(), "p.toml"), tools, resolvers=resolvers,
                 entry_points=False)


def pilot() -> Identity:
    return Identity(principal=Principal.from_claims({"sub": "p", "role": "pilot"}))


def test_a_caller_decided_tool_is_remembered_and_decides_as_before() -> None:
    ext = Counted(True, dependencies=Dependencies())
    g = guard({"t": ["ext:x", "auth:claim:role:pilot", "state:clear"]}, ext)
    who = pilot()
    decisions = [g.decide("t", who, record=False) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, True]
    assert decisions[0].outcomes == decisions[2].outcomes
    assert ext.calls == 1  # asked once for this caller, then remembered


def test_a_resolver_without_dependencies_is_asked_on_every_call() -> None:
    ext = Counted(True, False, True)  # its answer changes between calls (a backend, a clock)
    g = guard({"t": ["ext:x", "auth:oauth2"]}, ext)
    who = pilot()
    assert [g.decide("t", who, record=False).allowed for _ in range(3)] == [True, False, True]
    assert ext.calls == 3


def test_a_live_state_lookup_is_never_remembered() -> None:
    DOOR[:] = [True, False]
    policy = POLICY.replace("[state.values]", "[state]\nttl_seconds = 0\n[state.values]") + (
        '[state.callables]\n"open" = "tests.unit.test_memo:door"\n')
    g = guard({"t": ["state:open", "auth:oauth2"]}, policy=policy)
    assert g.snapshot.tools["t"].reads is None
    who = pilot()
    assert [g.decide("t", who, record=False).allowed for _ in range(2)] == [True, False]


DOOR: list[bool] = []


def door() -> bool:
    return DOOR.pop(0)


def test_declared_dependencies_that_are_not_dependencies_are_not_trusted() -> None:
    for declared in (None, "garbage", Dependencies(arguments=("not a condition",))):  # type: ignore[arg-type]
        ext = Counted(True, False, dependencies=declared)
        g = guard({"t": ["ext:x"]}, ext)
        assert g.snapshot.tools["t"].reads is None, declared
        who = pilot()
        assert [g.decide("t", who, record=False).allowed for _ in range(2)] == [True, False]


def test_depending_on_a_live_requirement_is_not_caller_only() -> None:
    ext = Counted(True, dependencies=Dependencies(requirements=("ext2:y",)))

    class Live(Counted):
        namespace = "ext2"

    g = guard({"t": ["ext:x"]}, ext, Live(True))
    assert g.snapshot.tools["t"].reads is None


def test_a_failure_is_never_remembered() -> None:
    ext = Counted(RuntimeError("backend blip"), True, dependencies=Dependencies())
    g = guard({"t": ["ext:x"]}, ext)
    who = pilot()
    first, second = (g.decide("t", who, record=False) for _ in range(2))
    assert (first.allowed, first.errors) == (False, ("ext:x",))
    assert second.allowed and ext.calls == 2


def test_argument_values_only_listed_ones_are_remembered_and_typed() -> None:
    g = guard({"t": ["capability:launch"]})
    who = pilot()
    reads = g.snapshot.tools["t"].reads
    assert reads is not None
    principal = who.principal
    assert principal is not None

    def key(arguments: dict[str, Any]) -> object:
        return CallerMemo.key("t", reads, principal, arguments)

    assert key({"vehicle": "falcon"}) is not None
    assert key({"vehicle": "Falcon"}) is None  # unlisted: decided afresh
    assert key({"vehicle": [1]}) is None  # unhashable: decided afresh
    assert key({"vehicle": True}) is None  # `true` is not the listed `1`
    assert key({"vehicle": 1}) != key({"vehicle": "falcon"})
    values = ["falcon", 1, True, "Falcon", "falcon", 1, True, None, 1]
    assert [g.decide("t", who, {"vehicle": v}, record=False).allowed for v in values] == [
        True, True, False, False, True, True, False, False, True]
    assert not g.decide("t", who, {}, record=False).allowed


def test_another_principal_with_the_same_key_is_not_served_an_entry() -> None:
    memo = CallerMemo()
    first = Principal.from_claims({"sub": "a"})
    memo.keep(1, first, (True, (Outcome.satisfied("auth:oauth2"),)))
    assert memo.lookup(1, first) is not None
    assert memo.lookup(1, Principal.from_claims({"sub": "a"})) is None  # equal, not the same object


def test_each_principal_is_its_own_entry_and_a_reload_starts_afresh() -> None:
    g = guard({"t": []}, policy='[tools.t]\nrequirements = ["auth:claim:role:pilot"]\n')
    who, other = pilot(), Identity(principal=Principal.from_claims({"sub": "o", "role": "crew"}))
    assert g.decide("t", who, record=False).allowed
    assert not g.decide("t", other, record=False).allowed
    assert g.decide("t", who, record=False).allowed
    g.reload(parse_policy(b'[tools.t]\nrequirements = ["auth:claim:role:crew"]\n', "p.toml"))
    assert not g.decide("t", who, record=False).allowed  # same principal, new policy
    assert g.decide("t", other, record=False).allowed


def test_the_memo_is_bounded() -> None:
    memo = CallerMemo(maxsize=3)
    principals = [Principal.from_claims({"sub": str(i)}) for i in range(5)]
    for p in principals:
        memo.keep(id(p), p, (True, (Outcome.satisfied("auth:oauth2"),)))
    assert memo.lookup(id(principals[0]), principals[0]) is None
    assert memo.lookup(id(principals[4]), principals[4]) is not None
    assert len(memo.entries) <= 3


def test_conditions_of_grants_are_what_a_capability_depends_on() -> None:
    g = guard({"t": ["capability:launch"]})
    assert g.snapshot.tools["t"].reads == reads_of([ArgumentCondition.of("/vehicle", ["falcon", 1])])
    capability = g.snapshot.registry.get("capability")
    assert capability is not None
    assert capability.dependencies("capability:launch") == Dependencies(  # type: ignore[attr-defined]
        ("auth:claim:role:pilot",), (ArgumentCondition.of("/vehicle", ["falcon", 1]),))


def test_the_ruling_allows_only_some_outcomes_all_satisfied() -> None:
    yes, no = Outcome.satisfied("auth:oauth2"), Outcome.unsatisfied("env:production", "staging")
    failed = Outcome.error("state:clear", "backend down")
    assert ruling(()) == (False, ())
    assert ruling((yes,)) == (True, (yes,))
    assert ruling((yes, no)) == (False, (yes, no))
    assert ruling((yes, failed)) == (False, (yes, failed))


def test_a_remembered_denial_stays_a_denial_with_its_outcomes() -> None:
    g = guard({"t": ["capability:launch"]})
    who = pilot()
    first, second = (g.decide("t", who, {"vehicle": "falcon", "x": i}, record=False) for i in (1, 2))
    assert first.allowed and second.allowed and first.outcomes == second.outcomes
    crew = Identity(principal=Principal.from_claims({"sub": "c", "role": "crew"}))
    denied = [g.decide("t", crew, {"vehicle": "falcon"}, record=False) for _ in range(2)]
    assert [d.allowed for d in denied] == [False, False]
    assert denied[0].outcomes == denied[1].outcomes and denied[1].unmet == ("capability:launch",)


def test_key_forms_keep_types_apart() -> None:
    assert key_form("falcon") == "falcon"
    assert key_form(1) == (int, 1) and key_form(True) == (bool, True) and key_form(1) != key_form(True)
    assert key_form(1.0) is None and key_form(None) is None and key_form([1]) is None
    assert reads_of([ArgumentCondition.of("/a/b", ["x", 2, False])]) == (
        (("a", "b"), frozenset({"x", (int, 2), (bool, False)})),)
