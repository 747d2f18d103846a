"""Operating a guarded server (SPEC §13): Prometheus metrics with bounded labels, `/metrics`, and
OpenTelemetry traces configured by the standard `OTEL_*` variables, with W3C trace context read
from callers and passed upstream.
"""

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .exposition import METRICS_PATH, MetricsListener, metrics_app, metrics_endpoint, metrics_route

# `/metrics` as a Starlette route or app, imported on first use: the gateway's own HTTP app needs
# neither Starlette nor the WSGI listener (memory, docs/gateway-performance.md).
_EXPOSITION = frozenset({"METRICS_PATH", "MetricsListener", "metrics_app", "metrics_endpoint",
                         "metrics_route"})


def __getattr__(name: str) -> Any:
    if name in _EXPOSITION:
        return getattr(importlib.import_module(".exposition", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
