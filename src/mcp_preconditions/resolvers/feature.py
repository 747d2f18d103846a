"""`feature:KEY`: satisfied iff flag KEY evaluates to boolean `true` for this call.

Static flags in the policy are decided once per snapshot; other keys go to a FlagSource
(OpenFeature) when one is configured. Missing or non-boolean is unsatisfied; a source failure is error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from ..outcomes import Outcome
from ..requirements import body_of
from .base import CallContext

_MISSING = object()


class FlagSource(Protocol):
    """A live flag backend. `evaluate` returns the flag's value, or None when the flag is missing;
    it raises when the backend fails (the guard turns that into an `error` outcome)."""

    name: str

    def evaluate(self, key: str, context: CallContext) -> Awaitable[Any]: ...


def flag_outcome(requirement: str, key: str, value: Any, origin: str) -> Outcome:
    if value is True:
        return Outcome.satisfied(requirement, f"flag '{key}' is true ({origin})")
    if value is None or value is _MISSING:
        return Outcome.unsatisfied(requirement, f"flag '{key}' is not defined ({origin})")
    if value is False:
        return Outcome.unsatisfied(requirement, f"flag '{key}' is false ({origin})")
    return Outcome.unsatisfied(requirement, f"flag '{key}' is not a boolean ({origin}: "
                                            f"{type(value).__name__})")


class FeatureResolver:
    namespace = "feature"
    forms = ("feature:KEY",)

    def __init__(self, flags: Mapping[str, Any], source: FlagSource | None = None) -> None:
        self.flags = dict(flags)
        self.source = source

    def validate(self, requirement: str) -> str | None:
        return None if body_of(requirement) else "feature: needs a flag key (feature:KEY)"

    def static_outcome(self, requirement: str) -> Outcome | None:
        key = body_of(requirement)
        if key in self.flags:
            return flag_outcome(requirement, key, self.flags[key], "policy")
        if self.source is None:
            return flag_outcome(requirement, key, _MISSING, "policy")
        return None

    def resolve(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        static = self.static_outcome(requirement)
        if static is not None:
            return static
        assert self.source is not None
        return self._live(requirement, body_of(requirement), context, self.source)

    async def _live(self, requirement: str, key: str, context: CallContext,
                    source: FlagSource) -> Outcome:
        value = await source.evaluate(key, context)
        return flag_outcome(requirement, key, value, source.name)
