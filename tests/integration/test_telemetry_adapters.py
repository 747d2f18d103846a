"""Metrics and traces of the three hosted flavours (GuardedMCPServer, a lowlevel Server through
`guard_server`, fastmcp through `guard_fastmcp`): `metrics=True` counts every decision under the
server's name with bounded labels, `/metrics` is on each one's HTTP app, and a traced call has its
decision span under the server span with the call's attributes.

In-process: each flavour in the test's event loop, its client in memory, its HTTP app on a socket of
this loop. The traces stay interop (a process per flavour): see that test.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.integrations._server import Preconditions
from mcp_preconditions.telemetry import Metrics, metrics_route
from tests.fixtures.mcp_servers import FLAVOURS, ROOT, Flavour, run_asgi, server_env, small_guard
from tests.fixtures.otlp import OtlpReceiver
from tests.fixtures.traced_flavour import PARENT, TRACES, UNKNOWN

ASYNC = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(params=list(FLAVOURS))
def flavour_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def counted(metrics: Metrics, tool: str, result: str) -> float | None:
    return metrics.registry.get_sample_value(
        "mcp_preconditions_decisions_total", {"server": "small", "tool": tool, "result": result})


@ASYNC
async def test_each_flavour_counts_its_decisions(flavour_name: str) -> None:
    flavour: Flavour = FLAVOURS[flavour_name](small_guard(), metrics=True)
    async with Client(flavour.target) as client:
        await client.call_tool("open_door", {})
        await client.call_tool("closed_door", {})
        await client.call_tool("from_policy", {})
        for n in range(20):
            with contextlib.suppress(MCPError):  # fastmcp's answer to an unknown name
                await client.call_tool(f"no_such_tool_{n}", {})
    metrics = flavour.preconditions.metrics
    assert metrics is not None
    assert counted(metrics, "open_door", "allowed") == 1
    assert counted(metrics, "closed_door", "denied") == 1
    assert counted(metrics, "from_policy", "allowed") == 1
    assert counted(metrics, "(unlisted)", "unlisted") == 20
    assert metrics.registry.get_sample_value("mcp_preconditions_unmet_total",
                                             {"requirement": "(withheld)"}) == 1
    tools = {s.labels["tool"] for f in metrics.registry.collect() for s in f.samples
             if "tool" in s.labels}
    assert tools == {"open_door", "closed_door", "from_policy", "(unlisted)"}


def http_app(flavour: Flavour) -> Any:
    if flavour.app is not None:  # fastmcp: the route was added to the app
        return flavour.app.http_app()
    if flavour.name == "MCPServer":  # GuardedMCPServer(metrics=True): on its streamable app
        return flavour.target.streamable_http_app()
    metrics = flavour.preconditions.metrics
    assert metrics is not None
    return flavour.target.streamable_http_app(custom_starlette_routes=[metrics_route(metrics)])


@ASYNC
async def test_each_flavour_serves_metrics_over_http(flavour_name: str) -> None:
    flavour: Flavour = FLAVOURS[flavour_name](small_guard(), metrics=True)
    async with Client(flavour.target) as client:
        await client.call_tool("closed_door", {})
    async with run_asgi(http_app(flavour)) as base, httpx.AsyncClient(timeout=10) as http:
        page = await http.get(f"{base}/metrics")
    assert page.status_code == 200
    assert ('mcp_preconditions_decisions_total{result="denied",server="small",tool="closed_door"} '
            '1.0') in page.text
    assert "secret.door" not in page.text


@pytest.fixture(scope="module")
def traced() -> Iterator[OtlpReceiver]:
    """Every flavour's calls, traced in one process of their own (tests/fixtures/traced_flavour.py,
    each flavour in a trace of its own), exported over OTLP/HTTP to this receiver."""
    receiver = OtlpReceiver()
    try:
        env = server_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        done = subprocess.run([sys.executable, "-m", "tests.fixtures.traced_flavour", *FLAVOURS],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        yield receiver
    finally:
        receiver.close()


@pytest.mark.interop
def test_each_flavour_traces_its_calls(flavour_name: str, traced: OtlpReceiver) -> None:
    """Interop: a hosted server's spans are the SDK's server span and ours, from the process's
    global tracer provider, which is set once per process and which a test process must not
    install: the flavours run in a process of their own, set up from OTEL_* as an operator's is,
    exporting over OTLP/HTTP to the test's receiver."""
    decided_unknown = flavour_name != "fastmcp"  # fastmcp refuses an unknown name undecided
    trace_id = TRACES[flavour_name]
    spans = traced.wait_for(trace_id, {"decide open_door", "decide closed_door"} | (
        {"decide (unlisted)"} if decided_unknown else set()))
    decisions = {s.name: s for s in spans if s.name.startswith("decide ")}
    by_id = {s.span_id: s for s in spans}
    for tool, allowed, result in (("open_door", True, "allowed"), ("closed_door", False, "denied")):
        call = by_id[decisions[f"decide {tool}"].parent_span_id]  # the server span
        assert call.kind == 2 and call.trace_id == trace_id
        assert call.attributes["mcp.preconditions.allowed"] is allowed
        assert call.attributes["mcp.preconditions.result"] == result
        assert call.attributes["mcp.preconditions.server"] == "small"
        assert call.attributes["gen_ai.tool.name"] == tool
    assert by_id.get(PARENT) is None  # the client's span is the caller's, not exported here
    roots = [s for s in spans if s.parent_span_id == PARENT]
    assert roots and all(s.kind == 2 for s in roots)
    assert "secret.door" not in repr([(s.name, s.attributes) for s in spans])
    # The name no tool has is the caller's text: bounded to (unlisted) in every span and attribute.
    assert UNKNOWN not in repr([(s.name, s.attributes) for s in spans])
    if decided_unknown:
        unlisted = decisions["decide (unlisted)"]
        assert by_id[unlisted.parent_span_id].name == "tools/call (unlisted)"
        assert by_id[unlisted.parent_span_id].attributes["gen_ai.tool.name"] == "(unlisted)"


def test_the_http_traceparent_wrapper_costs_in_process_calls_nothing() -> None:
    from mcp_preconditions.integrations._telemetry import TraceHeaderContext

    flavour: Flavour = FLAVOURS["MCPServer"](small_guard())
    chain = flavour.target._lowlevel_server.middleware
    opener = chain[0]
    assert not any(isinstance(m, TraceHeaderContext) for m in chain)  # in-process: not there
    flavour.target.streamable_http_app()
    flavour.target.streamable_http_app()  # twice: still one wrapper, around the span opener
    assert isinstance(chain[0], TraceHeaderContext) and chain[0].inner is opener
    assert sum(isinstance(m, TraceHeaderContext) for m in chain) == 1
    for name in ("lowlevel", "fastmcp"):  # their HTTP apps are built beyond our reach: wrapped now
        server = FLAVOURS[name](small_guard()).target
        layers = [*server.middleware, *(m.inner for m in server.middleware  # fastmcp: inside ours
                                        if isinstance(m, Preconditions))]
        assert sum(isinstance(m, TraceHeaderContext) for m in layers) == 1
