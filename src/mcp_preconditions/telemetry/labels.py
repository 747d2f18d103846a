"""Label values for the metrics, bounded: what a caller sends can never add a series.

A tool label is a name its server lists, a requirement label one the policy or a listed tool
declares; anything else is one fixed value. A confidential requirement is always `(withheld)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..outcomes import Decision, Status

UNLISTED = "(unlisted)"  # a tool name its server does not list
WITHHELD = "(withheld)"  # a confidential requirement (SPEC §5): never named anywhere
OTHER = "(other)"  # a requirement string no listed tool declares
QUOTA_PREFIX = "quota:"
# `decisions_total{result}`: see `result_of` for when a denial is an `error`.
RESULTS = ("allowed", "denied", "error", "unlisted")
Tools = Mapping[str, Iterable[str]]  # tool name -> its effective requirements, as listed


@dataclass(frozen=True, slots=True)
class Bounds:
    """The label values one server may use: its listed tool names and the requirement strings they
    declare (confidential ones left out, so they can never become a label)."""

    tools: frozenset[str] = frozenset()
    requirements: frozenset[str] = frozenset()

    @classmethod
    def of(cls, tools: Tools, confidential: Iterable[str] = ()) -> Bounds:
        secret = frozenset(confidential)
        declared = {r for reqs in tools.values() for r in reqs if isinstance(r, str)}
        return cls(frozenset(tools), frozenset(declared - secret))

    def tool(self, name: str) -> str:
        return name if name in self.tools else UNLISTED


def result_of(decision: Decision, listed: bool = True) -> str:
    """`unlisted` for a tool its server does not list; else `allowed`, or, for a denial, `error`
    when every unmet requirement ended as `error` (a backend down or slow, a resolver failing:
    nothing the caller lacks was found, so the denial is the service's fault), else `denied`."""
    if not listed:
        return "unlisted"
    if decision.allowed:
        return "allowed"
    statuses = [o.status for o in decision.outcomes if o.status is not Status.SATISFIED]
    return "error" if statuses and all(s is Status.ERROR for s in statuses) else "denied"


def requirement_label(requirement: str, confidential: frozenset[str], declared: frozenset[str]) -> str:
    if requirement in confidential:
        return WITHHELD
    return requirement if requirement in declared else OTHER


def quota_label(requirement: str, confidential: frozenset[str], declared: frozenset[str]) -> str:
    """The `quota` label of an exhausted `quota:NAME` requirement: NAME, bounded like a
    requirement label."""
    label = requirement_label(requirement, confidential, declared)
    return label[len(QUOTA_PREFIX):] if label.startswith(QUOTA_PREFIX) else label
