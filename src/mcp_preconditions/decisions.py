"""Decision records: one per decision, with time, tool, subject, allowed, unmet, errors, policy
revision and duration. Never a token, a secret or a claim value.

The default sink is JSON through `logging` (logger `mcp_preconditions.decisions`, level INFO).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

from .outcomes import Decision

DEFAULT_LOGGER = "mcp_preconditions.decisions"


# Labels that depend on the tool (a gateway's `server`): tool name -> labels, added to its records.
ToolLabels = Callable[[str], Mapping[str, str]]


def decision_record(decision: Decision, labels: Mapping[str, str] | None = None,
                    tool_labels: ToolLabels | None = None) -> dict[str, Any]:
    """The decision as a JSON-ready record. Reasons are included only for failed requirements.
    `labels` (who recorded it: `replica`, `upstream`) are added as top-level keys, and so are
    `tool_labels(tool)` (which server a gateway's tool belongs to)."""
    record: dict[str, Any] = {
        "time": time.time(),
        "tool": decision.tool,
        "subject": decision.subject,
        "allowed": decision.allowed,
        "unmet": list(decision.unmet),
        "errors": {o.requirement: o.reason for o in decision.outcomes if o.status.value == "error"},
        "revision": decision.revision,
        "duration_us": round(decision.duration_ns / 1000, 1),
    }
    if decision.argument_dependent:
        record["argument_dependent"] = sorted(decision.argument_dependent)
    if labels:
        record.update(labels)
    if tool_labels is not None:
        record.update(tool_labels(decision.tool))
    return record


class DecisionRecorder(Protocol):
    def record(self, decision: Decision) -> None: ...


class LoggingRecorder:
    """JSON lines through `logging`; costs one level check when the logger is disabled."""

    def __init__(self, logger: str | logging.Logger = DEFAULT_LOGGER,
                 labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.labels = dict(labels or {})
        self.tool_labels = tool_labels

    def record(self, decision: Decision) -> None:
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(json.dumps(decision_record(decision, self.labels, self.tool_labels),
                                        ensure_ascii=False))


class FanOutRecorder:
    """Sends each record to several sinks; a failing sink never affects the decision."""

    def __init__(self, *sinks: DecisionRecorder) -> None:
        self.sinks = sinks

    def record(self, decision: Decision) -> None:
        for sink in self.sinks:
            try:
                sink.record(decision)
            except Exception:  # a broken log sink must not turn into an allow or a crash
                logging.getLogger(DEFAULT_LOGGER).exception("decision sink %r failed", sink)


def log_decisions(stream: TextIO | None = None, logger: str = DEFAULT_LOGGER) -> logging.Handler:
    """Show decision records: one JSON line each on `stream` (default stderr), for a server whose
    author configured no logging (a FastMCP app, a script), where they would be dropped (they are
    INFO records, below the `WARNING` Python keeps by default). The one line to add: `log_decisions()`.
    The records are the operator's view (they name every unmet requirement, confidential ones
    included): on stdio, stderr goes to whoever started the server. Called again, it changes
    nothing and returns the handler it added."""
    target = logging.getLogger(logger)
    for handler in target.handlers:
        if getattr(handler, _SHOWN, False):
            return handler
    added = logging.StreamHandler(stream if stream is not None else sys.stderr)
    added.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    setattr(added, _SHOWN, True)
    target.addHandler(added)
    if not target.isEnabledFor(logging.INFO):
        target.setLevel(logging.INFO)
    return added


_SHOWN = "mcp_preconditions_decisions_shown"  # marks the handler `log_decisions` added
