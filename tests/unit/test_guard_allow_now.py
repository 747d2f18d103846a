"""`Guard.allow_now`, the hosted fast path's decision (GuardedMCPServer's `tools/call` handler): an
allowed call whose record would go nowhere is answered True with no Decision built; anything else is
answered exactly as `check_now` answers it, and recorded. "Nowhere" is decided by the default logging
sinks alone (`decision_sinks.quiet_now`): the decision logger off for INFO and no recording span; a
recorder of any other kind is given every decision.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mcp_preconditions import Guard, parse_policy
from mcp_preconditions.decision_sinks import LoggingAndSpanRecorder, quiet_now
from mcp_preconditions.decisions import LoggingRecorder
from mcp_preconditions.outcomes import Decision

from .test_guard_hot_path import Ext, Kept, caller

LOGGER = "test.allow_now.decisions"


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger(LOGGER)
    log.setLevel(logging.WARNING)
    yield log
    log.setLevel(logging.NOTSET)


def guard_with(recorder: object) -> tuple[Guard, Ext]:
    ext = Ext()
    guard = Guard(parse_policy(b"", "p.toml"), {"t": ["ext:fly"], "open": []}, resolvers=[ext],
                  entry_points=False, recorder=recorder)  # type: ignore[arg-type]
    return guard, ext


def test_an_allowed_call_nobody_records_is_true_and_evaluated_like_check_now(
        logger: logging.Logger) -> None:
    guard, ext = guard_with(LoggingRecorder(logger))
    pilot = caller("pilot")
    assert guard.allow_now("t", pilot, {"vehicle": "falcon"}) is True
    assert guard.allow_now("t", pilot, {"vehicle": "falcon"}) is True and ext.calls == 1  # memo
    assert guard.allow_now("t", pilot, {"vehicle": "Falcon"}) is not True  # unlisted: denied
    assert guard.allow_now("t", caller("pilot"), {"vehicle": 2}) is not True
    assert ext.calls == 3  # each decided afresh, as check_now decides them


def test_a_denial_is_the_decision_check_now_makes_and_it_is_recorded(
        logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = guard_with(LoggingRecorder(logger))
    crew = caller("crew")
    denied = guard.allow_now("t", crew, {"vehicle": "falcon"})
    checked = guard.check_now("t", crew, {"vehicle": "falcon"})
    assert isinstance(denied, Decision) and isinstance(checked, Decision) and not denied.allowed
    assert (denied.outcomes, denied.subject, denied.revision) == (
        checked.outcomes, checked.subject, checked.revision)
    assert denied.context_id is not None and denied.context_id != checked.context_id
    logger.setLevel(logging.INFO)  # the record now goes somewhere: every decision is built
    with caplog.at_level(logging.INFO, LOGGER):
        allowed = guard.allow_now("t", caller("pilot"), {"vehicle": "falcon"})
        again = guard.allow_now("t", crew, {"vehicle": "falcon"})
    assert isinstance(allowed, Decision) and allowed.allowed and allowed.subject == "pilot"
    assert isinstance(again, Decision) and not again.allowed
    assert ['"allowed": true' in r.getMessage() for r in caplog.records] == [True, False]


def test_any_other_recorder_is_given_every_decision() -> None:
    kept = Kept()
    guard, _ = guard_with(kept)
    first = guard.allow_now("t", caller("pilot"), {"vehicle": "falcon"})
    second = guard.allow_now("open", caller("pilot"), None)  # no requirements: check_now's path
    assert isinstance(first, Decision) and first.allowed and isinstance(second, Decision)
    assert kept.records == [first, second] and not quiet_now(kept)

    class Subclass(LoggingRecorder):  # a subclass may write elsewhere: never taken as quiet
        pass

    assert not quiet_now(Subclass(logging.getLogger(LOGGER)))


def test_a_recording_span_is_not_quiet(logger: logging.Logger) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    recorder = LoggingAndSpanRecorder(logger)
    guard, _ = guard_with(recorder)
    assert quiet_now(recorder)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("tools/call t") as span:
        decided = guard.allow_now("t", caller("pilot"), {"vehicle": "falcon"})
        assert not quiet_now(recorder) and quiet_now(recorder, spans=False)  # (the caller's word)
    assert isinstance(decided, Decision) and decided.allowed
    assert isinstance(span, ReadableSpan) and span.attributes is not None
    assert span.attributes["mcp.preconditions.allowed"] is True
    with trace.use_span(trace.INVALID_SPAN):  # the no-op span of a process without tracing
        assert guard.allow_now("t", caller("pilot"), {"vehicle": "falcon"}) is True
