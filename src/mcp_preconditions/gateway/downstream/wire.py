"""The HTTP side of streamable HTTP, for the gateway's endpoint: request headers, the body
(bounded), Accept, and responses written as raw ASGI messages (errors as JSON-RPC bodies). The
Host/Origin checks are `rebinding.py`'s; the MCP header-value codec is `gateway/inbound.py`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from .. import jsonrpc
from ..jsonrpc import RpcError
from .sse import Receive, Send

MAX_BODY = 4 * 1024 * 1024


class Headers(dict[str, str]):
    """Request headers by lowercase name. `getlist` tells readers that expect case-insensitive
    headers (`telemetry.propagation.header`) that a lowercase lookup is enough."""

    def getlist(self, name: str) -> list[str]:
        value = self.get(name.lower())
        return [] if value is None else [value]


def read_headers(raw: list[tuple[bytes, bytes]]) -> Headers:
    """Request headers by lowercase name (the first of a repeated one, as starlette reads them)."""
    out = Headers()
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key not in out:
            out[key] = value.decode("latin-1")
    return out


def accepts(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """(JSON, SSE) acceptable per the Accept header, wildcards included (RFC 7231)."""
    types = [t.strip().split(";")[0].strip().lower() for t in headers.get("accept", "").split(",")]
    anything = "*/*" in types
    return (anything or "application/json" in types or "application/*" in types,
            anything or "text/event-stream" in types or "text/*" in types)


async def read_body(receive: Receive, headers: Mapping[str, str], send: Send) -> bytes | None:
    """The whole request body, or None after a 413 for one over `MAX_BODY`."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        await text(send, 413, b"Request body too large")
        return None
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        part = message.get("body", b"")
        size += len(part)
        if size > MAX_BODY:
            await text(send, 413, b"Request body too large")
            return None
        parts.append(part)
        if not message.get("more_body", False):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def rpc_error(send: Send, status: int, error: RpcError,
                     headers: list[tuple[bytes, bytes]] | None = None, *,
                     rid: jsonrpc.RequestId | None = None) -> int:
    body = jsonrpc.dumps(jsonrpc.error(rid, error))
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
    return status


async def text(send: Send, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


async def empty(send: Send, status: int, headers: list[tuple[bytes, bytes]], *,
                 json: bool = True) -> None:
    kind = [(b"content-type", b"application/json")] if json else []
    await send({"type": "http.response.start", "status": status,
                "headers": [*kind, (b"content-length", b"0"), *headers]})
    with contextlib.suppress(Exception):
        await send({"type": "http.response.body", "body": b""})

