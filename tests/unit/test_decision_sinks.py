"""Decision-log sinks: JSONL file, OpenTelemetry span attributes, the `[decision_log]` factory, and
the rule that no token, secret or claim value ever reaches any sink."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_preconditions import (
    Credentials,
    Decision,
    Guard,
    Identity,
    Outcome,
    PolicyError,
    load_policy,
    parse_policy,
)
from mcp_preconditions.decision_sinks import (
    JsonlRecorder,
    LoggingAndSpanRecorder,
    OpenTelemetryRecorder,
    build_recorder,
    span_attributes,
)
from mcp_preconditions.decisions import FanOutRecorder, LoggingRecorder, caller_record

DENIED = Decision("launch_rocket", False, (
    Outcome.satisfied("auth:oauth2", "ok"),
    Outcome.unsatisfied("env:production", "no such label"),
    Outcome.error("state:weather.clear", "redis down"),
), subject="alice", revision="abc123def456", duration_ns=12_345)


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # local, not the global provider: tests stay independent
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_jsonl_appends_one_line_per_decision(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    path.write_text('{"earlier": true}\n')
    recorder = JsonlRecorder(path)
    recorder.record(DENIED)
    recorder.record(Decision("ping", True, revision="abc123def456"))
    recorder.close()
    lines = path.read_text().splitlines()
    assert lines[0] == '{"earlier": true}'
    first = json.loads(lines[1])
    assert {k: v for k, v in first.items() if k != "time"} == {
        "tool": "launch_rocket", "subject": "alice", "allowed": False,
        "unmet": ["env:production", "state:weather.clear"],
        "errors": {"state:weather.clear": "redis down"}, "revision": "abc123def456",
        "duration_us": 12.3}
    assert json.loads(lines[2])["tool"] == "ping" and len(lines) == 3


def test_jsonl_lines_from_many_threads_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    recorder = JsonlRecorder(path)

    def write(n: int) -> None:
        for i in range(300):
            recorder.record(Decision(f"tool-{n}-{i}", True, revision="r" * 12))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tools = [json.loads(line)["tool"] for line in path.read_text().splitlines()]
    assert sorted(tools) == sorted(f"tool-{n}-{i}" for n in range(8) for i in range(300))


def test_a_closed_jsonl_sink_refuses_and_fanout_contains_it(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    recorder = JsonlRecorder(tmp_path / "d.jsonl")
    recorder.close()
    with pytest.raises(ValueError, match="is closed"):
        recorder.record(DENIED)
    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"):
        FanOutRecorder(recorder, LoggingRecorder()).record(DENIED)  # the broken sink is skipped
    assert [r.levelname for r in caplog.records] == ["ERROR", "INFO"]


def test_span_attributes_are_set_on_the_current_span(
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with provider.get_tracer("test").start_as_current_span("tools/call"):
        OpenTelemetryRecorder().record(DENIED)
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes or {}) == {
        "mcp.preconditions.tool": "launch_rocket",
        "mcp.preconditions.allowed": False,
        "mcp.preconditions.unmet": ("env:production", "state:weather.clear"),
        "mcp.preconditions.withheld": 0,
        "mcp.preconditions.errors": ("state:weather.clear",),
        "mcp.preconditions.revision": "abc123def456",
        "mcp.preconditions.duration_us": 12.3,
    }


def test_span_attributes_never_name_a_subject_or_a_confidential_requirement() -> None:
    secret = dataclasses.replace(DENIED, confidential=frozenset({"state:weather.clear"}))
    attributes = span_attributes(secret)
    assert attributes["mcp.preconditions.unmet"] == ["env:production"]
    assert attributes["mcp.preconditions.withheld"] == 1
    assert attributes["mcp.preconditions.errors"] == []
    assert "weather" not in repr(attributes) and "alice" not in repr(attributes)


def test_no_span_no_attributes(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    OpenTelemetryRecorder().record(DENIED)  # no current span: nothing to do, no error
    assert spans[1].get_finished_spans() == ()


def test_build_recorder_follows_the_decision_log_settings(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text('[decision_log]\njsonl_path = "logs/decisions.jsonl"\n')
    recorder = build_recorder(load_policy(policy))
    assert isinstance(recorder, FanOutRecorder)
    assert [type(s).__name__ for s in recorder.sinks] == ["LoggingAndSpanRecorder", "JsonlRecorder"]
    recorder.record(DENIED)
    assert json.loads((tmp_path / "logs" / "decisions.jsonl").read_text())["tool"] == "launch_rocket"
    plain = build_recorder(parse_policy(b"[decision_log]\nopentelemetry = false\n", "p.toml"))
    assert type(plain) is LoggingRecorder
    assert type(build_recorder(parse_policy(b"", "p.toml"))) is LoggingAndSpanRecorder


def test_the_default_recorder_logs_and_sets_span_attributes(
        caplog: pytest.LogCaptureFixture, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"), \
            provider.get_tracer("test").start_as_current_span("tools/call"):
        LoggingAndSpanRecorder().record(DENIED)
    (span,) = exporter.get_finished_spans()
    assert {k: list(v) if isinstance(v, tuple) else v  # OpenTelemetry keeps lists as tuples
            for k, v in (span.attributes or {}).items()} == span_attributes(DENIED)
    (line,) = [json.loads(r.getMessage()) for r in caplog.records]
    assert {k: v for k, v in line.items() if k != "time"} == {
        "tool": "launch_rocket", "subject": "alice", "allowed": False,
        "unmet": ["env:production", "state:weather.clear"],
        "errors": {"state:weather.clear": "redis down"}, "revision": "abc123def456",
        "duration_us": 12.3}


def test_a_failing_part_of_the_default_recorder_spares_the_other(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = LoggingAndSpanRecorder()

    def broken_context() -> None:
        raise RuntimeError("tracing backend exploded")

    monkeypatch.setattr(recorder, "_current_context", broken_context)
    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"):
        recorder.record(DENIED)  # no exception: a sink failure never reaches the decision
    assert [(r.levelname, r.getMessage()[:9]) for r in caplog.records] == [
        ("INFO", '{"time": '), ("ERROR", "decision ")]
    assert caplog.records[1].getMessage() == "decision span sink failed"


def test_build_recorder_names_an_unopenable_jsonl_path(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[decision_log]\njsonl_path = "missing/decisions.jsonl"\n')
    with pytest.raises(PolicyError) as caught:
        build_recorder(load_policy(policy))
    assert caught.value.problems == [
        f"decision_log.jsonl_path: cannot open '{tmp_path / 'missing' / 'decisions.jsonl'}' for "
        "appending: No such file or directory"]


def _rsa_policy(tmp_path: Path) -> tuple[Path, rsa.RSAPrivateKey]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "key.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    policy = tmp_path / "policy.toml"
    policy.write_text("""
