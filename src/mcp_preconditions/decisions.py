"""Decision records: one per decision, with time, tool, subject, allowed, unmet, errors, policy
revision and duration (and what late stages noted: `credential`). Never a token, a secret or a
claim value. The operator's record names every
requirement; the caller's (`caller_record`, where the caller reads the log) only what a denial says.

The default sink is JSON through `logging` (logger `mcp_preconditions.decisions`, level INFO).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

from .outcomes import Decision, Status

DEFAULT_LOGGER = "mcp_preconditions.decisions"


# Labels that depend on the tool (a gateway's `server`): tool name -> labels, added to its records.
ToolLabels = Callable[[str], Mapping[str, str]]
# How a sink turns a decision into its record: `decision_record` or `caller_record`.
RecordFields = Callable[[Decision, Mapping[str, str] | None, ToolLabels | None], dict[str, Any]]


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
        "errors": {o.requirement: o.reason for o in decision.outcomes if o.status is Status.ERROR},
        "revision": decision.revision,
        "duration_us": round(decision.duration_ns / 1000, 1),
    }
    if decision.argument_dependent:
        record["argument_dependent"] = sorted(decision.argument_dependent)
    if decision.notes:  # what late stages noted: `credential` (kind, cached), never a secret
        record.update(decision.notes)
    _context_ids(record, decision)
    if labels:
        record.update(labels)
    if tool_labels is not None:
        record.update(tool_labels(decision.tool))
    return record


def caller_record(decision: Decision, labels: Mapping[str, str] | None = None,
                  tool_labels: ToolLabels | None = None) -> dict[str, Any]:
    """The record as its caller may read it (a stdio gateway's stderr, which a desktop client shows
    its user): what a denial says and no more. The unmet requirements it may name, the
    confidential ones counted in `withheld`; the requirements that ended as `error`, by name only
    (a reason may name a backend), confidential ones left out; the server's key. Not `labels` (a
    gateway's upstream command line, its replica id): those are the operator's."""
    confidential = decision.confidential
    record: dict[str, Any] = {
        "time": time.time(),
        "tool": decision.tool,
        "subject": decision.subject,
        "allowed": decision.allowed,
        "unmet": list(decision.disclosed_unmet),
        "withheld": decision.withheld,
        "errors": [r for r in decision.errors if r not in confidential],
        "revision": decision.revision,
        "duration_us": round(decision.duration_ns / 1000, 1),
    }
    _context_ids(record, decision)
    if tool_labels is not None:
        record.update(tool_labels(decision.tool))
    return record


def _context_ids(record: dict[str, Any], decision: Decision) -> None:
    """A denial's SEP-2643 context ID, and the one a retry echoed (SPEC §15): the two records of a
    denied call and its retry are joined by them. The caller has both already (its denial, its
    request), so its own record shows them too."""
    if decision.context_id is not None:
        record["context_id"] = decision.context_id
    if decision.echoed is not None:
        record["echoed_context_id"] = decision.echoed


class DecisionRecorder(Protocol):
    def record(self, decision: Decision) -> None: ...


class LoggingRecorder:
    """JSON lines through `logging`; costs one level check when the logger is disabled."""

    def __init__(self, logger: str | logging.Logger = DEFAULT_LOGGER,
                 labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None,
                 fields: RecordFields = decision_record) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.labels = dict(labels or {})
        self.tool_labels = tool_labels
        self.fields = fields  # `caller_record` where the caller reads this log

    def record(self, decision: Decision) -> None:
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(json.dumps(self.fields(decision, self.labels, self.tool_labels),
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
    included): on stdio, stderr goes to whoever started the server. From then on they are shown
    there only, once each: they no longer propagate to the root logger, whose handler (the one
    the SDK's `MCPServer` installs, or a `logging.basicConfig`) would print each a second time.
    Called again, it changes nothing and returns the handler it added."""
    target = logging.getLogger(logger)
    for handler in target.handlers:
        if getattr(handler, _SHOWN, False):
            return handler
    added = logging.StreamHandler(stream if stream is not None else sys.stderr)
    added.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    setattr(added, _SHOWN, True)
    target.addHandler(added)
    target.propagate = False  # shown here, and nowhere else a second time
    if not target.isEnabledFor(logging.INFO):
        target.setLevel(logging.INFO)
    return added


_SHOWN = "mcp_preconditions_decisions_shown"  # marks the handler `log_decisions` added
