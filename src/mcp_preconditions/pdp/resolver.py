"""`pdp:NAME` (SPEC §16): the AuthZEN decision point of `[pdp.NAME]` decides, for the verified caller,
whether they may call (or see) a tool. `true` satisfies; `false` is unsatisfied (the PDP's
`reason_admin` goes to the decision record, never to the caller); no decision (a timeout, another
status, garbage) is `error`. An anonymous caller is unsatisfied without a request.

The resolver is the decision points (points.py: the lookups every path shares) seen as the `pdp`
namespace: it validates a requirement, makes a call's late stage (stage.py) and decides a caller's
listing (listing.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..outcomes import Outcome, Status
from ..principal import Identity
from ..requirements import body_of
from .listing import hidden
from .points import NAMESPACE, DecisionPoints
from .stage import PdpStage

PDP_ORDER = 50  # after every static requirement, before credentials (100) and approvals (500)


class PdpResolver(DecisionPoints):
    """The `pdp` namespace of one policy snapshot."""

    namespace = NAMESPACE
    forms = ("pdp:NAME, where the policy defines [pdp.NAME]",)
    order = PDP_ORDER
    not_a_condition = ("a decision point decides a call to a tool, after its other requirements: "
                       "it is not a grant condition")

    # -- the resolver protocol -------------------------------------------------------------------
    def validate(self, requirement: str) -> str | None:
        name = body_of(requirement)
        if name in self.tables:
            return None
        defined = ", ".join(repr(n) for n in self.tables) or "none"
        return f"the policy defines no decision point {name!r} (defined: {defined})"

    def resolve(self, requirement: str, context: object) -> Outcome:
        """The plain protocol only looks: a decision point decides a tool's own call (the late
        stage) or a caller's listing (`listing`), never a condition of something else."""
        return Outcome(requirement, Status.UNSATISFIED, "decided by its decision point for a call, "
                       "after the tool's other requirements", transient=True)

    def stage(self, requirements: Sequence[str]) -> PdpStage:
        return PdpStage(self, requirements)

    async def hidden(self, identity: Identity, tools: Mapping[str, Sequence[str]]) -> set[str]:
        """Which of `tools` (each with its `pdp:` requirements) a caller's listing hides
        (listing.py; the guard's listing filter asks every late resolver that has it)."""
        return await hidden(self, identity, tools)

