"""Decision-log sinks beyond `logging`: a JSONL file, and OpenTelemetry span attributes alone.

`build_recorder(source)` assembles what a policy's `[decision_log]` asks for. Every sink writes
only `decision_record()` fields (or fewer: `caller_record()` where the caller reads the log), so
no token, secret or claim value can reach a sink; span attributes also leave out the subject and
confidential requirements (`span_attributes`). A gateway's sinks are `held`: each line is written
when the event loop's step ends or before the next byte goes to a client, whichever comes first
(`write_held`). The default pair, JSON through `logging` with span attributes
(`LoggingAndSpanRecorder`), the held lines and `span_attributes` live in decisions.py, on every
call's path (and importable from here too).
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
    ATTRIBUTE_PREFIX,
    DEFAULT_LOGGER,
    DecisionRecorder,
    FanOutRecorder,
    LoggingAndSpanRecorder,
    LoggingRecorder,
    RecordFields,
    ToolLabels,
    _hold,
    decision_record,
    span_attributes,
    write_held,
)
from .errors import PolicyError
from .outcomes import Decision
from .policy.load import PolicySource

__all__ = ["ATTRIBUTE_PREFIX", "JsonlRecorder", "LoggingAndSpanRecorder", "OpenTelemetryRecorder",
           "build_recorder", "opentelemetry_available", "quiet_now", "span_attributes",
           "write_held"]

# `json.dumps(record, ensure_ascii=False, separators=(",", ":"))`, the encoder made once: `dumps`
# with any argument not its default builds a new encoder per call (decisions.py's `_encode`).
_encode_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class JsonlRecorder:
    """One JSON line per decision, appended to a file.

    Each line is one `write(2)` on an O_APPEND descriptor: lines from threads, and from replicas
    sharing the file, never interleave, and a line is in the OS as soon as `record` returns.
    """

    def __init__(self, path: str | Path, labels: Mapping[str, str] | None = None,
                 tool_labels: ToolLabels | None = None, *, held: bool = False) -> None:
        self.path = Path(path)
        self.labels = dict(labels or {})
        self.tool_labels = tool_labels
        self.held = held  # a gateway's: each line written when the loop's step ends (`_hold`)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def record(self, decision: Decision) -> None:
        if self.held:
            _hold(self._write_logged, decision)
        else:
            self._write(decision, None)

    def _write_logged(self, decision: Decision, now: float) -> None:
        try:
            self._write(decision, now)
        except Exception:  # held: nobody is left to raise to
            logging.getLogger(DEFAULT_LOGGER).exception("decision log %s: write failed", self.path)

    def _write(self, decision: Decision, now: float | None) -> None:
        record = decision_record(decision, self.labels, self.tool_labels)
        if now is not None:
            record["time"] = now  # when the decision was made, not when its line was written
        line = _encode_compact(record)
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



def opentelemetry_available() -> bool:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def quiet_now(recorder: DecisionRecorder, spans: bool = True) -> bool:
    """Whether a record made now would be written nowhere: only this module's logging sinks can
    tell (their exact classes: a subclass may write elsewhere; any other recorder is never quiet):
    their logger is off for INFO, and no span records (a span that cannot be read is not quiet:
    `record` logs that; `spans=False`: the caller knows none records). One call on a hosted
    server's every allowed call (`Guard.allow_now`)."""
    kind = recorder.__class__
    if kind is not LoggingAndSpanRecorder and kind is not LoggingRecorder:
        return False
    sink: Any = recorder  # (one of the two: typed for their fields)
    if sink.logger.isEnabledFor(logging.INFO):
        return False
    if not spans or kind is LoggingRecorder or sink._span_key is None:
        return True
    try:
        span: Any = sink._current_context().get(sink._span_key)
        return span is None or span.__class__ is sink._never_recording or not span.is_recording()
    except Exception:
        return False


def build_recorder(source: PolicySource, labels: Mapping[str, str] | None = None,
                   tool_labels: ToolLabels | None = None, *,
                   logged: RecordFields = decision_record, held: bool = False) -> DecisionRecorder:
    """The recorder a policy's `[decision_log]` asks for: JSON through logging always, plus a JSONL
    file (`jsonl_path`, relative to the policy file) and span attributes (`opentelemetry`, when
    `opentelemetry-api` is installed). `labels`, and `tool_labels(tool)`, go into every record.
    `logged` is what the logging sink writes (`caller_record` where the caller reads the log); the
    file always gets the operator's whole record. Raises PolicyError when the file cannot be
    opened. `held` (a gateway's sinks): lines are written when the loop's step ends (`_hold`)."""
    settings = source.policy.decision_log
    spans = settings.opentelemetry and opentelemetry_available()
    sinks: list[DecisionRecorder] = [
        LoggingAndSpanRecorder(settings.logger, labels, tool_labels, logged, spans=spans, held=held)
        if spans or held else LoggingRecorder(settings.logger, labels, tool_labels, logged)]
    if settings.jsonl_path is not None:
        path = source.resolve_path(settings.jsonl_path)
        try:
            sinks.append(JsonlRecorder(path, labels, tool_labels, held=held))
        except OSError as exc:
            raise PolicyError(source.source, [f"decision_log.jsonl_path: cannot open '{path}' for "
                                              f"appending: {exc.strerror or exc}"]) from None
    return sinks[0] if len(sinks) == 1 else FanOutRecorder(*sinks)
