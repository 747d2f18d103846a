"""W3C trace context on plain dicts (read from `_meta` or headers, written into forwarded params and
headers), and which OTEL_* environments ask for traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from starlette.datastructures import Headers

from mcp_preconditions.errors import InputError
from mcp_preconditions.telemetry import incoming_context, upstream_headers, upstream_params
from mcp_preconditions.telemetry.gateway import carrier
from mcp_preconditions.telemetry.tracing import exporters_wanted

A = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
B = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


@pytest.fixture
def current_span() -> Iterator[trace.Span]:
    """A recording span made current, from a local provider (the global one stays untouched)."""
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("gateway") as span:
        yield span
    provider.shutdown()


def test_meta_comes_before_the_header() -> None:
    params = {"name": "x", "_meta": {"traceparent": A, "tracestate": "k=v"}}
    assert carrier(params, {"traceparent": B}) == {"traceparent": A, "tracestate": "k=v"}
    assert carrier({"name": "x"}, {"traceparent": B}) == {"traceparent": B}
    assert carrier({"_meta": {"traceparent": "garbage"}}, {"traceparent": B}) == {"traceparent": B}
    assert carrier(None, Headers({"TraceParent": B})) == {"traceparent": B}
    assert carrier(None, {"TRACEPARENT": B}) == {"traceparent": B}  # a plain dict, any case
    assert carrier({"_meta": "not a dict"}, None) == {}


@pytest.mark.parametrize("bad", [
    A.upper(),                                              # W3C: lowercase hex only
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is forbidden
    A + "\r\nX-Injected: 1", " " + A, A[:-1], 42, None,
])
def test_an_invalid_traceparent_is_ignored(bad: object) -> None:
    assert carrier({"_meta": {"traceparent": bad}}) == {}
    assert incoming_context({"_meta": {"traceparent": bad}}) is None


def test_a_tracestate_that_could_break_a_header_is_dropped() -> None:
    assert carrier({"_meta": {"traceparent": A, "tracestate": "k=v\r\nX: 1"}}) == {"traceparent": A}
    assert carrier({"_meta": {"traceparent": A, "tracestate": "x" * 513}}) == {"traceparent": A}


def test_incoming_context_continues_the_callers_trace() -> None:
    context = incoming_context({"_meta": {"traceparent": A}})
    assert context is not None
    parent = trace.get_current_span(context).get_span_context()
    assert (format(parent.trace_id, "032x"), format(parent.span_id, "016x")) == (
        "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    assert parent.is_remote


def test_without_a_current_span_the_callers_context_is_passed_on_as_it_came() -> None:
    params = {"name": "x", "arguments": {}, "_meta": {"progressToken": 7, "traceparent": A}}
    assert upstream_params(params) == params
    moved = upstream_params({"name": "x"}, {"traceparent": B})
    assert moved == {"name": "x", "_meta": {"traceparent": B}}
    assert upstream_params({"name": "x"}) == {"name": "x"}
    assert upstream_headers(params) == {"traceparent": A}
    assert upstream_headers({"name": "x"}) == {}


def test_with_a_current_span_its_context_goes_upstream(current_span: trace.Span) -> None:
    context = current_span.get_span_context()
    ours = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    params: dict[str, Any] = {"name": "x", "_meta": {"progressToken": 7, "traceparent": A,
                                                     "tracestate": "k=v"}}
    forwarded = upstream_params(params, {"traceparent": B})
    assert forwarded == {"name": "x", "_meta": {"progressToken": 7, "traceparent": ours}}
    assert params["_meta"]["traceparent"] == A  # the caller's params are left as they were
    assert upstream_headers(params) == {"traceparent": ours}


@pytest.mark.parametrize(("environ", "wanted"), [
    ({}, ()),
    ({"OTEL_SERVICE_NAME": "gw"}, ()),  # a name alone asks for nothing
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ("otlp",)),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
    ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
    ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console")),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ("otlp",)),
])
def test_which_environments_ask_for_traces(environ: dict[str, str], wanted: tuple[str, ...]) -> None:
    assert exporters_wanted(environ) == wanted


@pytest.mark.parametrize(("environ", "message"), [
    ({"OTEL_TRACES_EXPORTER": "jaeger"},
     "OTEL_TRACES_EXPORTER: 'jaeger' is not supported here (otlp, console or none)"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' is not supported; traces are exported as OTLP "
     "over http/protobuf"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' is not supported; traces are exported as OTLP "
     "over http/protobuf"),
])
def test_an_unusable_environment_is_one_clear_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(InputError) as raised:
        exporters_wanted(environ)
    assert str(raised.value) == message
