"""Declaring a server's tools again: the series of a tool it no longer lists are forgotten (the
counts of the tools still listed, and of other servers, are kept), as are those of requirements no
server declares any more; a tool listed again starts at 0.
"""

from __future__ import annotations

from mcp_preconditions.outcomes import Decision, Outcome, Status
from mcp_preconditions.telemetry import Metrics

DECISIONS = "mcp_preconditions_decisions_total"


def series(m: Metrics, name: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.values()): s.value for f in m.registry.collect() for s in f.samples
            if s.name == name}


def denied(tool: str, requirement: str) -> Decision:
    if requirement.startswith("quota:"):
        outcome = Outcome(requirement, Status.UNSATISFIED, "used up", transient=True,
                          retry_after_seconds=1.0)
    else:
        outcome = Outcome.unsatisfied(requirement, "no")
    return Decision(tool, False, (outcome,))


def test_a_tool_no_longer_listed_loses_its_series_and_the_others_keep_their_counts() -> None:
    m = Metrics()
    m.declare("a", {"keep": ["env:prod"], "drop": ["env:staging", "quota:q"]})
    m.declare("b", {"drop": ["env:staging"]})  # the same name on another server
    for server, tool, requirement in (("a", "keep", "env:prod"), ("a", "drop", "env:staging"),
                                      ("a", "drop", "quota:q"), ("b", "drop", "env:staging")):
        m.observe_decision(server, denied(tool, requirement))
    m.observe_unlisted("a", "drop")  # listed, refused without a decision
    m.declare("a", {"keep": ["env:prod"]})
    decisions = series(m, DECISIONS)
    assert {k for k in decisions if k[0] == "a"} == {
        ("a", "keep", "allowed"), ("a", "keep", "denied"), ("a", "keep", "error"),
        ("a", "(unlisted)", "unlisted")}
    assert decisions[("a", "keep", "denied")] == 1
    assert decisions[("b", "drop", "denied")] == 1  # b still lists it
    # env:staging is still b's; quota:q no server declares any more.
    assert series(m, "mcp_preconditions_unmet_total") == {("env:prod",): 1, ("env:staging",): 2}
    assert series(m, "mcp_preconditions_quota_exhausted_total") == {}


def test_a_tool_listed_again_starts_at_zero() -> None:
    m = Metrics()
    m.declare("a", {"t": ["env:prod"]})
    m.observe_decision("a", denied("t", "env:prod"))
    m.declare("a", {})
    assert all(k[1] != "t" for k in series(m, DECISIONS))
    m.declare("a", {"t": ["env:prod"]})
    assert series(m, DECISIONS)[("a", "t", "denied")] == 0
    assert series(m, "mcp_preconditions_unmet_total") == {("env:prod",): 0}


def test_a_call_to_a_forgotten_tool_counts_as_unlisted() -> None:
    m = Metrics()
    m.declare("a", {"t": ["env:prod"]})
    m.declare("a", {"u": ["env:prod"]})
    m.observe_decision("a", denied("t", "env:prod"))
    assert series(m, DECISIONS)[("a", "(unlisted)", "unlisted")] == 1
    assert all(k[1] != "t" for k in series(m, DECISIONS))
