"""The gateway's metrics and traces (SPEC §13) behind one object that each stage of its pipeline calls
at its boundary: a client message arrives (its server span), a call is decided or refused (counts,
the decision span), a request goes upstream (its time, its span, the trace context passed on), a
server connects, is lost or restarted, a server's tools are listed, the policy changes.

Plain values in (methods, raw JSON-RPC params, headers as mappings, server keys), so any transport can
call it. Without metrics and without a tracer provider each hook is a test or two.

W3C trace context on plain dicts, which hosted servers read too: read the caller's
(`params._meta.traceparent`, SEP-414 and 2026-07-28, else the HTTP `traceparent` header) and write
ours into what goes upstream (`_meta` of the forwarded params, and headers for an HTTP upstream).
Raw JSON-RPC params in, new dicts out. Values are checked against the W3C format before they are
trusted or copied into a header.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from time import perf_counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from ..outcomes import Decision
from .labels import UNLISTED, result_of
from .metrics import DropReason, Metrics, RefusalReason
from .tracing import (
    call_attributes,
    decision_span,
    mark_failed,
    recording_span,
    server_span,
    upstream_span,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context

NO_SERVER = "(none)"  # the `server` label of a call to a name no server could take
Headers = Mapping[str, Any] | None  # a request's HTTP headers (None: stdio, in-process)
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
META = "_meta"
# W3C Trace Context: version-traceid-parentid-flags, lowercase hex; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{0,512}")  # printable ASCII: never a new header line


class GatewayTelemetry:
    """What one gateway counts and traces. `metrics` None: nothing counted. Spans are made once a
    tracer provider is installed (`configure_tracing`), or with the `tracer` given (tests).
    `message` comes first for every client message: it is where a provider installed later is
    noticed."""

    def __init__(self, metrics: Metrics | None = None, tracer: Tracer | None = None) -> None:
        self.metrics = metrics
        self._tracer = tracer
        self._traced = tracer is not None
        # Every server's listed tool names (`listed`): the only tool names a span may carry.
        self._tools: frozenset[str] = frozenset()
        if metrics is not None:  # its `(unlisted)` series exists from the start, at 0
            metrics.declare(NO_SERVER, {})

    @property
    def tracing(self) -> bool:
        """Whether spans are made. Asked until a tracer provider is found: the global one is set
        once per process, so once it is there it stays."""
        if not self._traced:
            self._traced = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        return self._traced

    # -- a client message arrives (the listener/session boundary) ---------------------------------
    def message(self, method: str, params: Mapping[str, Any] | None, headers: Headers,
                request_id: Any = None, version: str | None = None
                ) -> AbstractContextManager[Span] | None:
        """The SERVER span of one client message, continuing the caller's trace context
        (`params._meta.traceparent`, else the HTTP `traceparent` header); None when tracing is
        off. Enter it around the whole handling of the message. A `tools/call` span is named after
        its tool when some server lists it, else `(unlisted)`: what a caller sends never adds a
        span name. (A prompt's name is not known to be listed here: `prompts/get` names none.)"""
        if not self.tracing:
            return None
        attributes: dict[str, Any] = {"mcp.method.name": method}
        if version is not None:
            attributes["mcp.protocol.version"] = version
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        target = None
        if method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
            target = attributes["gen_ai.tool.name"] = self.tool_label(
                params.get("name") if params else None)
        return _failures(server_span(method, target, incoming_context(params, headers), attributes,
                                     self._tracer))

    def tool_label(self, name: Any) -> str:
        """`name` when some server lists a tool of that name, else `(unlisted)`."""
        return name if isinstance(name, str) and name in self._tools else UNLISTED

    # -- a call is decided (decide.py) ------------------------------------------------------------
    async def decision(self, tool: str, pending: Awaitable[Decision]) -> Decision:
        """The guard's decision (`pending`, not yet awaited) inside the decision span."""
        if not self._traced:
            return await pending
        with decision_span(self.tool_label(tool), self._tracer):
            return await pending

    def decided(self, server: str, decision: Decision, listed: bool = True) -> None:
        """Every `tools/call` once, allowed or refused: `listed` False for a name its server does
        not offer (`unlisted_tool`; `server` NO_SERVER when no server could take it). Counted, and
        written on the message's server span (method, tool, server, allowed, result, unmet count)."""
        metrics = self.metrics
        if metrics is not None:
            if listed:
                metrics.observe_decision(server, decision)
            else:
                metrics.observe_unlisted(server, decision.tool)
        if self._traced:
            span = recording_span()
            if span is not None:
                span.set_attributes(call_attributes(server, decision, result_of(decision, listed)))

    # -- a request goes upstream (forward.py) -----------------------------------------------------
    def upstream(self, server: str, method: str, params: Mapping[str, Any] | None,
                 headers: Headers = None) -> UpstreamCall:
        """`with telemetry.upstream(...) as sent:` send `sent` (the params with the trace context
        to pass on in `_meta`) to `server`, inside the upstream span; a `tools/call` is timed.
        `headers` are the client's, for its `traceparent` header when tracing is off."""
        return UpstreamCall(self, server, method, params, headers)

    # -- a request refused before any decision (the HTTP listener) ------------------------------
    def refused(self, reason: RefusalReason) -> None:
        """An HTTP request refused before a decision: a 401, a session's 404, a Host/Origin
        refusal, a bound reached (`Metrics.http_refused`)."""
        if self.metrics is not None:
            self.metrics.http_refused(reason)

    # -- a server's life (server.py, fleet.py) ----------------------------------------------------
    def connected(self, server: str, up: bool) -> None:
        """`server`'s session came up (True) or was lost, or was never up yet (False)."""
        if self.metrics is not None:
            self.metrics.upstream_up(server, up)

    def dropped(self, server: str, reason: DropReason) -> None:
        """An answer `server` sent that no request waited for: dropped, never delivered."""
        if self.metrics is not None:
            self.metrics.upstream_dropped(server, reason)

    def restarting(self, server: str) -> None:
        """Another attempt at `server` (a new process or connection) after a failure or a loss."""
        if self.metrics is not None:
            self.metrics.upstream_restarted(server)

    def listed(self, tools: Mapping[str, Mapping[str, Sequence[str]]], confidential: Iterable[str],
               revision: str) -> None:
        """Every server's routable tools (server -> visible name -> effective requirements) and
        the policy in force: the only label values a call can use from now on."""
        self._tools = frozenset(name for listed in tools.values() for name in listed)
        metrics = self.metrics
        if metrics is None:
            return
        secret = frozenset(confidential)
        for server, listed in tools.items():
            metrics.declare(server, listed, secret)
        metrics.policy_loaded(revision)


class UpstreamCall:
    """One request's trip upstream (see GatewayTelemetry.upstream). A class, not a generator: it is
    on every forwarded request's path."""

    __slots__ = ("_headers", "_method", "_opened", "_params", "_server", "_span", "_start",
                 "_telemetry")

    def __init__(self, telemetry: GatewayTelemetry, server: str, method: str,
                 params: Mapping[str, Any] | None, headers: Headers) -> None:
        self._telemetry = telemetry
        self._server = server
        self._method = method
        self._params = params
        self._headers = headers
        self._opened: AbstractContextManager[Span] | None = None
        self._span: Span | None = None
        self._start = 0.0

    def __enter__(self) -> Mapping[str, Any] | None:
        telemetry, params = self._telemetry, self._params
        if telemetry._traced:
            name = params.get("name") if params and self._method == "tools/call" else None
            self._opened = upstream_span(self._server, name if isinstance(name, str) else None,
                                         self._method, telemetry._tracer)
            self._span = self._opened.__enter__()
        self._start = perf_counter()
        if self._span is None and header(self._headers, TRACEPARENT) is None:
            return params  # no span, no header: `_meta` passes on as the caller sent it
        sent = upstream_params(params or {}, self._headers)
        return sent if sent or params is not None else None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        metrics = self._telemetry.metrics
        if metrics is not None and self._method == "tools/call":
            metrics.observe_upstream(self._server, perf_counter() - self._start)
        if self._opened is not None and self._span is not None:
            if exc is not None and isinstance(exc, Exception):
                mark_failed(self._span, exc)
            self._opened.__exit__(kind, exc, tb)


@contextmanager
def _failures(opened: AbstractContextManager[Span]) -> Iterator[Span]:
    """The span, marked as an error when the message ends in one (`tracing.mark_failed`)."""
    with opened as span:
        try:
            yield span
        except Exception as exc:
            mark_failed(span, exc)
            raise


# -- W3C trace context on plain dicts ------------------------------------------------------------
def header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    """A header's value from Starlette's case-insensitive headers or a plain dict (any case)."""
    if not headers:
        return None
    value = headers.get(name)
    if value is None and not hasattr(headers, "getlist"):  # a plain dict: match the name's case
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == name), None)
    return value if isinstance(value, str) else None


