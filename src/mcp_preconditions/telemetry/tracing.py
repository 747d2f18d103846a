"""Traces: the OpenTelemetry SDK set up from the standard `OTEL_*` variables (extra `otel`), and the
spans a `tools/call` adds under its server span: the decision, and the upstream call.

Without the variables nothing is installed: our spans are then never started (`recording_span()`
is None), and the API's no-op tracer is all that runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from ..decisions import ATTRIBUTE_PREFIX
from ..errors import InputError
from ..outcomes import Decision
from ..spans import CurrentSpan
from .labels import UNLISTED

TRACER_NAME = "mcp_preconditions"
EXPORTERS = ("otlp", "console")
OTLP_PROTOCOL = "http/protobuf"
# Variables that ask for an OTLP export when OTEL_TRACES_EXPORTER is not set. (OpenTelemetry's own
# default exporter is otlp; here an unset environment exports nothing.)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_tracer = trace.get_tracer(TRACER_NAME)  # a proxy: follows the provider installed later
_current = CurrentSpan()


def exporters_wanted(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The span exporters the environment asks for (none when it asks for nothing). Raises
    InputError, naming the variable, for one this build cannot honour."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    listed = environ.get("OTEL_TRACES_EXPORTER")
    if listed is None:
        names: tuple[str, ...] = ("otlp",) if any(environ.get(v) for v in ENDPOINT_VARIABLES) else ()
    else:
        names = tuple(dict.fromkeys(n.strip() for n in listed.split(",") if n.strip()))
        unknown = [n for n in names if n not in (*EXPORTERS, "none")]
        if unknown:
            raise InputError(f"OTEL_TRACES_EXPORTER: {unknown[0]!r} is not supported here "
                             f"(otlp, console or none)")
        names = () if "none" in names else names
    if "otlp" in names:
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(variable)
            if protocol is not None:
                if protocol.strip() != OTLP_PROTOCOL:
                    raise InputError(f"{variable}: {protocol!r} is not supported; traces are "
                                     f"exported as OTLP over {OTLP_PROTOCOL}")
                break
    return names


class Tracing:
    """The SDK tracer provider this process installed from the environment."""

    def __init__(self, provider: Any, exporters: tuple[str, ...]) -> None:
        self.provider = provider
        self.exporters = exporters

    def shutdown(self) -> None:
        """Export the spans still queued, then stop (at exit)."""
        self.provider.shutdown()


def configure_tracing(service_name: str = "mcp-preconditions") -> Tracing | None:
    """Install the OpenTelemetry SDK as the global tracer provider when `OTEL_*` variables ask for
    traces (OTEL_TRACES_EXPORTER, or an OTLP endpoint), with batch export; None (and nothing
    installed) otherwise. `service_name` is used unless OTEL_SERVICE_NAME or
    OTEL_RESOURCE_ATTRIBUTES name the service. Raises InputError for an unusable setting."""
    environ = os.environ
    exporters = exporters_wanted(environ)
    if not exporters:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise InputError("the OTEL_* environment asks for traces, but the OpenTelemetry SDK is not "
                         "installed: install mcp-preconditions with its 'otel' extra") from None
    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service_name}))
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(
            _otlp() if name == "otlp" else ConsoleSpanExporter(out=sys.stderr)))  # stdout: MCP's
    trace.set_tracer_provider(provider)
    return Tracing(provider, exporters)


def _otlp() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise InputError("OTEL_TRACES_EXPORTER=otlp needs the OTLP/HTTP exporter: install "
                         "mcp-preconditions with its 'otel' extra") from None
    return OTLPSpanExporter()  # endpoint, headers, timeout: from the OTEL_EXPORTER_OTLP_* variables


# -- the spans of one call ---------------------------------------------------------------------------
def recording_span() -> Span | None:
    """The current span if it records (the server span of a traced call), else None: the one
    test on every call's path when tracing is off (about 0.1 µs)."""
    try:
        span: Span | None = _current.recording()
    except Exception:  # something that is not a span filed as the current one: no tracing here
        return None
    return span


def decision_span(tool: str, tracer: Tracer | None = None) -> AbstractContextManager[Span]:
    """The child span around the guard's decision; the decision-log span sink writes the
    decision's attributes on it (`decisions.span_attributes`). `tool` is a bounded label: a
    name the server lists, else `(unlisted)` (labels.UNLISTED), never a name as a caller sent it.
    `tracer`: the global provider's unless given."""
    return (tracer or _tracer).start_as_current_span(f"decide {tool}", kind=SpanKind.INTERNAL)


def upstream_span(server: str, tool: str | None, method: str = "tools/call",
                  tracer: Tracer | None = None) -> AbstractContextManager[Span]:
    """The child span around a request's trip upstream (an allowed call's, or any request the
    gateway forwards: `tool` None when it names no tool); inject its context into what goes
    upstream (gateway.upstream_params / upstream_headers) inside it. A failure is the caller's
    to describe on it (see `mark_failed`): an exception's text may quote a command line."""
    attributes: dict[str, Any] = {"mcp.method.name": method, ATTRIBUTE_PREFIX + "server": server}
    if tool is not None:
        attributes["gen_ai.tool.name"] = tool
    return (tracer or _tracer).start_as_current_span(
        f"upstream {method} {tool}" if tool is not None else f"upstream {method}",
        kind=SpanKind.CLIENT, attributes=attributes, record_exception=False,
        set_status_on_exception=False)


def server_span(method: str, target: str | None, parent: Context | None,
                attributes: dict[str, Any], tracer: Tracer | None = None
                ) -> AbstractContextManager[Span]:
    """The SERVER span of one message a client sent (named as the MCP SDK names its own: the
    method, then the tool or prompt), a child of the caller's context when it sent one (see
    gateway.incoming_context). Exceptions are the caller's to describe on it."""
    return (tracer or _tracer).start_as_current_span(
        f"{method} {target}" if target else method, context=parent, kind=SpanKind.SERVER,
        attributes=attributes, record_exception=False, set_status_on_exception=False)


def mark_failed(span: Span, exc: BaseException) -> None:
    """An error status and `error.type` on `span`: the JSON-RPC code of an MCP error, else the
    exception's type; never its text (it may quote the caller's input or a server's command)."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if isinstance(code, int):
        span.set_attributes({"error.type": str(code), "rpc.response.status_code": str(code)})
    else:
        span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(StatusCode.ERROR)


def call_attributes(server: str, decision: Decision, result: str) -> dict[str, Any]:
    """The server span's attributes for a decided call: method, tool, server, allowed, result and
    how many requirements were unmet (a count: never a confidential name, subject or token). The
    tool of an `unlisted` result is `(unlisted)`, here and in place of the name a decision-log span
    sink wrote on the same span: a name no server lists is the caller's text."""
    attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": decision.tool,
                  ATTRIBUTE_PREFIX + "server": server, ATTRIBUTE_PREFIX + "allowed": decision.allowed,
                  ATTRIBUTE_PREFIX + "result": result,
                  ATTRIBUTE_PREFIX + "unmet_count": len(decision.unmet)}
    if result == "unlisted":
        attributes["gen_ai.tool.name"] = attributes[ATTRIBUTE_PREFIX + "tool"] = UNLISTED
    return attributes
