"""Operating a guarded server (SPEC §13): Prometheus metrics with bounded labels, `/metrics`, and
OpenTelemetry traces configured by the standard `OTEL_*` variables, with W3C trace context read
from callers and passed upstream. `__all__` is what a user calls (docs/operations.md); the label
values, span readers and the like are the modules' own.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .gateway import GatewayTelemetry, incoming_context, upstream_headers, upstream_params
from .metrics import Metrics
from .policy import watch_policy
from .tracing import Tracing, call_attributes, configure_tracing, decision_span, upstream_span

__all__ = ["GatewayTelemetry", "Metrics", "MetricsListener", "Tracing", "call_attributes",
           "configure_tracing", "decision_span", "incoming_context", "metrics_app", "metrics_route",
           "upstream_headers", "upstream_params", "upstream_span", "watch_policy"]

if TYPE_CHECKING:
    from .exposition import MetricsListener, metrics_app, metrics_route

# `/metrics` as a Starlette route or app, imported on first use: the gateway's own HTTP app needs
# neither Starlette nor the WSGI listener (memory, docs/gateway-performance.md).
_EXPOSITION = frozenset({"MetricsListener", "metrics_app", "metrics_route"})


def __getattr__(name: str) -> Any:
    if name in _EXPOSITION:
        return getattr(importlib.import_module(".exposition", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
