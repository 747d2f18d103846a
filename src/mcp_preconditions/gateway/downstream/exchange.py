"""One request and its response on a connection of the gateway's HTTP listener, both sides of the
ASGI boundary.

The server's side: the ASGI `receive` (the body as it arrives, then `http.disconnect` once the
answer is sent or the client went) and `send` (the response framed for HTTP/1.1: the app's
Content-Length kept, else chunked, else, for HTTP/1.0, delimited by closing the connection; nothing
after the head for HEAD, 204 and 304). The head is held until the body's first bytes, or the loop's
next step, so an answer goes out in one write (one system call, one packet for the client to wake
up to).

The app's side (streamable HTTP at the gateway's endpoint): request headers by name, the body
(bounded), Accept, and responses written as raw ASGI messages (errors as JSON-RPC bodies). The
Host/Origin checks are `rebinding.py`'s; the MCP header-value codec is `gateway/inbound.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import re
from collections.abc import Mapping
from typing import Any, Protocol

from ...decisions import write_held
from .. import jsonrpc
from ..jsonrpc import RpcError
from .sse import Receive, Send

log = logging.getLogger(__name__)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
INTERNAL_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
                  b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error")
# A header name is a token (RFC 9110 §5.6.2); a value has no CR, LF or NUL (nor other controls
# but tab): what the app sends is never allowed to split the response.
_BAD_NAME = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DISCONNECT = {"type": "http.disconnect"}


class Carrier(Protocol):
    """What an exchange needs of the connection it came on (http11.py's `Connection`): its loop,
    writes (and whether they are paused), and to be told when the body was taken or the answer
    is whole."""

    loop: asyncio.AbstractEventLoop
    write_paused: bool

    def abort(self) -> None: ...

    def write(self, data: bytes) -> None: ...

    async def drained(self) -> None: ...

    def body_taken(self) -> None: ...

    def responded(self, exchange: Exchange) -> None: ...


class Exchange:
    """A request's state from its headers to the end of its answer. The connection feeds the body
    (`feed`, `ended`) and says when the client went (`lost`); the app reads and answers through
    `receive` and `send` (run by `run`)."""

    __slots__ = (
        "_chunked",
        "_connection",
        "_continue",
        "_delivered",
        "_held",
        "_left",
        "_silent",
        "_waiters",
        "body",
        "complete",
        "finished",
        "gone",
        "head_only",
        "keep_alive",
        "scope",
        "started",
    )

    def __init__(self, connection: Carrier, scope: dict[str, Any], *, keep_alive: bool,
                 expect_continue: bool) -> None:
        self._connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        self.head_only = scope["method"] == "HEAD"
        self._continue = expect_continue
        self.body: list[bytes] = []
        self.complete = False  # the whole body is in
        self._delivered = False  # the app has read the end of the body
        self.gone = False  # the client went before the answer was sent
        self.started = self.finished = False
        self._waiters: list[asyncio.Future[None]] = []  # receives waiting (a watcher may be one)
        self._held: bytes | None = None
        self._chunked = False
        self._silent = self.head_only  # nothing goes after the head (HEAD, 1xx, 204, 304)
        self._left: int | None = None  # body bytes the Content-Length announced and still due

    # -- what the connection reads ---------------------------------------------------------------
    def feed(self, part: bytes) -> None:
        self.body.append(part)
        self._wake()

    def ended(self) -> None:
        self.complete = True
        self._wake()

    def lost(self) -> None:
        self.gone = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- the app ---------------------------------------------------------------------------------
    async def run(self, app: Any) -> None:
        """Serve this request with `app`; an app that fails is logged, answered 500 if it had not
        answered yet, else its connection closed (its answer cut short)."""
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            self._connection.abort()
            raise
        except Exception:
            log.exception("the HTTP app failed on %s %s", self.scope["method"], self.scope["path"])
            self._failed()
        else:
            if not self.finished and not self.gone:
                log.error("the HTTP app returned without a whole answer to %s %s",
                          self.scope["method"], self.scope["path"])
                self._failed()

    def _failed(self) -> None:
        if not self.started and not self.gone:
            self.started = self.finished = True
            self.keep_alive = False
            self._connection.write(INTERNAL_ERROR)
            self._connection.responded(self)
        else:
            self._connection.abort()

    async def receive(self) -> dict[str, Any]:
        """The next part of the body; once it is all read, `http.disconnect` when the answer is
        sent or the client has gone (until then it waits)."""
        while True:
            if self.gone or self.finished:
                return _DISCONNECT
            if self.body or (self.complete and not self._delivered):
                body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
                self.body = []
                self._delivered = self.complete
                if not self.complete:
                    self._connection.body_taken()
                return {"type": "http.request", "body": body, "more_body": not self.complete}
            if self._continue and not self.started:  # the client waits for a word to send it
                self._continue = False
                self._connection.write(CONTINUE)
            waiter = self._connection.loop.create_future()
            self._waiters.append(waiter)
            await waiter

    async def send(self, message: dict[str, Any]) -> None:
        if self.gone:
            return
        if self._connection.write_paused:
            await self._connection.drained()
            if self.gone:
                return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind!r}")
            self._start(message["status"], message.get("headers", ()))
        elif not self.finished:
            if kind != "http.response.body":
                raise RuntimeError(f"expected http.response.body, got {kind!r}")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"{kind!r} sent after the answer was complete")

    def _start(self, status: int, headers: Any) -> None:
        head = [STATUS_LINES[status]]
        closing = False
        for name, value in headers:
            if _BAD_NAME.search(name) is not None or _BAD_VALUE.search(value) is not None:
                raise RuntimeError("a response header with a character HTTP does not allow")
            lowered = name.lower()
            if lowered == b"content-length":
                self._left = int(value)
            elif lowered == b"transfer-encoding":
                raise RuntimeError("the app frames no body: the listener does")
            elif lowered == b"connection" and b"close" in value.lower():
                closing = True
            head += (name, b": ", value, b"\r\n")
        self._silent = self._silent or status < 200 or status in (204, 304)
        if self._silent:
            self._left = None
        elif self._left is None:
            if self.scope["http_version"] == "1.1":
                self._chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
            else:  # an HTTP/1.0 client reads a body of unknown length to the connection's end
                self.keep_alive = False
        if not self.complete:  # answered before its whole body: what is left is never read
            self.keep_alive = False
        if not self.keep_alive and not closing:
            head.append(b"connection: close\r\n")
        self.keep_alive = self.keep_alive and not closing
        head.append(b"\r\n")
        self.started = True
        self._held = b"".join(head)
        self._connection.loop.call_soon(self._flush)

    def _body(self, body: bytes, more: bool) -> None:
        if self._silent:
            data = b""
        elif self._chunked:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            data = body
            if self._left is not None:
                self._left -= len(body)
                if self._left < 0:
                    raise RuntimeError("the body is longer than its Content-Length")
        held, self._held = self._held, None
        if held is not None:
            data = held + data
        if data:
            self._connection.write(data)
        if not more:
            if self._left:
                raise RuntimeError("the body is shorter than its Content-Length")
            self.finished = True
            self._wake()
            self._connection.responded(self)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self.gone:
            self._connection.write(held)


def write(transport: asyncio.WriteTransport, data: bytes) -> None:
    """Write to a client: the decision records made so far go out first (no caller has its answer
    before its decision is on record)."""
    write_held()
    transport.write(data)


__all__ = ["CONTINUE", "INTERNAL_ERROR", "STATUS_LINES", "Exchange", "write"]


# -- the app's side ------------------------------------------------------------------------------
MAX_BODY = 4 * 1024 * 1024


class Headers(dict[str, str]):
    """Request headers by lowercase name. `getlist` tells readers that expect case-insensitive
    headers (`telemetry.gateway.header`) that a lowercase lookup is enough."""

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

