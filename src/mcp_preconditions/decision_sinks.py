"""Decision-log sinks beyond `logging`: a JSONL file, and OpenTelemetry span attributes.

`build_recorder(source)` assembles what a policy's `[decision_log]` asks for. Every sink writes
only `decision_record()` fields (or fewer: `caller_record()` where the caller reads the log), so
no token, secret or claim value can reach a sink; span attributes also leave out the subject and
confidential requirements (`span_attributes`). A gateway's sinks are `held`: each line is written
when the event loop's step ends or before the next byte goes to a client, whichever comes first.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
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
# `json.dumps(record, ensure_ascii=False)` and its compact form, the encoder made once: `dumps` with
# any argument not its default builds a new encoder per call (a few µs of every gateway call).
_encode = json.JSONEncoder(ensure_ascii=False).encode
_encode_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

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
