"""`pdp:` as a late stage (late.py): a tool's `pdp:` requirements decided for one call once every
other requirement held (a call refused for another reason never reaches a decision point), before
`credential:` and `approval:`. Cached decisions answer at once (no await); the others are asked in
one batch per endpoint. It leaves nothing for the forwarding: only the record's `pdp` notes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from ..late import Found, LateCall
from ..outcomes import Outcome
from ..requirements import body_of
from .points import Ask, DecisionPoints, Verdict, anonymous, outcome_of
from .request import CALL


class PdpStage:
    """A tool's `pdp:` requirements (usually one), decided together."""

    namespace = "pdp"
    # Every adapter carries a sidecar for a `pdp:` tool (late.py's `carries`), so that the decision
    # record's `pdp` notes (SPEC §16) are written on the hosted paths too, not only the gateway's.
    carries = True

    def __init__(self, resolver: DecisionPoints, requirements: Sequence[str]) -> None:
        self.resolver = resolver
        self.requirements = tuple(requirements)
        self.tables = tuple(resolver.tables[body_of(r)] for r in self.requirements)
        # A backstop over the endpoints' own timeouts (each says which PDP did not answer).
        self.timeout: float | None = max(t.endpoint.timeout for t in self.tables) + 1.0
        self._anonymous = tuple(anonymous(r) for r in self.requirements)
        first = self.tables[0].name  # (used for a one-requirement stage only)
        self._allowed = (outcome_of(self.requirements[0], Verdict(first, True, False)),)
        self._denied = (outcome_of(self.requirements[0], Verdict(first, False, False)),)

    def decide(self, call: LateCall) -> Found | Awaitable[Found]:
        """At once when every decision is cached; else awaited, the missing ones asked."""
        resolver = self.resolver
        try:
            asks = resolver.asks(call.identity.principal, CALL, call.tool, call.arguments,
                                 self.tables)
        except ValueError as exc:  # arguments with no canonical form: no decision to be had
            return tuple(outcome_of(r, Verdict(t.name, None, False, None, str(exc)))
                         for r, t in zip(self.requirements, self.tables, strict=True))
        if asks is None:  # no request for an anonymous caller
            return self._anonymous
        verdicts = [resolver.cached(a) for a in asks]
        if None not in verdicts:
            return self._outcomes(call, verdicts)  # type: ignore[arg-type]
        return self._asked(call, asks, verdicts)

    async def _asked(self, call: LateCall, asks: list[Ask], verdicts: list[Verdict | None]
                     ) -> Found:
        missing = [i for i, v in enumerate(verdicts) if v is None]
        for i, verdict in zip(missing, await self.resolver.ask([asks[i] for i in missing]),
                              strict=True):
            verdicts[i] = verdict
        return self._outcomes(call, verdicts)  # type: ignore[arg-type]

    def _outcomes(self, call: LateCall, verdicts: list[Verdict]) -> tuple[Outcome, ...]:
        sidecar = call.sidecar
        if sidecar is not None:
            sidecar.notes["pdp"] = [v.note() for v in verdicts]
        if len(verdicts) == 1:  # the usual tool: one `pdp:` requirement, its outcomes made once
            decision = verdicts[0].decision
            if decision is not None:
                return self._allowed if decision else self._denied
        return tuple(outcome_of(r, v) for r, v in zip(self.requirements, verdicts, strict=True))

    def release(self, call: LateCall) -> None:
        """A later stage refused the call: a decision takes nothing, so nothing is given back."""
        return None
