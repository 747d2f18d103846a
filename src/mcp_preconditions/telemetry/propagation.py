"""W3C trace context on plain dicts: read the caller's (`params._meta.traceparent`, SEP-414 and
2026-07-28, else the HTTP `traceparent` header) and write ours into what goes upstream (`_meta` of
the forwarded params, and headers for an HTTP upstream). Raw JSON-RPC params in, new dicts out.

Values are checked against the W3C format before they are trusted or copied into a header.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.context import Context

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
META = "_meta"
# W3C Trace Context: version-traceid-parentid-flags, lowercase hex; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{0,512}")  # printable ASCII: never a new header line


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
