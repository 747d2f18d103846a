"""Decision-log sinks beyond `logging`: a JSONL file, and OpenTelemetry span attributes.

`build_recorder(source)` assembles what a policy's `[decision_log]` asks for. Every sink writes
only `decision_record()` fields (or fewer: `caller_record()` where the caller reads the log), so
no token, secret or claim value can reach a sink; span attributes also leave out the subject and
confidential requirements (`span_attributes`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .decisions import (
    DEFAULT_LOGGER,
    DecisionRecorder,
    FanOutRecorder,
    LoggingRecorder,
    RecordFields,
    ToolLabels,
    caller_record,
    decision_record,
)
from .errors import PolicyError
from .outcomes import Decision
from .policy.load import PolicySource

ATTRIBUTE_PREFIX = "mcp.preconditions."


class JsonlRecorder:
    """One JSON line per decision, appended to a file.

    Each line is one `write(2)` on an O_APPEND descriptor: lines from threads, and from replicas
    sharing the file, never interleave, and a line is in the OS as soon as `record` returns.
    """

    def __init__(self, path: str | Path, labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None) -> None:
        self.path = Path(path)
        self.labels = dict(labels or {})
        self.tool_labels = tool_labels
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def record(self, decision: Decision) -> None:
        line = json.dumps(decision_record(decision, self.labels, self.tool_labels), ensure_ascii=False,
                          separators=(",", ":"))
        data = (line + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                raise ValueError(f"decision log {self.path} is closed")
            written = os.write(self._fd, data)
            while written < len(data):  # only on a full disk or a signal; finish the line
                written += os.write(self._fd, data[written:])

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class OpenTelemetryRecorder:
    """Sets the decision's fields as attributes of the current span (`mcp.preconditions.*`).

    Adds nothing when no span is recording; needs `opentelemetry-api` (extra `otel`).
    """

    def __init__(self) -> None:
        from opentelemetry import trace

        self._trace = trace

    def record(self, decision: Decision) -> None:
        span = self._trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attributes(span_attributes(decision))


class LoggingAndSpanRecorder(LoggingRecorder):
    """`LoggingRecorder` and `OpenTelemetryRecorder` in one call (the default pair): the same
    records, without a fan-out and two more calls on every decision. A failure of either part is
    logged and never affects the decision or the other part."""

    def __init__(self, logger: str | logging.Logger = DEFAULT_LOGGER,
                 labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None,
                 fields: RecordFields = decision_record) -> None:
        super().__init__(logger, labels, tool_labels, fields)
        from .spans import CurrentSpan

        # `CurrentSpan.recording()`, read inline below: the method call alone cost an in-process
        # tools/call 0.5 µs (bench_mcp), on every decision of every server.
        spans = CurrentSpan()
        self._span_key, self._current_context = spans.key, spans.context
        self._never_recording = spans.never_recording

    def record(self, decision: Decision) -> None:
        try:
            if self.logger.isEnabledFor(logging.INFO):
                self.logger.info(json.dumps(self.fields(decision, self.labels, self.tool_labels),
                                            ensure_ascii=False))
        except Exception:
            logging.getLogger(DEFAULT_LOGGER).exception("decision log sink failed")
        try:
            span: Any = self._current_context().get(self._span_key)
            if (span is not None and span.__class__ is not self._never_recording
                    and span.is_recording()):
                span.set_attributes(span_attributes(decision))
        except Exception:  # also a non-span filed under the key: logged, never the decision's
            logging.getLogger(DEFAULT_LOGGER).exception("decision span sink failed")


def span_attributes(decision: Decision) -> dict[str, Any]:
    """The decision as OpenTelemetry attribute values: what a denial may say (the caller's view of
    the record: disclosed unmet and errored requirements, the withheld count), and not even the
    subject (a trace leaves the operator's hands: collectors, vendors, shared dashboards)."""
    attributes = caller_record(decision)
    del attributes["time"], attributes["subject"]
    return {ATTRIBUTE_PREFIX + k: v for k, v in attributes.items()}


def opentelemetry_available() -> bool:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def build_recorder(source: PolicySource, labels: Mapping[str, str] | None = None,
                   tool_labels: ToolLabels | None = None, *,
                   logged: RecordFields = decision_record) -> DecisionRecorder:
    """The recorder a policy's `[decision_log]` asks for: JSON through logging always, plus a JSONL
    file (`jsonl_path`, relative to the policy file) and span attributes (`opentelemetry`, when
    `opentelemetry-api` is installed). `labels`, and `tool_labels(tool)`, go into every record.
    `logged` is what the logging sink writes (`caller_record` where the caller reads the log); the
    file always gets the operator's whole record. Raises PolicyError when the file cannot be
    opened."""
    settings = source.policy.decision_log
    spans = settings.opentelemetry and opentelemetry_available()
    sinks: list[DecisionRecorder] = [
        LoggingAndSpanRecorder(settings.logger, labels, tool_labels, logged) if spans
        else LoggingRecorder(settings.logger, labels, tool_labels, logged)]
    if settings.jsonl_path is not None:
        path = source.resolve_path(settings.jsonl_path)
        try:
            sinks.append(JsonlRecorder(path, labels, tool_labels))
        except OSError as exc:
            raise PolicyError(source.source, [f"decision_log.jsonl_path: cannot open '{path}' for "
                                              f"appending: {exc.strerror or exc}"]) from None
    return sinks[0] if len(sinks) == 1 else FanOutRecorder(*sinks)
