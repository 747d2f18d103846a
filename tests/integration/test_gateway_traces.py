"""Traces through `mcp-preconditions gateway` (OTLP/HTTP from the standard OTEL_* variables, received by
tests/fixtures/otlp.py) in front of two servers that log what they receive: `alpha` over stdio and
`beta` over streamable HTTP. One trace id runs from the client's `traceparent` (its HTTP header, or
`_meta.traceparent`) through the gateway's server, decision and upstream spans to the `traceparent`
each server receives (`_meta` for both; a header too for the HTTP one). A denied call's span says
denied and names no confidential requirement; a name no server lists is `(unlisted)` in every span.
Without the variables the client's context is passed on as it came, and nothing is exported.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gateway_upstream import Process, gateway_http, read_log, upstream_http
from tests.fixtures.mcp_servers import request_meta
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan
from tests.integration.test_gateway_metrics import files, until

pytestmark = pytest.mark.integration

CLIENT_SPAN = "00f067aa0ba902b7"
TRACES = {"alpha": "4bf92f3577b34da6a3ce929d0e0e4736",   # alpha__echo, traceparent header
          "beta": "0af7651916cd43dd8448eb211c80319c",    # beta__env, traceparent header
          "meta": "5b8efff798038103d269b633813fc60c",    # beta__env, _meta.traceparent
          "denied": "a3ce929d0e0e47364bf92f3577b34da6"}  # alpha__slow: env:staging, confidential
SERVER, CLIENT = 2, 3  # OTLP span kinds


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{CLIENT_SPAN}-01"


@contextmanager
def traced_gateway(tmp: Path, receiver: OtlpReceiver | None) -> Iterator[tuple[Process, Process]]:
    """`beta` and a gateway in front of it and `alpha`, exporting spans to `receiver` (None: no
    OTEL_* variables at all), both servers connected."""
    env = {} if receiver is None else {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                       "OTEL_SERVICE_NAME": "gateway-test",
                                       "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with upstream_http(tmp / "beta.jsonl") as beta:
        policy, servers = files(tmp, beta.url)
        with gateway_http(policy, tmp / "alpha.jsonl", "--servers", str(servers), **env) as gw:
            until(lambda: httpx2.get(gw.url + "/readyz", timeout=30).json()["status"], "ready",
                  gw.output)
            yield gw, beta


async def calls(url: str) -> dict[str, bool]:
    """One call per trace: three from an HTTP client sending a `traceparent` header, one with
    `_meta.traceparent` (how 2026-07-28 clients send it). What each said: is_error."""
    out: dict[str, bool] = {}
    for key, tool in (("alpha", "alpha__echo"), ("beta", "beta__env"), ("denied", "alpha__slow")):
        header = httpx2.AsyncClient(headers={"traceparent": traceparent(TRACES[key])}, timeout=30)
        async with Client(streamable_http_client(url, http_client=header)) as client:
            out[key] = (await client.call_tool(tool, {"seconds": 0})).is_error
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30))) as client:
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


def test_one_trace_runs_from_the_client_through_the_gateway_into_each_server(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    with traced_gateway(tmp_path, otlp_receiver) as (gw, _beta):
        said = anyio.run(calls, gw.url + "/mcp")
        # Every span the assertions read: a parent span ends (and is exported) after its children.
        traces = {key: otlp_receiver.wait_for(trace, expected_spans(key)) for key, trace in TRACES.items()}
    assert said == {"alpha": False, "beta": False, "meta": False, "denied": True}
    for key, server, tool, log in (("alpha", "alpha", "echo", "alpha.jsonl"),
                                   ("beta", "beta", "env", "beta.jsonl"),
                                   ("meta", "beta", "env", "beta.jsonl")):
        trace_id, spans = TRACES[key], {s.span_id: s for s in traces[key]}
        named = {s.name: s for s in traces[key]}
        call = named[f"tools/call {server}__{tool}"]
        decision, upstream = named[f"decide {server}__{tool}"], named[f"upstream tools/call {tool}"]
        assert call.parent_span_id == CLIENT_SPAN and call.kind == SERVER
        assert call.service == "gateway-test"
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
    everything = repr([(s.name, s.attributes) for s in otlp_receiver.spans])
    assert "staging" not in everything  # the confidential requirement, in no span
    assert "mcp.preconditions.subject" not in everything


def test_without_otel_variables_the_clients_context_is_passed_on_and_nothing_exported(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    with traced_gateway(tmp_path, None) as (gw, _beta):
        said = anyio.run(calls, gw.url + "/mcp")
    assert said == {"alpha": False, "beta": False, "meta": False, "denied": True}
    alpha = received(tmp_path / "alpha.jsonl", "echo")
    assert alpha["params"]["_meta"]["traceparent"] == traceparent(TRACES["alpha"])  # header -> _meta
    beta = [e for e in read_log(tmp_path / "beta.jsonl") if e["method"] == "tools/call"]
    assert [(e["params"]["_meta"]["traceparent"], e["headers"]["traceparent"]) for e in beta] == [
        (traceparent(TRACES[k]), traceparent(TRACES[k])) for k in ("beta", "meta")]
    assert otlp_receiver.requests == 0


UNLISTED_TRACE = "c0ffee00c0ffee00c0ffee00c0ffee00"


async def probes(url: str, count: int) -> list[bool]:
    """`count` calls of names no server lists, in one trace: what each said (is_error)."""
    header = httpx2.AsyncClient(headers={"traceparent": traceparent(UNLISTED_TRACE)}, timeout=30)
    async with Client(streamable_http_client(url, http_client=header)) as client:
        return [(await client.call_tool(f"probe_{n}_from_a_caller", {})).is_error
                for n in range(count)]


def test_a_name_no_server_lists_is_unlisted_in_every_span(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    with traced_gateway(tmp_path, otlp_receiver) as (gw, _beta):
        assert anyio.run(probes, gw.url + "/mcp", 20) == [True] * 20
        until(lambda: sum(s.name == "tools/call (unlisted)"
                          for s in otlp_receiver.spans if s.trace_id == UNLISTED_TRACE), 20, gw.output)
        spans = [s for s in otlp_receiver.spans if s.trace_id == UNLISTED_TRACE]
    served = [s for s in spans if s.kind == SERVER and s.name.startswith("tools/call")]
    assert [s.name for s in served] == ["tools/call (unlisted)"] * 20  # one name for 20 sent
    assert {s.attributes["gen_ai.tool.name"] for s in served} == {"(unlisted)"}
    assert {s.attributes["mcp.preconditions.result"] for s in served} == {"unlisted"}
    assert "probe_" not in repr([(s.name, s.attributes) for s in spans])
