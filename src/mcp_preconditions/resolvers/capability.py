"""`capability:NAME`: satisfied iff a policy grant gives NAME to this call, or a configured token
claim lists NAME.

A grant applies when every one of its `when` requirements is satisfied (decided by the other
namespaces' resolvers of the same snapshot) and every argument condition holds for the call's
arguments (a listed value, or the caller's own claim). Grants never depend on capabilities, so no
cycles. An outcome the arguments decided is marked `argument_dependent`: a client must not learn it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..arguments import ArgumentCondition, ClaimCondition
from ..outcomes import Outcome, OutcomeMemo, Status
from ..requirements import body_of
from .base import CallContext, Dependencies

Evaluate = Callable[[str, CallContext], "Outcome | Awaitable[Outcome]"]
_SATISFIED = Status.SATISFIED  # a module constant: an enum member read through its class is slow


@dataclass(frozen=True, slots=True)
class CompiledGrant:
    index: int
    capabilities: frozenset[str]
    when: tuple[str, ...]
    arguments: tuple[ArgumentCondition, ...] = ()
    claims: tuple[ClaimCondition, ...] = ()  # arguments that must equal a claim of the caller


def claim_lists(claims: Any, claim: str, name: str) -> bool:
    value = claims.get(claim) if hasattr(claims, "get") else None
    if isinstance(value, str):
        return value == name
    if isinstance(value, list):
        return any(isinstance(v, str) and v == name for v in value)
    return False


class CapabilityResolver:
    namespace = "capability"
    forms = ("capability:NAME",)

    def __init__(self, grants: Sequence[CompiledGrant], claim: str | None, evaluate: Evaluate,
                 confidential: Collection[str] = ()) -> None:
        self.claim = claim
        self._evaluate = evaluate
        self._confidential = frozenset(confidential)  # never named in an explanation
        self._granted = OutcomeMemo()  # the satisfied outcomes, by (requirement, grant, consulted)
        self._by_name: dict[str, tuple[CompiledGrant, ...]] = {}
        for grant in grants:
            for cap in grant.capabilities:
                self._by_name[cap] = (*self._by_name.get(cap, ()), grant)

    def validate(self, requirement: str) -> str | None:
        return None if body_of(requirement) else "capability: needs a name (capability:NAME)"

    def static_outcome(self, requirement: str) -> Outcome | None:
        name = body_of(requirement)
        if self.claim is None and not self._by_name.get(name):
            return Outcome.unsatisfied(requirement, f"no grant gives capability '{name}'")
        return None

    def dependencies(self, requirement: str) -> Dependencies | None:
        """A capability is decided by the principal's claim, its grants' conditions and their
        argument conditions. None when a grant compares an argument with a claim: any value may
        match, so no list of values keys a memo of its outcomes (each call is decided afresh)."""
        grants = self._by_name.get(body_of(requirement), ())
        if any(g.claims for g in grants):
            return None
        return Dependencies(tuple(dict.fromkeys(c for g in grants for c in g.when)),
                            tuple(a for g in grants for a in g.arguments))

    def resolve(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        name = body_of(requirement)
        principal = context.identity.principal
        if self.claim is not None and principal is not None and claim_lists(principal.claims,
                                                                            self.claim, name):
            return Outcome.satisfied(requirement, f"token claim '{self.claim}' lists '{name}'")
        # Grants in order, each decided as soon as its conditions are in: the first that applies
        # gives NAME, and later grants need no lookups. An async condition anywhere means waiting
        # for all of them, concurrently (`_finish_async`).
        grants = self._by_name.get(name, ())
        evaluate = self._evaluate
        results: list[list[Any]] = []
        for grant in grants:
            outs = [evaluate(cond, context) for cond in grant.when]
            results.append(outs)
            held = True
            for out in outs:
                if out.__class__ is not Outcome:
                    results += [[evaluate(c, context) for c in g.when] for g in grants[len(results):]]
                    return self._finish_async(requirement, name, grants, results, context)
                held = held and out.status is _SATISFIED
            if held:
                outcome = self._combine(requirement, name, grants[:len(results)], results, context)
                if outcome.status is _SATISFIED:
                    return outcome
        return self._combine(requirement, name, grants, results, context)

    async def _finish_async(self, requirement: str, name: str, grants: Sequence[CompiledGrant],
                            results: list[list[Outcome | Awaitable[Outcome]]], context: CallContext
                            ) -> Outcome:
        # Conditions are independent lookups: run them concurrently, as the guard does, so N slow
        # conditions take one timeout, not N, and none is left un-awaited on a timeout.
        pending = [r for rs in results for r in rs if not isinstance(r, Outcome)]
        finished = iter(await asyncio.gather(*pending))
        done = [[r if isinstance(r, Outcome) else next(finished) for r in rs] for rs in results]
        return self._combine(requirement, name, grants, done, context)

    def _combine(self, requirement: str, name: str, grants: Sequence[CompiledGrant],
                 results: list[list[Outcome]], context: CallContext) -> Outcome:
        """The first grant whose conditions all hold gives NAME; else a denial naming, per grant,
        what failed (confidential requirements unnamed). The arguments decided the outcome when a
        grant's `when` held and its argument conditions were consulted."""
        failures: list[str] = []
        errored = consulted = False
        for grant, outs in zip(grants, results, strict=True):
            bad = [o for o in outs if o.status is not _SATISFIED]
            if not bad and (grant.arguments or grant.claims):
                consulted = True
                mismatch = _mismatch(grant, context)
                if mismatch is not None:
                    failures.append(f"grant #{grant.index}: {mismatch}")
                    continue
            if not bad:
                key = (requirement, grant.index, consulted)
                return self._granted.lookup(key) or self._granted.keep(key, Outcome.satisfied(
                    requirement, f"grant #{grant.index} gives '{name}'", argument_dependent=consulted))
            errored = errored or any(o.status is Status.ERROR for o in bad)
            failures.append(f"grant #{grant.index} needs " + "; ".join(map(self._explain, bad)))
        where = f"token claim '{self.claim}' does not list it" if self.claim else ""
        detail = "; ".join(x for x in [where, *failures] if x) or "no grant gives it"
        reason = f"capability '{name}' not granted: {detail}"
        status = Status.ERROR if errored else Status.UNSATISFIED
        return Outcome(requirement, status, reason, consulted)

    def _explain(self, outcome: Outcome) -> str:
        if outcome.requirement in self._confidential:
            return "a confidential requirement"
        return f"{outcome.requirement} ({outcome.reason})"


def _mismatch(grant: CompiledGrant, context: CallContext) -> str | None:
    """Why the grant's first failing argument condition fails, or None when all hold."""
    arguments = context.arguments
    for condition in grant.arguments:
        failure = condition.failure(arguments)
        if failure is not None:
            return failure
    if grant.claims:
        principal = context.identity.principal
        claims = principal.claims if principal is not None else {}
        for claimed in grant.claims:
            failure = claimed.failure(arguments, claims)
            if failure is not None:
                return failure
    return None
