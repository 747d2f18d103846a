"""Operating a guarded server (SPEC §13): Prometheus metrics with bounded labels, `/metrics`, and
OpenTelemetry traces configured by the standard `OTEL_*` variables, with W3C trace context read
from callers and passed upstream.
"""

from .exposition import METRICS_PATH, MetricsListener, metrics_app, metrics_endpoint, metrics_route
from .gateway import NO_SERVER, GatewayTelemetry, UpstreamCall
from .labels import OTHER, RESULTS, UNLISTED, WITHHELD, result_of
from .metrics import Metrics
from .policy import watch_policy
from .propagation import carrier, incoming_context, upstream_headers, upstream_params
from .tracing import (
    Tracing,
    call_attributes,
    configure_tracing,
    decision_span,
    recording_span,
    upstream_span,
)

__all__ = ["METRICS_PATH", "NO_SERVER", "OTHER", "RESULTS", "UNLISTED", "WITHHELD", "GatewayTelemetry",
           "Metrics", "MetricsListener", "Tracing", "UpstreamCall", "call_attributes", "carrier",
           "configure_tracing", "decision_span", "incoming_context", "metrics_app", "metrics_endpoint",
           "metrics_route", "recording_span", "result_of", "upstream_headers", "upstream_params",
           "upstream_span", "watch_policy"]
