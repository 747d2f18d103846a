"""`env:NAME`: satisfied iff NAME is one of the server's environment labels (exact strings).

Labels come from the policy's `environment` list, replaced by the comma-separated value of the
environment variable the policy names (default MCP_PRECONDITIONS_ENVIRONMENT) when it is set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..outcomes import Outcome
from ..requirements import body_of
from .base import CallContext


def environment_labels(policy_labels: Iterable[str], variable: str | None,
                       environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The effective labels. The variable's value is split on ',' and each item stripped of the
    spaces around the commas (list syntax); the labels themselves are then compared exactly."""
    env = os.environ if environ is None else environ
    if variable and variable in env:
        # Only ASCII spaces and tabs around the commas are list syntax; any other character,
        # NBSP and zero-width ones included, belongs to the label and is compared exactly.
        return frozenset(item.strip(" \t") for item in env[variable].split(",") if item.strip(" \t"))
    return frozenset(policy_labels)


class EnvResolver:
    namespace = "env"
    forms = ("env:NAME",)

    def __init__(self, labels: Iterable[str]) -> None:
        self.labels = frozenset(labels)

    def validate(self, requirement: str) -> str | None:
        return None if body_of(requirement) else "env: needs a label name (env:NAME)"

    def static_outcome(self, requirement: str) -> Outcome | None:
        name = body_of(requirement)
        if name in self.labels:
            return Outcome.satisfied(requirement, f"environment label '{name}' is set")
        return Outcome.unsatisfied(requirement, f"environment label '{name}' is not among this "
                                                f"server's labels")

    def resolve(self, requirement: str, context: CallContext) -> Outcome:
        outcome = self.static_outcome(requirement)
        assert outcome is not None
        return outcome
