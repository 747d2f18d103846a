"""`approval:` wired into the guard, against a tiny reference model (SPEC §15): random sequences of
calls (two callers, two argument values) of a tool needing an approver's approval and then a quota
unit, of approvals and refusals of the requests those calls made, of another tool spending the
quota. The model: a call runs only when its own approval was given and not used and the caller's
quota has a unit; it then uses both; a quota that refuses keeps the approval for the next call; a
refused request denies its call for good; a waiting or refused request is never made again. Every
`used` counted is a call that ran.

The default tier runs a quarter of the examples (`EXAMPLES`); the full count runs in the interop
pass of `make test`, so that the default tier stays fast on two loaded cores.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions.approvals import ApprovalResolver, MemoryApprovalStore, Party
from mcp_preconditions.guard import Guard
from mcp_preconditions.late import Sidecar
from mcp_preconditions.namespaces import LiveSources
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials, Principal

POLICY = """[approvals.deploy]
approvers = ["auth:claim:role:rm"]
[quotas.twice]
calls = 2
per_seconds = 86400
[tools.deploy]
requirements = ["approval:deploy", "quota:twice"]
[tools.spend]
requirements = ["quota:twice"]
"""
CALLERS = ("alice", "bob")
ARGS = ("prod", "staging")
RITA = Party("https://idp", "rita")

Kind = Literal["call", "approve", "refuse", "spend"]
KINDS: tuple[Kind, ...] = ("call", "call", "approve", "approve", "refuse", "spend")
Op = tuple[Kind, str, str]  # (kind, caller, argument)
OPS = st.lists(st.tuples(st.sampled_from(KINDS),
                         st.sampled_from(CALLERS), st.sampled_from(ARGS)), max_size=30)


@dataclass
class Model:
    """Per (caller, argument): the open request's state; per caller: quota units left."""

    state: dict[tuple[str, str], str] = field(default_factory=dict)  # requested|approved|refused
    units: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CALLERS, 2))
    ran: int = 0
    requested: int = 0

    def call(self, key: tuple[str, str]) -> bool:
        state = self.state.get(key)
        if state is None:
            self.state[key] = "requested"
            self.requested += 1
            return False
        if state != "approved" or self.units[key[0]] == 0:
            return False
        self.units[key[0]] -= 1
        del self.state[key]  # used: the next call makes a new request
        self.ran += 1
        return True

    def spend(self, caller: str) -> bool:
        """Another tool takes a unit of the caller's quota."""
        if self.units[caller] == 0:
            return False
        self.units[caller] -= 1
        return True

    def decide(self, key: tuple[str, str], decision: str) -> None:
        if self.state.get(key) == "requested":
            self.state[key] = "approved" if decision == "approve" else "refused"


def credentials(caller: str) -> Credentials:
    return Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": caller}))


async def play(ops: list[Op]) -> None:
    counted: list[tuple[str, str]] = []
    guard = Guard(parse_policy(POLICY.encode(), "policy.toml"), live=LiveSources(
        approval_memory=MemoryApprovalStore(clock=lambda: 1000.0),
        approval_results=lambda name, result: counted.append((name, result))))
    resolver = guard.snapshot.registry.get("approval")
    assert isinstance(resolver, ApprovalResolver)
    store = resolver.approvals["deploy"].store
    model, ids = Model(), {}
    for op, caller, arg in ops:
        key = (caller, arg)
        if op == "call":
            expected = model.call(key)
            decision = await guard.check("deploy", credentials(caller), {"env": arg},
                                         sidecar=Sidecar())
            assert decision.allowed is expected, (ops, op, key)
            if decision.notes is not None:
                ids[key] = decision.notes["approval"]["id"]
        elif op == "spend":
            spent = await guard.check("spend", credentials(caller), {})
            assert spent.allowed is model.spend(caller)
        elif key in ids:
            await store.decide(ids[key], op, RITA)
            model.decide(key, op)
    assert counted.count(("deploy", "used")) == model.ran
    assert counted.count(("deploy", "requested")) == model.requested


EXAMPLES = [pytest.param(75, id="default-tier"), pytest.param(300, id="full", marks=pytest.mark.interop)]


@pytest.mark.parametrize("examples", EXAMPLES)
def test_the_guard_honours_approvals_like_the_model(examples: int) -> None:
    @settings(max_examples=examples, deadline=None)
    @given(OPS)
    def honoured(ops: list[Op]) -> None:
        asyncio.run(play(ops))
    honoured()
