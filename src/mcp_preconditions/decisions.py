"""Decision records: one per decision, with time, tool, subject, allowed, unmet, errors, policy
revision and duration (and what late stages noted: `credential`). Never a token, a secret or a
claim value. The operator's record names every
requirement; the caller's (`caller_record`, where the caller reads the log) only what a denial says.

The default sink is JSON through `logging` (logger `mcp_preconditions.decisions`, level INFO), with
the decision's attributes on the current span (`LoggingAndSpanRecorder`, the pair every server and
the gateway record with: on every call's path, so here with the record); a gateway's lines are
held until the event loop's step ends (`write_held`). The other sinks are decision_sinks.py's.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

from .outcomes import Decision, Status

DEFAULT_LOGGER = "mcp_preconditions.decisions"
ATTRIBUTE_PREFIX = "mcp.preconditions."
# `json.dumps(record, ensure_ascii=False)`, the encoder made once: `dumps` with any argument not its
# default builds a new encoder per call (a few µs of every gateway call).
_encode = json.JSONEncoder(ensure_ascii=False).encode


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


# Lines held until the loop's step ends (a gateway's sinks): (write, decision, when it was made).
_held: list[tuple[Callable[[Decision, float], None], Decision, float]] = []
_held_lock = threading.Lock()
_exit_hook: list[bool] = []


def _hold(write: Callable[[Decision, float], None], decision: Decision) -> None:
    """`write(decision, now)` once the running event loop's step is over, or before the next byte
    goes to a client (`write_held`); at once without a running loop. A gateway call's record then
    costs the call nothing: the loop writes it while the server works on the call (an allowed
    call's step ends with its request sent upstream), and no client hears an answer before its
    record is written (the listeners call `write_held` first), as when it was written inline."""
    now = time.time()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        write(decision, now)
        return
    with _held_lock:
        first = not _held
        _held.append((write, decision, now))
    if first:
        loop.call_soon(write_held)
        if not _exit_hook:  # a line held as the loop stops is written as the process exits
            _exit_hook.append(True)
            atexit.register(write_held)


def write_held() -> None:
    """Write every held record line, in the order they were made (each sink catches its own
    failures)."""
    while _held:
        with _held_lock:
            lines = _held.copy()
            _held.clear()
        for write, decision, now in lines:
            write(decision, now)

class LoggingAndSpanRecorder(LoggingRecorder):
    """`LoggingRecorder` and `OpenTelemetryRecorder` in one call (the default pair): the same
    records, without a fan-out and two more calls on every decision. A failure of either part is
    logged and never affects the decision or the other part. `held` (a gateway's): the log line
    is written when the loop's step ends (`_hold`); the span's attributes are set at once, on the
    span current then. `spans=False`: the log line only."""

    def __init__(self, logger: str | logging.Logger = DEFAULT_LOGGER,
                 labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None,
                 fields: RecordFields = decision_record, *, spans: bool = True,
                 held: bool = False) -> None:
        super().__init__(logger, labels, tool_labels, fields)
        self.held = held
        self._span_key: object = None
        if spans:
            from .spans import CurrentSpan

            # `CurrentSpan.recording()`, read inline below: the method call alone cost an
            # in-process tools/call 0.5 µs (bench_mcp), on every decision of every server.
            current = CurrentSpan()
            self._span_key, self._current_context = current.key, current.context
            self._never_recording = current.never_recording

    def record(self, decision: Decision) -> None:
        if self.logger.isEnabledFor(logging.INFO):
            if self.held:
                _hold(self._log, decision)
            else:
                self._log(decision, None)
        if self._span_key is None:
            return
        try:
            span: Any = self._current_context().get(self._span_key)
            if (span is not None and span.__class__ is not self._never_recording
                    and span.is_recording()):
                span.set_attributes(span_attributes(decision))
        except Exception:  # also a non-span filed under the key: logged, never the decision's
            logging.getLogger(DEFAULT_LOGGER).exception("decision span sink failed")

    def _log(self, decision: Decision, now: float | None) -> None:
        try:
            record = self.fields(decision, self.labels, self.tool_labels)
            if now is not None:
                record["time"] = now  # when the decision was made, not when its line was written
            self.logger.info(_encode(record))
        except Exception:
            logging.getLogger(DEFAULT_LOGGER).exception("decision log sink failed")


def span_attributes(decision: Decision) -> dict[str, Any]:
    """The decision as OpenTelemetry attribute values: what a denial may say (the caller's view of
    the record: disclosed unmet and errored requirements, the withheld count), and not even the
    subject (a trace leaves the operator's hands: collectors, vendors, shared dashboards)."""
    attributes = caller_record(decision)
    del attributes["time"], attributes["subject"]
    return {ATTRIBUTE_PREFIX + k: v for k, v in attributes.items()}


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
