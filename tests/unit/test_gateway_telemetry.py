"""The gateway's telemetry hooks (telemetry/gateway.py) on plain values: each call counted once under
bounded labels, the server's life and the listings, and with a (local) tracer the server span of a
message continuing the caller's context, its decision and upstream child spans, and the context
passed upstream; without a tracer, the caller's context passed on untouched.
"""

from __future__ import annotations

from collections.abc import Iterator

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from mcp_preconditions.outcomes import Decision, Outcome, Status
from mcp_preconditions.telemetry import Metrics
from mcp_preconditions.telemetry.gateway import NO_SERVER, GatewayTelemetry, message_headers

A = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SECRET = "env:staging"
TOOLS: dict[str, dict[str, tuple[str, ...]]] = {
    "alpha": {"alpha__echo": ("env:production",), "alpha__slow": (SECRET, "quota:q")},
    "beta": {"beta__env": ()}}


def decision(tool: str, *outcomes: Outcome) -> Decision:
    allowed = all(o.ok for o in outcomes) and bool(outcomes)
    return Decision(tool, allowed, outcomes, subject="alice", revision="r1", duration_ns=3_000,
                    confidential=frozenset({SECRET}))


ALLOWED = decision("alpha__echo", Outcome.satisfied("env:production"))
USED_UP = Outcome("quota:q", Status.UNSATISFIED, "empty", transient=True, retry_after_seconds=5.0)
DENIED = decision("alpha__slow", Outcome.unsatisfied(SECRET, "no"), USED_UP)
UNLISTED = Decision("nope", False, (), subject=None, revision="r1", duration_ns=0)


def counted() -> tuple[Metrics, GatewayTelemetry]:
    metrics = Metrics()
    telemetry = GatewayTelemetry(metrics)
    telemetry.listed(TOOLS, {SECRET}, "r1")
    return metrics, telemetry


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


