"""Traces through `mcp-preconditions gateway` in front of two servers that log what they receive:
`alpha` over stdio and `beta` over streamable HTTP. One trace id runs from the client's `traceparent`
(its HTTP header, or `_meta.traceparent`) through the gateway's server, decision and upstream spans
to the `traceparent` each server receives (`_meta` for both; a header too for the HTTP one). A
denied call's span says denied and names no confidential requirement; a name no server lists is
`(unlisted)` in every span. Without a tracer the client's context is passed on as it came, and no
span is made.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, `alpha` in memory, `beta` an SDK server on a socket of this loop. The gateway's telemetry gets
a tracer of the test's own provider, exporting to memory (a global tracer provider is set once per
process, so a test process never installs one): the command's `GatewayTelemetry` is made with it.
That the command reads the OTEL_* variables is checked here by one it refuses; an export over
OTLP/HTTP from a process configured by them is the interop tier's (tests/integration/
test_traces_otlp.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_preconditions.cli import main
from mcp_preconditions.telemetry import gateway as telemetry_gateway
from tests.fixtures.gateway_upstream import UPSTREAM_STDIO, read_log
from tests.fixtures.inprocess import InProcess, until
from tests.fixtures.main_levels import restored_logging  # noqa: F401 (a fixture)
from tests.fixtures.mcp_servers import request_meta
from tests.fixtures.otlp import ReceivedSpan
from tests.fixtures.two_servers import two_servers

ASYNC = pytest.mark.asyncio(loop_scope="module")

CLIENT_SPAN = "00f067aa0ba902b7"
TRACES = {"alpha": "4bf92f3577b34da6a3ce929d0e0e4736",   # alpha__echo, traceparent header
          "beta": "0af7651916cd43dd8448eb211c80319c",    # beta__env, traceparent header
          "meta": "5b8efff798038103d269b633813fc60c",    # beta__env, _meta.traceparent
          "denied": "a3ce929d0e0e47364bf92f3577b34da6"}  # alpha__slow: env:staging, confidential
SERVER, CLIENT = 2, 3  # OTLP span kinds (the SDK's SpanKind value + 1)
UNLISTED_TRACE = "c0ffee00c0ffee00c0ffee00c0ffee00"


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{CLIENT_SPAN}-01"


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


@dataclass
class Spans:
    """What the gateway's tracer exported, as an OTLP receiver would have decoded it."""

    exporter: InMemorySpanExporter

    @property
    def spans(self) -> list[ReceivedSpan]:
        return [_received(s) for s in self.exporter.get_finished_spans()]

    def of(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    async def wait_for(self, trace_id: str, names: set[str]) -> list[ReceivedSpan]:
        """The spans of `trace_id` once one of each name in `names` has ended (a server span ends
        just after its answer is sent)."""
        await until(lambda: names <= {s.name for s in self.of(trace_id)},
                    f"{trace_id}: {names} not all ended: {[s.name for s in self.of(trace_id)]}")
        return self.of(trace_id)


def _received(span: ReadableSpan) -> ReceivedSpan:
    context = span.get_span_context()
    assert context is not None
    return ReceivedSpan(f"{context.trace_id:032x}", f"{context.span_id:016x}",
                        f"{span.parent.span_id:016x}" if span.parent is not None else "",
                        span.name, span.kind.value + 1, dict(span.attributes or {}),
                        str(span.resource.attributes.get("service.name", "")))


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    """The gateway command's telemetry made with a tracer of this test's provider (in memory)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("mcp_preconditions")
    made = telemetry_gateway.GatewayTelemetry

    def with_tracer(metrics: Any = None) -> telemetry_gateway.GatewayTelemetry:
        return made(metrics, tracer)

    monkeypatch.setattr(telemetry_gateway, "GatewayTelemetry", with_tracer)
    yield Spans(exporter)
    provider.shutdown()


async def calls(gw: InProcess) -> dict[str, bool]:
    """One call per trace: three from an HTTP client sending a `traceparent` header, one with
    `_meta.traceparent` (how 2026-07-28 clients send it). What each said: is_error."""
    out: dict[str, bool] = {}
    for key, tool in (("alpha", "alpha__echo"), ("beta", "beta__env"), ("denied", "alpha__slow")):
        async with gw.client(headers={"traceparent": traceparent(TRACES[key])}) as client:
            out[key] = (await client.call_tool(tool, {"seconds": 0})).is_error
    async with gw.client() as client:
        out["meta"] = (await client.call_tool("beta__env", {}, meta=request_meta({
            "traceparent": traceparent(TRACES["meta"])}))).is_error
    return out


def received(log: Path, tool: str) -> dict[str, Any]:
    """The one `tools/call` of `tool` a server received: its params and headers."""
    found = [e for e in read_log(log) if e["method"] == "tools/call" and e["params"]["name"] == tool]
    assert len(found) == 1, found
    return found[0]


def parent_of(value: str, trace_id: str) -> str:
    version, trace, parent, flags = value.split("-")
    assert (version, trace, flags) == ("00", trace_id, "01")
    return parent


def descends(spans: dict[str, ReceivedSpan], span_id: str, ancestor: str) -> bool:
    while span_id in spans:
        if span_id == ancestor:
            return True
        span_id = spans[span_id].parent_span_id
    return False


def expected_spans(key: str) -> set[str]:
    """The names of the spans the trace of `key` holds once its call is over."""
    if key == "denied":
        return {"tools/call alpha__slow", "decide alpha__slow"}
    server, tool = ("alpha", "echo") if key == "alpha" else ("beta", "env")
    return {f"tools/call {server}__{tool}", f"decide {server}__{tool}", f"upstream tools/call {tool}"}


@ASYNC
async def test_one_trace_runs_from_the_client_through_the_gateway_into_each_server(
        tmp_path: Path, traced: Spans) -> None:
    async with two_servers(tmp_path) as (gw, _servers, _beta):
        said = await calls(gw)
        # Every span the assertions read: a parent span ends after its children.
        traces = {key: await traced.wait_for(trace, expected_spans(key))
                  for key, trace in TRACES.items()}
    assert said == {"alpha": False, "beta": False, "meta": False, "denied": True}
    for key, server, tool, log in (("alpha", "alpha", "echo", "alpha.jsonl"),
                                   ("beta", "beta", "env", "beta.jsonl"),
                                   ("meta", "beta", "env", "beta.jsonl")):
        trace_id, spans = TRACES[key], {s.span_id: s for s in traces[key]}
        named = {s.name: s for s in traces[key]}
        call = named[f"tools/call {server}__{tool}"]
        decision, upstream = named[f"decide {server}__{tool}"], named[f"upstream tools/call {tool}"]
        assert call.parent_span_id == CLIENT_SPAN and call.kind == SERVER
        assert decision.parent_span_id == call.span_id
        assert upstream.parent_span_id == call.span_id and upstream.kind == CLIENT
        assert {k: v for k, v in call.attributes.items() if k.startswith("mcp.preconditions.")} == {
            "mcp.preconditions.server": server, "mcp.preconditions.allowed": True,
            "mcp.preconditions.result": "allowed", "mcp.preconditions.unmet_count": 0}
        assert call.attributes["gen_ai.tool.name"] == f"{server}__{tool}"
        assert upstream.attributes["mcp.preconditions.server"] == server
        # What the server received continues the same trace, under the gateway's upstream span.
        sent = [e for e in read_log(tmp_path / log) if e["method"] == "tools/call"
                and trace_id in ((e["params"].get("_meta") or {}).get("traceparent") or "")]
        assert len(sent) == 1
        in_meta = parent_of(sent[0]["params"]["_meta"]["traceparent"], trace_id)
        assert descends(spans, in_meta, upstream.span_id)
        if server == "beta":  # an HTTP server gets the header too, the same value
            assert sent[0]["headers"]["traceparent"] == sent[0]["params"]["_meta"]["traceparent"]
    denied = {s.name: s for s in traces["denied"]}
    call = denied["tools/call alpha__slow"]
    assert call.parent_span_id == CLIENT_SPAN
    assert call.attributes["mcp.preconditions.allowed"] is False
    assert call.attributes["mcp.preconditions.result"] == "denied"
    assert call.attributes["mcp.preconditions.unmet_count"] == 1
    assert denied["decide alpha__slow"].attributes["mcp.preconditions.withheld"] == 1
    assert not any(name.startswith("upstream") for name in denied)  # it never left the gateway
    everything = repr([(s.name, s.attributes) for s in traced.spans])
    assert "staging" not in everything  # the confidential requirement, in no span
    assert "mcp.preconditions.subject" not in everything


@ASYNC
async def test_without_a_tracer_the_clients_context_is_passed_on_and_no_span_is_made(
        tmp_path: Path) -> None:
    async with two_servers(tmp_path) as (gw, _servers, _beta):
        said = await calls(gw)
        tracing = gw.gateway.telemetry.tracing
    assert said == {"alpha": False, "beta": False, "meta": False, "denied": True}
    assert tracing is False  # no tracer given, no provider installed: no span is ever started
    alpha = received(tmp_path / "alpha.jsonl", "echo")
    assert alpha["params"]["_meta"]["traceparent"] == traceparent(TRACES["alpha"])  # header -> _meta
    beta = [e for e in read_log(tmp_path / "beta.jsonl") if e["method"] == "tools/call"]
    assert [(e["params"]["_meta"]["traceparent"], e["headers"]["traceparent"]) for e in beta] == [
        (traceparent(TRACES[k]), traceparent(TRACES[k])) for k in ("beta", "meta")]


async def probes(gw: InProcess, count: int) -> list[bool]:
    """`count` calls of names no server lists, in one trace: what each said (is_error)."""
    async with gw.client(headers={"traceparent": traceparent(UNLISTED_TRACE)}) as client:
        return [(await client.call_tool(f"probe_{n}_from_a_caller", {})).is_error
                for n in range(count)]


@ASYNC
async def test_a_name_no_server_lists_is_unlisted_in_every_span(
        tmp_path: Path, traced: Spans) -> None:
    async with two_servers(tmp_path) as (gw, _servers, _beta):
        assert await probes(gw, 20) == [True] * 20
        await until(lambda: sum(s.name == "tools/call (unlisted)"
                                for s in traced.of(UNLISTED_TRACE)) == 20, "20 server spans")
        spans = traced.of(UNLISTED_TRACE)
    served = [s for s in spans if s.kind == SERVER and s.name.startswith("tools/call")]
    assert [s.name for s in served] == ["tools/call (unlisted)"] * 20  # one name for 20 sent
    assert {s.attributes["gen_ai.tool.name"] for s in served} == {"(unlisted)"}
    assert {s.attributes["mcp.preconditions.result"] for s in served} == {"unlisted"}
    assert "probe_" not in repr([(s.name, s.attributes) for s in spans])


@pytest.mark.usefixtures("restored_logging")
def test_the_gateway_command_reads_the_otel_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One it cannot honour is one line and exit 2, before anything starts (an exporter it can
    honour is set up from them: tests/integration/test_traces_otlp.py, over OTLP/HTTP)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    assert main(["gateway", "--policy", str(policy), "--", *UPSTREAM_STDIO]) == 2
    assert capsys.readouterr().err == (
        "mcp-preconditions: error: OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported; traces "
        "are exported as OTLP over http/protobuf\n")
