"""The decision point (SPEC §16): AuthZEN requests answered by a Guard's policy, exactly as the guard
decides a call. One request is one guard decision, recorded like every decision.

A tool the policy does not name (no `[tools.NAME]` table, no requirements of its own) is denied:
a decision point answers only what its policy decides, never "true" for an action it has never
heard of. A denial's `context.reason_admin.unmet` lists the unmet requirements the guard may name
to a caller: a confidential one never appears.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from ..auth.build import verification_configured
from ..auth.header import credentials_from_authorization_header
from ..errors import Malformed
from ..guard import Guard
from ..outcomes import Decision, Refusal, Refused
from ..pdp.wire import AccessDecision, Evaluation, Evaluations
from ..policy.load import PolicySource
from ..principal import Credentials
from ..snapshot import Snapshot
from .reading import Call, Reading

ALLOW = AccessDecision(True)
UNLISTED = Refusal(Refused.UNLISTED, "the policy lists no requirements for it")
_TRIES = 3  # a request read under one revision and decided under another is read again


class DecisionPoint:
    """Answers Access Evaluation requests with `guard`'s decisions."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self._reading: tuple[PolicySource, Reading] | None = None

    def reading(self, snapshot: Snapshot) -> Reading:
        """How the snapshot's policy reads requests (built once per policy revision)."""
        cached = self._reading
        if cached is None or cached[0] is not snapshot.source:
            cached = self._reading = (snapshot.source, Reading(snapshot.source.policy.pdp_server))
        return cached[1]

    async def caller_accepted(self, authorization: str | None) -> bool:
        """Whether the calling enforcement point may ask: always, unless the policy's `[auth]`
        verifies tokens; then only with a bearer token it accepts."""
        if not verification_configured(self.guard.snapshot.source.policy.auth):
            return True
        credentials = credentials_from_authorization_header(authorization)
        if credentials.token is None:
            return False
        return (await self.guard.authenticate(credentials)).principal is not None

    async def evaluation(self, request: Evaluation) -> AccessDecision:
        """One request's decision; Malformed when it cannot be read as a call."""
        for _ in range(_TRIES):
            snapshot = self.guard.snapshot
            call = self.reading(snapshot).call(request)
            decision = await self._decide(snapshot, call)
            if decision.revision == snapshot.revision:  # read and decided by one policy
                self.guard.recorder.record(decision)
                return answer(decision)
        return AccessDecision(False, {"error": {"status": 503, "message": "the policy is reloading"}})

    async def evaluations(self, batch: Evaluations) -> list[AccessDecision]:
        """A batch's decisions in order, each item decided on its own (a malformed one is false),
        until the batch's semantic stops it."""
        answered: list[AccessDecision] = []
        for item in batch.items:
            found = await self._item(item)
            answered.append(found)
            if batch.semantic.stops_after(found.decision):
                break
        return answered

    async def _item(self, item: Evaluation | Malformed) -> AccessDecision:
        if isinstance(item, Malformed):
            return refused(item)
        try:
            return await self.evaluation(item)
        except Malformed as problem:
            return refused(problem)

    async def _decide(self, snapshot: Snapshot, call: Call) -> Decision:
        credentials = Credentials(principal=call.principal)
        if call.tool not in snapshot.tools and call.tool not in snapshot.source.policy.tools:
            return await self.guard.refuse(call.tool, credentials, UNLISTED, record=False)
        decided = self.guard.check_now(call.tool, credentials, call.arguments, record=False)
        return decided if isinstance(decided, Decision) else await decided


def answer(decision: Decision) -> AccessDecision:
    """A guard decision as an AuthZEN one; a denial names its disclosed unmet requirements."""
    if decision.allowed:
        return ALLOW
    reason: dict[str, Any] = {"unmet": list(decision.disclosed_unmet)}
    if decision.refusal is not None and decision.refusal.kind is Refused.UNLISTED:
        reason["unlisted_tool"] = decision.tool
    return AccessDecision(False, MappingProxyType({"reason_admin": reason}))


def refused(problem: Malformed) -> AccessDecision:
    """A batch item that is not an evaluation: false, with the one line saying why."""
    return AccessDecision(False, {"error": {"status": 400, "message": str(problem)}})


def batch_json(decisions: Sequence[AccessDecision]) -> dict[str, Any]:
    return {"evaluations": [d.to_json() for d in decisions]}