@pytest.fixture
def spans() -> Iterator[tuple[GatewayTelemetry, InMemorySpanExporter]]:
    """A telemetry object with a local tracer (the global provider stays untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = GatewayTelemetry(Metrics(), provider.get_tracer("test"))
    telemetry.listed(TOOLS, {SECRET}, "r1")  # span names are listed tools, else (unlisted)
    yield telemetry, exporter
    provider.shutdown()


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_each_call_is_counted_once_under_its_server_and_tool() -> None:
    metrics, telemetry = counted()
    telemetry.decided("alpha", ALLOWED)
    telemetry.decided("alpha", DENIED)
    telemetry.decided(NO_SERVER, UNLISTED, listed=False)
    telemetry.decided("beta", decision("beta__secret", Outcome.unsatisfied("auth:oauth2", "no")),
                      listed=False)  # a name beta lists twice, say: refused as unlisted
    total = "mcp_preconditions_decisions_total"
    assert value(metrics, total, server="alpha", tool="alpha__echo", result="allowed") == 1
    assert value(metrics, total, server="alpha", tool="alpha__slow", result="denied") == 1
    assert value(metrics, total, server=NO_SERVER, tool="(unlisted)", result="unlisted") == 1
    assert value(metrics, total, server="beta", tool="(unlisted)", result="unlisted") == 1
    assert value(metrics, "mcp_preconditions_unmet_total", requirement="(withheld)") == 1
    assert value(metrics, "mcp_preconditions_quota_exhausted_total", quota="q") == 1
    assert value(metrics, "mcp_preconditions_policy_info", revision="r1") == 1


def test_series_start_at_zero_for_every_server_and_no_server() -> None:
    metrics, _ = counted()
    total = "mcp_preconditions_decisions_total"
    assert value(metrics, total, server=NO_SERVER, tool="(unlisted)", result="unlisted") == 0
    assert value(metrics, total, server="beta", tool="beta__env", result="allowed") == 0
    assert value(metrics, "mcp_preconditions_quota_exhausted_total", quota="q") == 0


def test_a_servers_life_moves_up_and_restarts() -> None:
    metrics, telemetry = counted()
    telemetry.connected("alpha", False)
    assert value(metrics, "mcp_preconditions_upstream_up", server="alpha") == 0
    assert value(metrics, "mcp_preconditions_upstream_restarts_total", server="alpha") == 0
    telemetry.connected("alpha", True)
    telemetry.connected("alpha", False)
    telemetry.restarting("alpha")
    telemetry.connected("alpha", True)
    assert value(metrics, "mcp_preconditions_upstream_up", server="alpha") == 1
    assert value(metrics, "mcp_preconditions_upstream_restarts_total", server="alpha") == 1


def test_only_a_tools_call_is_timed_upstream() -> None:
    metrics, telemetry = counted()
    with telemetry.upstream("beta", "tools/call", {"name": "env"}):
        pass
    with telemetry.upstream("beta", "resources/read", {"uri": "test://note"}):
        pass
    assert value(metrics, "mcp_preconditions_upstream_seconds_count", server="beta") == 1


def test_nothing_on_without_metrics_or_a_tracer() -> None:
    telemetry = GatewayTelemetry()
    params = {"name": "env", "_meta": {"traceparent": A}}
    assert telemetry.message("tools/call", params, None) is None
    with telemetry.upstream("beta", "tools/call", params) as sent:
        assert sent is params  # no span, no header: passed on as it came, not even copied
    telemetry.decided("beta", ALLOWED)  # counts nothing, raises nothing
    telemetry.listed(TOOLS, (), "r1")


def test_without_a_tracer_the_callers_header_is_passed_on_in_meta() -> None:
    telemetry = GatewayTelemetry()
    with telemetry.upstream("beta", "tools/call", {"name": "env"}, {"traceparent": A}) as sent:
        assert sent == {"name": "env", "_meta": {"traceparent": A}}
    with telemetry.upstream("beta", "tools/call", {"name": "env"}, {"other": "x"}) as sent:
        assert sent == {"name": "env"}


async def test_a_call_is_a_server_span_with_its_decision_and_upstream_spans(
        spans: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = spans
    params = {"name": "alpha__echo", "arguments": {}}
    span = telemetry.message("tools/call", params, {"traceparent": A}, 7, "2025-11-25")
    assert span is not None
    with span:
        assert await telemetry.decision("alpha__echo", _ready(ALLOWED)) is ALLOWED
        telemetry.decided("alpha", ALLOWED)
        with telemetry.upstream("alpha", "tools/call", {"name": "echo"}) as sent:
            assert sent is not None
            passed = sent["_meta"]["traceparent"]
    named = by_name(exporter)
    call, decide, upstream = (named["tools/call alpha__echo"], named["decide alpha__echo"],
                              named["upstream tools/call echo"])
    assert call.parent is not None and call.parent.span_id == 0x00f067aa0ba902b7  # the header's
    assert call.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736
    assert decide.parent is not None and decide.parent.span_id == call.context.span_id
    assert upstream.parent is not None and upstream.parent.span_id == call.context.span_id
    assert passed == f"00-{upstream.context.trace_id:032x}-{upstream.context.span_id:016x}-01"
    assert dict(call.attributes or {}) == {
        "mcp.method.name": "tools/call", "mcp.protocol.version": "2025-11-25",
        "jsonrpc.request.id": "7", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "alpha__echo", "mcp.preconditions.server": "alpha",
        "mcp.preconditions.allowed": True, "mcp.preconditions.result": "allowed",
        "mcp.preconditions.unmet_count": 0}


def test_meta_comes_before_the_header_and_a_denial_names_no_secret(
        spans: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = spans
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    span = telemetry.message("tools/call", {"name": "alpha__slow", "_meta": {"traceparent": other}},
                             {"traceparent": A})
    assert span is not None
    with span:
        telemetry.decided("alpha", DENIED)
    call = by_name(exporter)["tools/call alpha__slow"]
    assert call.context.trace_id == 0x0af7651916cd43dd8448eb211c80319c
    assert (call.attributes or {})["mcp.preconditions.result"] == "denied"
    assert (call.attributes or {})["mcp.preconditions.unmet_count"] == 2
    assert SECRET not in repr(dict(call.attributes or {}))


def test_a_message_ending_in_an_error_marks_its_span_without_the_text(
        spans: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = spans
    span = telemetry.message("tools/call", {"name": "x"}, None)
    assert span is not None
    with pytest.raises(MCPError), span:
        raise MCPError(types.INVALID_PARAMS, "caller's text: sk-secret")
    call = by_name(exporter)["tools/call (unlisted)"]  # no server lists `x`
    assert call.status.status_code is StatusCode.ERROR
    assert (call.attributes or {})["error.type"] == str(types.INVALID_PARAMS)
    assert "sk-secret" not in repr(call.status) + repr(dict(call.attributes or {}))


def test_a_failed_upstream_call_marks_its_span_without_the_text(
        spans: tuple[GatewayTelemetry, InMemorySpanExporter]) -> None:
    telemetry, exporter = spans
    with pytest.raises(RuntimeError), telemetry.upstream("alpha", "tools/call", {"name": "echo"}):
        raise RuntimeError("cannot start /opt/secret/bin/server --token sk-1")
    upstream = by_name(exporter)["upstream tools/call echo"]
    assert upstream.status.status_code is StatusCode.ERROR
    assert (upstream.attributes or {})["error.type"] == "RuntimeError"
    assert "sk-1" not in repr(upstream.status) + repr(dict(upstream.attributes or {})) + repr(
        [e.attributes for e in upstream.events])
    assert telemetry.metrics is not None  # a failed call's trip is timed too
    assert telemetry.metrics.registry.get_sample_value(
        "mcp_preconditions_upstream_seconds_count", {"server": "alpha"}) == 1


def test_an_http_upstream_gets_the_messages_own_context_as_a_header() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"traceparent":"' \
        + A.encode() + b'","tracestate":"k=v"}}}'
    assert message_headers(body) == {"traceparent": A, "tracestate": "k=v"}
    assert message_headers(b'{"method":"tools/call","params":{"name":"x"}}') == {}
    assert message_headers(b'{"params":{"_meta":{"traceparent":"bad"}}}') == {}
    assert message_headers(b'"traceparent" not json') == {}


async def _ready(value: Decision) -> Decision:
    return value

