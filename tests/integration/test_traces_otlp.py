"""Traces of `serve --transport http` exported over OTLP/HTTP (opentelemetry-exporter-otlp-proto-http,
configured by the standard OTEL_* variables) to a test receiver decoding `ExportTraceServiceRequest`:
the client's trace id runs through the server's spans, from its `traceparent` header or from
`_meta.traceparent`; a denied call's spans say denied and never name its confidential requirement.

The export is the interop tier's, the suite's one real OTLP export end to end: a hosted server's
spans come from the process's global tracer provider, which the command sets up from OTEL_* and a
test process must not install, so `serve` runs as a process of its own. That nothing is set up
without the variables, and that an unusable one is refused, are checked in this process.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace

from mcp_preconditions.cli import main
from mcp_preconditions.telemetry import configure_tracing
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)
from tests.fixtures.mcp_servers import MISSION_POLICY, request_meta, serve_http
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan

HEADER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
META_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER_SPAN = "tools/call launch_rocket"
DECISION_SPAN = "decide launch_rocket"
SECRET = "weather.clear"  # the policy's confidential requirement is state:weather.clear


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{CLIENT_SPAN}-01"


def cloudy_policy(directory: Path) -> Path:
    """mission-control with the confidential `state:weather.clear` unsatisfied."""
    path = directory / "cloudy.toml"
    text = MISSION_POLICY.read_text(encoding="utf-8")
    path.write_text(text.replace('"weather.clear" = true', '"weather.clear" = false'), encoding="utf-8")
    return path


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "mission-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50"}


async def launch(url: str) -> None:
    """Two anonymous launches: one continuing HEADER_TRACE from the HTTP header, one continuing
    META_TRACE from `_meta.traceparent`."""
    header = httpx2.AsyncClient(headers={"traceparent": traceparent(HEADER_TRACE)}, timeout=10)
    async with Client(streamable_http_client(url, http_client=header)) as client:
        denied = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
        assert denied.is_error
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=10))) as client:
        denied = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"},
                                        meta=request_meta({"traceparent": traceparent(META_TRACE)}))
        assert denied.is_error


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


@pytest.mark.interop
def test_a_call_continues_the_clients_trace_and_says_denied_without_the_secret(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    """Interop: `serve` as a process set up from OTEL_*, exporting over OTLP/HTTP."""
    with serve_http(cloudy_policy(tmp_path), env=otel_env(otlp_receiver)) as server:
        anyio.run(launch, server.url)
        header_spans = otlp_receiver.wait_for(HEADER_TRACE, {SERVER_SPAN, DECISION_SPAN})
        meta_spans = otlp_receiver.wait_for(META_TRACE, {SERVER_SPAN, DECISION_SPAN})
    for spans in (header_spans, meta_spans):
        named = by_name(spans)
        call, decision = named[SERVER_SPAN], named[DECISION_SPAN]
        assert call.parent_span_id == CLIENT_SPAN  # the client's span is the server span's parent
        assert call.kind == 2  # SERVER
        assert decision.parent_span_id == call.span_id and decision.trace_id == call.trace_id
        assert call.service == "mission-test"
        assert {k: v for k, v in call.attributes.items() if k.startswith("mcp.preconditions.")} == {
            "mcp.preconditions.server": "mission-control", "mcp.preconditions.allowed": False,
            "mcp.preconditions.result": "denied", "mcp.preconditions.unmet_count": 4}
        assert call.attributes["mcp.method.name"] == "tools/call"
        assert call.attributes["gen_ai.tool.name"] == "launch_rocket"
        assert decision.attributes["mcp.preconditions.allowed"] is False
        assert decision.attributes["mcp.preconditions.unmet"] == [
            "auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch"]
        assert decision.attributes["mcp.preconditions.withheld"] == 1
    everything = repr([(s.name, s.attributes) for s in otlp_receiver.spans])
    assert SECRET not in everything
    assert "mcp.preconditions.subject" not in everything


def test_without_otel_variables_nothing_is_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch setting alone asks for no export (OpenTelemetry's own default exporter is otlp):
    no provider is installed, so no span is made or sent (what the command calls first)."""
    for variable in [v for v in os.environ if v.startswith("OTEL_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    assert configure_tracing() is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("OTEL_TRACES_EXPORTER", "zipkin",
     "OTEL_TRACES_EXPORTER: 'zipkin' is not supported here (otlp, console or none)"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
     "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported; traces are exported as OTLP over "
     "http/protobuf"),
])
@pytest.mark.usefixtures("restored_logging")
def test_an_unusable_otel_setting_is_one_line(variable: str, value: str, message: str,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv(variable, value)
    assert main(["serve", "--policy", str(MISSION_POLICY)]) == 2
    assert capsys.readouterr().err == f"mcp-preconditions: error: {message}\n"
