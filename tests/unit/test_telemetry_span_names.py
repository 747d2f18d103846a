"""Span names and tool attributes are bounded like metric labels: a `tools/call` span (server and
decide) carries its tool's name only when some server lists it, else `(unlisted)`, so what callers
send never adds a span name; with a local tracer, metrics on or off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_preconditions.outcomes import Decision, Outcome
from mcp_preconditions.telemetry import Metrics
from mcp_preconditions.telemetry.gateway import NO_SERVER, GatewayTelemetry
from mcp_preconditions.telemetry.tracing import call_attributes

TOOLS: dict[str, dict[str, tuple[str, ...]]] = {"alpha": {"alpha__echo": ("env:production",)},
                                                 "beta": {"beta__env": ()}}


@pytest.fixture(params=[True, False], ids=["metrics", "no-metrics"])
def traced(request: pytest.FixtureRequest) -> Iterator[tuple[GatewayTelemetry, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = GatewayTelemetry(Metrics() if request.param else None, provider.get_tracer("test"))
    telemetry.listed(TOOLS, (), "r1")
    yield telemetry, exporter
    provider.shutdown()


async def _ready(decision: Decision) -> Decision:
    return decision


async def call(telemetry: GatewayTelemetry, name: object, decision: Decision, listed: bool) -> None:
    """One `tools/call` as the gateway traces it: the server span, the decision, the count."""
    span = telemetry.message("tools/call", {"name": name, "arguments": {}}, None)
    assert span is not None
    with span:
        if listed:
            await telemetry.decision(decision.tool, _ready(decision))
        telemetry.decided("alpha" if listed else NO_SERVER, decision, listed=listed)


async def test_a_thousand_names_no_server_lists_make_one_span_name(
        traced: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = traced
    for n in range(1000):
        name = f"probe-{n}-\u202e"
        await call(telemetry, name, Decision(name, False), listed=False)
    await call(telemetry, ["not", "a", "name"], Decision("?", False), listed=False)
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} == {"tools/call (unlisted)"}
    assert {(s.attributes or {})["gen_ai.tool.name"] for s in spans} == {"(unlisted)"}
    assert not any("probe-" in repr(dict(s.attributes or {})) for s in spans)


async def test_a_listed_tool_keeps_its_name_on_both_spans(
        traced: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = traced
    allowed = Decision("alpha__echo", True, (Outcome.satisfied("env:production"),))
    await call(telemetry, "alpha__echo", allowed, listed=True)
    named = {s.name: s for s in exporter.get_finished_spans()}
    assert set(named) == {"tools/call alpha__echo", "decide alpha__echo"}
    assert (named["tools/call alpha__echo"].attributes or {})["gen_ai.tool.name"] == "alpha__echo"


async def test_a_tool_no_longer_listed_is_unlisted_in_spans_from_then_on(
        traced: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = traced
    telemetry.listed({"alpha": {}, "beta": {"beta__env": ()}}, (), "r2")
    await telemetry.decision("alpha__echo", _ready(Decision("alpha__echo", False)))
    assert [s.name for s in exporter.get_finished_spans()] == ["decide (unlisted)"]


def test_a_prompt_name_is_never_in_a_span(
        traced: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = traced
    span = telemetry.message("prompts/get", {"name": "anything-a-caller-sends"}, None)
    assert span is not None
    with span:
        pass
    (only,) = exporter.get_finished_spans()
    assert only.name == "prompts/get"
    assert "anything-a-caller-sends" not in repr(dict(only.attributes or {}))


def test_call_attributes_replace_an_unlisted_name_a_span_sink_wrote() -> None:
    attributes = call_attributes("alpha", Decision("caller text", False), "unlisted")
    assert attributes["gen_ai.tool.name"] == attributes["mcp.preconditions.tool"] == "(unlisted)"
    listed = call_attributes("alpha", Decision("alpha__echo", False), "denied")
    assert listed["gen_ai.tool.name"] == "alpha__echo" and "mcp.preconditions.tool" not in listed
