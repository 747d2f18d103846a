"""`capability:NAME`: satisfied iff a policy grant gives NAME to this call, or a configured token
claim lists NAME.

A grant applies when every one of its `when` requirements is satisfied (decided by the other
namespaces' resolvers of the same snapshot). Grants never depend on capabilities, so no cycles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..outcomes import Outcome, Status
from ..planner import Capability, describe
from ..principal import Identity
from ..requirements import body_of
from .base import CallContext

Evaluate = Callable[[str, CallContext], "Outcome | Awaitable[Outcome]"]
FastCheck = Callable[[Identity], "Outcome | None"]
_SATISFIED = Status.SATISFIED


@dataclass(frozen=True, slots=True)
class CompiledGrant:
    index: int
    capabilities: frozenset[str]
    when: tuple[str, ...]


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

    def __init__(self, grants: Sequence[CompiledGrant], claim: str | None, evaluate: Evaluate) -> None:
        self.claim = claim
        self._evaluate = evaluate
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

    def fast_check(self, requirement: str, condition: Callable[[str], Outcome | FastCheck | None]
                   ) -> FastCheck | None:
        """An identity-only check, when every grant condition is static or identity-only
        (`condition` gives the snapshot's compiled form of one). It returns exactly the outcome
        `resolve` would: a granting grant's precomputed outcome, or `_combine`'s denial."""
        name = body_of(requirement)
        grants = self._by_name.get(name, ())
        compiled = [tuple(condition(cond) for cond in g.when) for g in grants]
        if any(c is None for conds in compiled for c in conds):
            return None  # some condition needs the full call context
        conditions = cast(list[tuple[Outcome | FastCheck, ...]], compiled)
        # Grants that can still apply (no failing static condition), with only their live checks
        # (each with its requirement: it must answer an Outcome for that one).
        open_grants = [(tuple((req, c) for req, c in zip(g.when, conds, strict=True)
                              if not isinstance(c, Outcome)),
                        Outcome.satisfied(requirement, f"grant #{g.index} gives '{name}'"))
                       for g, conds in zip(grants, conditions, strict=True)
                       if all(c.status is _SATISFIED for c in conds if isinstance(c, Outcome))]
        claim = self.claim
        by_claim = Outcome.satisfied(requirement, f"token claim '{claim}' lists '{name}'")

        def capability(identity: Identity) -> Outcome | None:
            principal = identity.principal
            if principal is None:
                return None
            # claims.get first: claim_lists' type checks cost more than the usual miss
            if claim is not None and principal.claims.get(claim) is not None and claim_lists(
                    principal.claims, claim, name):
                return by_claim
            for checks, granted in open_grants:
                for cond, check in checks:
                    outcome = check(identity)
                    if outcome.__class__ is not Outcome or outcome.requirement != cond:
                        return None  # undecided here (an earlier grant might still apply), or no
                                     # proper answer: the full evaluation decides
                    if outcome.status is not _SATISFIED:
                        break
                else:
                    return granted
            return self._fast_denial(requirement, name, grants, conditions, identity)

        def denial(identity: Identity) -> Outcome | None:
            return self._fast_denial(requirement, name, grants, conditions, identity)
        return describe(capability, Capability(
            claim, name, by_claim, claim_lists,
            tuple((granted, checks) for checks, granted in open_grants),
            denial))

    def _fast_denial(self, requirement: str, name: str, grants: Sequence[CompiledGrant],
                     conditions: list[tuple[Outcome | FastCheck, ...]], identity: Identity
                     ) -> Outcome | None:
        """No grant applies: the same detailed denial `resolve` gives, or None to let it decide."""
        results: list[list[Outcome]] = []
        for grant, conds in zip(grants, conditions, strict=True):
            outs = [c if isinstance(c, Outcome) else c(identity) for c in conds]
            if any(o.__class__ is not Outcome or o.requirement != cond
                   for cond, o in zip(grant.when, outs, strict=True)):
                return None  # undecided, or not a proper answer: the full evaluation decides
            results.append(cast(list[Outcome], outs))
        return self._combine(requirement, name, grants, results)

    def resolve(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        name = body_of(requirement)
        principal = context.identity.principal
        if self.claim is not None and principal is not None and claim_lists(principal.claims,
                                                                            self.claim, name):
            return Outcome.satisfied(requirement, f"token claim '{self.claim}' lists '{name}'")
        grants = self._by_name.get(name, ())
        results: list[list[Outcome | Awaitable[Outcome]]] = [
            [self._evaluate(cond, context) for cond in g.when] for g in grants]
        if any(not isinstance(r, Outcome) for rs in results for r in rs):
            return self._finish_async(requirement, name, grants, results)
        return self._combine(requirement, name, grants, results)  # type: ignore[arg-type]

    async def _finish_async(self, requirement: str, name: str, grants: Sequence[CompiledGrant],
                            results: list[list[Outcome | Awaitable[Outcome]]]) -> Outcome:
        # Conditions are independent lookups: run them concurrently (SPEC §3), as the guard does,
        # so N slow conditions take one timeout, not N, and none is left un-awaited on a timeout.
        pending = [r for rs in results for r in rs if not isinstance(r, Outcome)]
        finished = iter(await asyncio.gather(*pending))
        done = [[r if isinstance(r, Outcome) else next(finished) for r in rs] for rs in results]
        return self._combine(requirement, name, grants, done)

    def _combine(self, requirement: str, name: str, grants: Sequence[CompiledGrant],
                 results: list[list[Outcome]]) -> Outcome:
        failures: list[str] = []
        errored = False
        for grant, outs in zip(grants, results, strict=True):
            if all(o.ok for o in outs):
                return Outcome.satisfied(requirement, f"grant #{grant.index} gives '{name}'")
            bad = [o for o in outs if not o.ok]
            errored = errored or any(o.status is Status.ERROR for o in bad)
            failures.append(f"grant #{grant.index} needs " + "; ".join(
                f"{o.requirement} ({o.reason})" for o in bad))
        where = f"token claim '{self.claim}' does not list it" if self.claim else ""
        detail = "; ".join(x for x in [where, *failures] if x) or "no grant gives it"
        reason = f"capability '{name}' not granted: {detail}"
        return Outcome.error(requirement, reason) if errored else Outcome.unsatisfied(requirement, reason)