def carrier(params: Mapping[str, Any] | None, headers: Mapping[str, Any] | None = None
            ) -> dict[str, str]:
    """The caller's trace context as a `{traceparent, tracestate}` carrier: from `params._meta`
    when it holds a valid traceparent, else from the HTTP headers; `{}` when neither does."""
    meta = params.get(META) if isinstance(params, Mapping) else None
    for source in (meta if isinstance(meta, Mapping) else None, headers):
        found = _valid(header(source, TRACEPARENT), header(source, TRACESTATE))
        if found:
            return found
    return {}


def incoming_context(params: Mapping[str, Any] | None, headers: Mapping[str, Any] | None = None
                     ) -> Context | None:
    """The caller's context to continue (parent of the server span), or None when the call
    carries no valid trace context (the span then nests under whatever is current)."""
    found = carrier(params, headers)
    if not found:
        return None
    # Imported here: the propagators' entry points are read at import (1.4 MB of a gateway's
    # memory), and a call with no trace context never needs them.
    from opentelemetry import propagate

    context = propagate.extract(found)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def current_carrier() -> dict[str, str]:
    """The current span's context as a carrier (`{}` when no span is current: tracing off)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    from opentelemetry import propagate

    out: dict[str, str] = {}
    propagate.inject(out)
    return _valid(out.get(TRACEPARENT), out.get(TRACESTATE))


def upstream_params(params: Mapping[str, Any], incoming_headers: Mapping[str, Any] | None = None
                    ) -> dict[str, Any]:
    """`params` to forward upstream, with `_meta.traceparent` (and `tracestate`) of the current
    span. Without a current span (tracing off) the caller's context is passed on as it came:
    `_meta` untouched, or the caller's `traceparent` header moved into `_meta`."""
    found = current_carrier() or carrier(params, incoming_headers)
    meta = params.get(META)
    if not found or (isinstance(meta, Mapping) and all(meta.get(k) == v for k, v in found.items())):
        return dict(params)
    kept = {k: v for k, v in meta.items() if k not in (TRACEPARENT, TRACESTATE)} \
        if isinstance(meta, Mapping) else {}
    return {**params, META: {**kept, **found}}


def upstream_headers(params: Mapping[str, Any] | None = None,
                     incoming_headers: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The `traceparent` (and `tracestate`) headers for a request to an HTTP upstream: the current
    span's, else the caller's own (from `params._meta` or its headers), else none."""
    return current_carrier() or carrier(params, incoming_headers)


def message_headers(body: bytes) -> dict[str, str]:
    """The `traceparent` (and `tracestate`) headers for an HTTP request carrying this JSON-RPC
    message: its own `params._meta` context, so the header and `_meta` always agree; `{}` when
    it carries none (one substring test for most messages)."""
    if b'"traceparent"' not in body:
        return {}
    try:
        message = json.loads(body)
    except ValueError:
        return {}
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get(META) if isinstance(params, dict) else None
    return carrier({META: meta}) if isinstance(meta, dict) else {}


def _valid(traceparent: str | None, tracestate: str | None) -> dict[str, str]:
    if traceparent is None or not _TRACEPARENT.fullmatch(traceparent):
        return {}
    if tracestate is not None and tracestate and _TRACESTATE.fullmatch(tracestate):
        return {TRACEPARENT: traceparent, TRACESTATE: tracestate}
    return {TRACEPARENT: traceparent}