[auth]
issuer = "https://issuer.test"
audience = "urn:mcp:test"
public_keys_pem = ["key.pem"]
algorithms = ["RS256"]
[decision_log]
jsonl_path = "decisions.jsonl"
[tools.launch]
requirements = ["auth:oauth2", "auth:claim:role:mission_control"]
""")
    return policy, key


async def test_no_sink_ever_sees_a_token_or_a_claim_value(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    policy, key = _rsa_policy(tmp_path)
    now = int(time.time())
    claims = {"iss": "https://issuer.test", "aud": "urn:mcp:test", "sub": "alice",
              "iat": now, "exp": now + 300, "api_password": "hunter2-claim-secret"}
    good = jwt.encode(claims, key, algorithm="RS256")
    expired = jwt.encode({**claims, "exp": now - 3600, "iat": now - 7200}, key, algorithm="RS256")
    garbage = "not-a-jwt-but-a-secret-opaque-value"
    source = load_policy(policy)
    guard = Guard(source, recorder=build_recorder(source), entry_points=False)
    provider, exporter = spans
    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"):
        decisions = []
        for token in (good, expired, garbage):
            with provider.get_tracer("test").start_as_current_span("tools/call"):
                decisions.append(await guard.check("launch", Credentials(token=token)))
    assert decisions[0].subject == "alice"  # the good token was verified, and still denied (role)
    assert [d.allowed for d in decisions] == [False, False, False]
    written = [
        (tmp_path / "decisions.jsonl").read_text(),
        "\n".join(r.getMessage() for r in caplog.records),
        "\n".join(repr(dict(s.attributes or {})) for s in exporter.get_finished_spans()
                  if isinstance(s, ReadableSpan)),
    ]
    assert all(text.count("launch") >= 3 for text in written), written
    for text in written:
        for secret in (good, expired, garbage, good.split(".")[1], good.split(".")[2],
                       "hunter2-claim-secret"):
            assert secret not in text


def test_the_default_recorder_skips_spans_that_never_record(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry import trace

    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"):
        with trace.use_span(trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)):
            LoggingAndSpanRecorder().record(DENIED)  # the span a server without tracing has
        LoggingAndSpanRecorder().record(DENIED)  # and no span at all
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO"]


def test_the_default_recorder_falls_back_to_get_current_span(
        monkeypatch: pytest.MonkeyPatch, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    from opentelemetry import context, trace

    real = trace.set_span_in_context
    # An API that files a span under two keys: the recorder cannot tell which one to read.
    monkeypatch.setattr(trace, "set_span_in_context", lambda span, ctx=None: context.Context(
        {**real(span, ctx), "another-key": span}))
    recorder = LoggingAndSpanRecorder()
    monkeypatch.undo()
    provider, exporter = spans
    with provider.get_tracer("test").start_as_current_span("tools/call"):
        recorder.record(DENIED)
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {})["mcp.preconditions.tool"] == "launch_rocket"


def test_labels_go_into_every_record(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[decision_log]\njsonl_path = "d.jsonl"\nopentelemetry = false\n'
                      '[tools.t]\nrequirements = ["env:x"]\n', encoding="utf-8")
    source = load_policy(policy)
    guard = Guard(source, entry_points=False, labels={"replica": "r1", "upstream": "everything"})
    guard.decide("t", Identity())
    record = json.loads((tmp_path / "d.jsonl").read_text(encoding="utf-8"))
    assert (record["replica"], record["upstream"], record["allowed"]) == ("r1", "everything", False)


@pytest.mark.parametrize("spans_on", [False, True])
def test_the_callers_view_says_what_the_denial_says_and_the_file_keeps_the_whole_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, spans_on: bool) -> None:
    """A stdio gateway's stderr is its caller's: `logged=caller_record` puts there the disclosed
    unmet requirements, the confidential ones as a count, errored requirements by name (no
    reason) and the tool's server, no operator label; the JSONL file gets everything."""
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[decision_log]\njsonl_path = "d.jsonl"\nopentelemetry = {str(spans_on).lower()}\n',
                      encoding="utf-8")
    recorder = build_recorder(load_policy(policy), {"replica": "r1", "upstream": "npx secret-cmd"},
                              lambda tool: {"server": "fs"}, logged=caller_record)
    secret = dataclasses.replace(DENIED, confidential=frozenset({"env:production"}))
    with caplog.at_level(logging.INFO, logger="mcp_preconditions.decisions"):
        recorder.record(secret)
    [shown] = [json.loads(r.getMessage()) for r in caplog.records]
    [whole] = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert {k: v for k, v in shown.items() if k != "time"} == {
        "tool": "launch_rocket", "subject": "alice", "allowed": False, "unmet": [
            "state:weather.clear"], "withheld": 1, "errors": ["state:weather.clear"],
        "revision": "abc123def456", "duration_us": 12.3, "server": "fs"}
    assert "production" not in json.dumps(shown) and "redis" not in json.dumps(shown)
    assert whole["unmet"] == ["env:production", "state:weather.clear"]
    assert whole["errors"] == {"state:weather.clear": "redis down"}
    assert (whole["replica"], whole["upstream"], whole["server"]) == ("r1", "npx secret-cmd", "fs")
