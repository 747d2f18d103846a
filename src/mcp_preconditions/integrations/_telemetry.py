"""A hosted server's calls in metrics and traces: each decision counted (when metrics are on) and,
under a recording server span, a decision span plus the call's attributes on the server span; and
the HTTP `traceparent` header continued by the SDK's server span.

The MCP SDK (and fastmcp) already open a server span per message, from `_meta.traceparent`; this
only adds to it. With no tracer provider installed, a call pays one `recording_span()` test.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.lowlevel.server import Server
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..calls import Check, Observe
from ..decisions import ATTRIBUTE_PREFIX
from ..guard import Guard
from ..late import Sidecar
from ..outcomes import Decision, Refused
from ..principal import Credentials
from ..telemetry.gateway import carrier, incoming_context
from ..telemetry.labels import UNLISTED, result_of
from ..telemetry.metrics import Metrics
from ..telemetry.tracing import call_attributes, decision_span


class HostedMetrics:
    """One hosted server in a `Metrics`: its tools (`known()`, the names last told to the guard)
    declared again whenever they or the policy change (read on each call: an identity and a string
    test), then each decision counted under the server's `name`."""

    def __init__(self, metrics: Metrics, name: str, guard: Guard,
                 known: Callable[[], frozenset[str] | None]) -> None:
        self.metrics = metrics
        self.name = name
        self._guard = guard
        self._known_now = known
        self._known: frozenset[str] | None = None
        self._registration: object = None  # the guard's token of its tools' own requirements
        self._revision = ""

    def observe(self, decision: Decision) -> None:
        refusal = decision.refusal
        if refusal is not None and refusal.kind is Refused.UNLISTED:
            self.metrics.observe_unlisted(self.name, decision.tool)
            return
        if (self._known_now() is not self._known or self._guard.registration is not self._registration
                or decision.revision != self._revision):
            self._declare()
        self.metrics.observe_decision(self.name, decision)

    def _declare(self) -> None:
        guard = self._guard
        known, registration, snapshot = self._known_now(), guard.registration, guard.snapshot
        self.metrics.declare(self.name, {t: guard.requirements_for(t) for t in known or ()},
                             snapshot.confidential)
        self.metrics.policy_loaded(snapshot.revision)
        self._known, self._registration, self._revision = known, registration, snapshot.revision


def observed(guard: Guard, telemetry: HostedMetrics | None, server: str, span: trace.Span | None,
             credentials: Credentials, tool: str, arguments: Mapping[str, Any] | None,
             listed: bool, echo: object = None) -> tuple[Check | None, Observe]:
    """How one call of `server`'s is checked and observed (calls.py): under a recording server
    `span`, each check in a decision span, the final decision written on the server span; counted
    when `telemetry` is on. `listed`: whether `tool` is one of the server's tools (else its spans
    say `(unlisted)`); `echo`: the context ID the request echoed (Guard.check)."""
    if span is not None and not listed:  # the SDK named its span after the caller's text
        span.update_name(f"tools/call {UNLISTED}")

    def observe(decision: Decision) -> None:
        if telemetry is not None:
            telemetry.observe(decision)
        if span is not None:
            span.set_attributes(call_attributes(server, decision, result_of(decision, listed)))

    if span is None:
        return None, observe

    async def check(sidecar: Sidecar | None) -> Decision:
        # The decision-log span sink writes the decision's attributes on the decision span.
        with decision_span(tool if listed else UNLISTED) as decided:
            decision = await guard.check(tool, credentials, arguments, sidecar=sidecar, echo=echo)
            if not listed:
                decided.set_attribute(ATTRIBUTE_PREFIX + "tool", UNLISTED)
        return decision

    return check, observe


class TraceHeaderContext:
    """Runs a server's outermost middleware (the SDK's or fastmcp's span opener) with the caller's
    HTTP `traceparent` header as the current context, when the request has a valid one and its
    `_meta` has none (the span opener reads `_meta` itself), so the server span continues the
    caller's trace. It wraps that middleware rather than adding a layer (a layer of its own cost an
    in-process call 0.7 µs), and GuardedMCPServer wraps only when it builds an HTTP app (the wrap
    costs 0.4 µs)."""

    def __init__(self, inner: ServerMiddleware[Any] | None) -> None:
        self.inner = inner

    def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
                 ) -> Coroutine[Any, Any, HandlerResult]:
        request = ctx.request
        if request is not None:  # HTTP; None on stdio and in-process
            context = _header_context(ctx.params, getattr(request, "headers", None))
            if context is not None:
                return _within(context, self.inner, ctx, call_next)
        if self.inner is not None:
            return self.inner(ctx, call_next)
        return call_next(ctx)  # type: ignore[return-value]  # the SDK only awaits it


def continue_http_traces(server: Server[Any]) -> None:
    """Make `server`'s spans continue the HTTP `traceparent` header (idempotent)."""
    middleware = server.middleware
    if not (middleware and isinstance(middleware[0], TraceHeaderContext)):
        middleware[:1] = [TraceHeaderContext(middleware[0] if middleware else None)]


def _header_context(params: Mapping[str, Any] | None, headers: Any) -> otel_context.Context | None:
    if headers is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # no tracer provider: nothing would record the span anyway
    if carrier(params):  # `_meta.traceparent`: the span opener continues it itself
        return None
    return incoming_context(None, headers)


async def _within(context: otel_context.Context, inner: ServerMiddleware[Any] | None,
                  ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    token = otel_context.attach(context)
    try:
        result: HandlerResult = await (inner(ctx, call_next) if inner is not None else call_next(ctx))
        return result
    finally:
        otel_context.detach(token)
