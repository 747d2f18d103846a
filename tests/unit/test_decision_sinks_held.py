"""A gateway's held decision records: each line is written when the event loop's step ends, or before
the next byte goes to a client (HTTP and stdio), whichever comes first; never lost, never reordered,
stamped with the time of the decision; at once without a running loop. The span attributes are set
at once, on the span current when the decision was made."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_preconditions import Decision, Outcome, decisions, parse_policy
from mcp_preconditions.decision_sinks import (
    JsonlRecorder,
    LoggingAndSpanRecorder,
    build_recorder,
    span_attributes,
    write_held,
)
from mcp_preconditions.decisions import FanOutRecorder
from mcp_preconditions.gateway.downstream.admission import Admission
from mcp_preconditions.gateway.downstream.http11 import Connection, Listener
from mcp_preconditions.gateway.downstream.stdio import Output

LOGGER = "mcp_preconditions.decisions"


def decision(tool: str) -> Decision:
    return Decision(tool, False, (Outcome.unsatisfied("env:production", "no such label"),),
                    subject="alice", revision="abc123def456", duration_ns=1_000)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [json.loads(r.getMessage())["tool"] for r in caplog.records if r.name == LOGGER]


class Transport(asyncio.Transport):
    """What the gateway's HTTP connection writes to, and what the log held when each write came."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        super().__init__()
        self.caplog = caplog
        self.writes: list[tuple[bytes, list[str]]] = []

    def write(self, data: Any) -> None:
        self.writes.append((bytes(data), lines(self.caplog)))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_held_line_is_written_when_the_loops_step_ends_in_order_and_dated_at_the_decision(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    wall = [1_000_000.0]  # a fake wall clock: the records' only reading of the time (decisions.py)
    monkeypatch.setattr(decisions, "time", SimpleNamespace(time=lambda: wall[0]))
    recorder = LoggingAndSpanRecorder(held=True)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        recorder.record(decision("first"))
        recorder.record(decision("second"))
        assert lines(caplog) == []  # the step that decided goes on (an allowed call: upstream)
        wall[0] += 50.0  # the clock moves on before the lines are written
        await asyncio.sleep(0)
        assert lines(caplog) == ["first", "second"]
    stamps = [json.loads(r.getMessage())["time"] for r in caplog.records]
    assert stamps == [1_000_000.0, 1_000_000.0]  # when decided, not when written 50 s on


def test_without_a_running_loop_the_line_is_written_at_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        LoggingAndSpanRecorder(held=True).record(decision("now"))
        assert lines(caplog) == ["now"]


async def test_no_byte_goes_to_an_http_client_before_the_records_made_so_far(
        caplog: pytest.LogCaptureFixture) -> None:
    recorder = LoggingAndSpanRecorder(held=True)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        recorder.record(decision("denied"))  # a denial: its answer is written in the same step
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"the denial"})

    with caplog.at_level(logging.INFO, logger=LOGGER):
        transport = Transport(caplog)
        connection = Connection(Listener(app, Admission(), asyncio.get_running_loop()))
        connection.connection_made(transport)
        connection.data_received(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(100):  # loop steps, not time: the app runs in a task of its own
            if transport.writes:
                break
            await asyncio.sleep(0)
        assert transport.writes == [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nthe denial", ["denied"])]


async def test_no_line_goes_to_a_stdio_client_before_the_records_made_so_far(
        caplog: pytest.LogCaptureFixture) -> None:
    recorder = LoggingAndSpanRecorder(held=True)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        transport = Transport(caplog)
        output = Output(transport, 1)
        recorder.record(decision("denied"))
        output.push({"jsonrpc": "2.0", "id": 1, "result": {}})
        ((data, seen),) = transport.writes
        assert data == b'{"jsonrpc":"2.0","id":1,"result":{}}\n' and seen == ["denied"]


async def test_held_jsonl_lines_keep_their_order_with_the_log_and_are_one_write_each(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "decisions.jsonl"
    recorder = FanOutRecorder(LoggingAndSpanRecorder(held=True), JsonlRecorder(path, held=True))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for tool in ("a", "b", "c"):
            recorder.record(decision(tool))
        assert path.read_text() == ""
        write_held()
        assert lines(caplog) == ["a", "b", "c"]
    assert [json.loads(line)["tool"] for line in path.read_text().splitlines()] == ["a", "b", "c"]


async def test_a_held_line_whose_file_was_closed_is_logged_and_spares_the_others(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    jsonl = JsonlRecorder(tmp_path / "d.jsonl", held=True)
    recorder = FanOutRecorder(jsonl, LoggingAndSpanRecorder(held=True))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        recorder.record(decision("late"))
        jsonl.close()
        write_held()
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records] == [
        ("ERROR", f"decision log {tmp_path / 'd.jsonl'}"), ("INFO", '{"time"')]


async def test_span_attributes_are_set_at_once_on_the_span_of_the_decision(
        caplog: pytest.LogCaptureFixture) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with provider.get_tracer("test").start_as_current_span("tools/call"):
            LoggingAndSpanRecorder(held=True).record(decision("traced"))
        (span,) = exporter.get_finished_spans()  # ended before the line was written
        await asyncio.sleep(0)
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()} \
        == span_attributes(decision("traced"))
    assert lines(caplog) == ["traced"]
    provider.shutdown()


def test_build_recorder_holds_only_when_asked(tmp_path: Path) -> None:
    policy = parse_policy(b"[decision_log]\nopentelemetry = false\n", "p.toml")
    held = build_recorder(policy, held=True)
    assert isinstance(held, LoggingAndSpanRecorder) and held.held
    assert not getattr(build_recorder(policy), "held", False)
    assert not getattr(build_recorder(parse_policy(b"", "p.toml")), "held", True)
