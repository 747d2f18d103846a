"""AuthZEN (OpenID Authorization API 1.0), SPEC §16, the decision point's side: the wire types (re-exported
from `pdp/wire.py`, which the enforcement point's side reads too), a request read as a call
(`reading`), the decision point answering them with the guard's decisions (`point`) and its HTTP
app (`app`, which needs orjson: the `mcp` extra). docs/authzen.md says how to use it.
"""

from __future__ import annotations

from ..errors import Malformed
from ..pdp.wire import (
    EVALUATION_PATH,
    EVALUATIONS_PATH,
    METADATA_PATH,
    AccessDecision,
    Action,
    Entity,
    Evaluation,
    Evaluations,
    Metadata,
    Semantic,
)
from .point import DecisionPoint, answer
from .reading import Call, Reading

__all__ = [
    "EVALUATIONS_PATH", "EVALUATION_PATH", "METADATA_PATH", "AccessDecision", "Action", "Call",
    "DecisionPoint", "Entity", "Evaluation", "Evaluations", "Malformed", "Metadata", "Reading",
    "Semantic", "answer",
]
