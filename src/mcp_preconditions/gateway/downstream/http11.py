"""One client connection to the gateway's HTTP listener, parsed by llhttp through httptools' public
`HttpRequestParser` (strict RFC 9112: a malformed request line or header, Transfer-Encoding with
Content-Length, bad chunk framing are its errors, answered 400). Requests become ASGI `http` scopes
served one at a time: a pipelined request waits, with reading paused, until the one before it is
answered. Who may connect, and the deadlines, are `admission.py`'s; the framing of one answer is
`exchange.py`'s. Only what llhttp does not do is written here (docs/gateway-performance.md).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from typing import Any
from urllib.parse import unquote

import httptools

from ..errors import HttpRefused
from .admission import Admission
from .exchange import Exchange, write

MAX_HEAD = 64 * 1024  # a request line and headers, in bytes; more is answered 431
HIGH_WATER = 64 * 1024  # body bytes read ahead of the app before reading pauses
# What a connection beyond the cap reads before it is closed.
OVER_CAPACITY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                 b"content-length: 19\r\nconnection: close\r\n\r\nService Unavailable")
BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
               b"content-length: 11\r\nconnection: close\r\n\r\nBad Request")
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
                  b"charset=utf-8\r\ncontent-length: 31\r\nconnection: close\r\n\r\n"
                  b"Request Header Fields Too Large")
# The request line a connection over the cap may send, and how much is read to find it.
_HEALTH_LINE = re.compile(rb"(?:GET|HEAD) /(?:healthz|readyz)(?:\?[!-~]*)? HTTP/1\.[01]\r\n")
_LINE_BYTES = 256
_ASGI = {"version": "3.0", "spec_version": "2.3"}


def health_check(start: bytes) -> bool | None:
    """Whether a request starting with these bytes asks `/healthz` or `/readyz`; None while its
    request line is not complete yet."""
    end = start.find(b"\r\n")
    if end < 0:
        return None if len(start) < _LINE_BYTES else False
    return _HEALTH_LINE.match(start, 0, end + 2) is not None


class Listener:
    """What the connections of one listener share: the app, admission, the loop, the address it
    listens on, and the connections and request tasks alive (for a shutdown)."""

    def __init__(self, app: Any, admission: Admission, loop: asyncio.AbstractEventLoop,
                 server: tuple[str, int] | None = None) -> None:
        self.app = app
        self.admission = admission
        self.loop = loop
        self.server = server
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False  # shutting down: each connection closes after its answer


class Connection(asyncio.Protocol):
    """An HTTP/1.1 connection: parser callbacks in, exchanges out, one served at a time."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.loop = listener.loop
        self.address: str | None = None
        self.write_paused = False
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._client: tuple[str, int] | None = None
        self._queue: deque[Exchange] = deque()  # requests read and not yet answered; [0] is served
        self._parsing: Exchange | None = None  # the one whose body is being read
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head = 0  # bytes of the request head read so far (bounded by MAX_HEAD)
        self._gate: bytes | None = None  # the start of a request over the cap, until it is judged
        self._last = False  # after this request, the connection closes
        self._reading_paused = False
        self._drain: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self._client = (str(peer[0]), int(peer[1]))
            self.address = self._client[0]
        admitted = self.listener.admission.admit(self)
        if admitted == "refused":  # over the cap and the reserve: no fd held for long
            transport.write(OVER_CAPACITY)
            transport.close()
            return
        self.listener.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            if self._gate is not None or (self._parsing is None and not self._queue and
                                          self._head == 0 and self.listener.admission.gated(self)):
                data = self._judged(data)
                if not data:
                    return
            if self._parsing is None:  # a request's head: counted until it is complete
                self._head += len(data)
            self._parser.feed_data(data)
            if self._parsing is None and self._head > MAX_HEAD:
                raise HttpRefused(HEAD_TOO_LARGE)
        except HttpRefused as refused:
            self._refuse(refused.answer)
        except httptools.HttpParserUpgrade:
            self._stop_reading()  # what follows an Upgrade is not HTTP/1.1: answered, then closed
        except httptools.HttpParserError as exc:
            context = exc.__context__
            self._refuse(context.answer if isinstance(context, HttpRefused) else BAD_REQUEST)

    def eof_received(self) -> bool | None:
        return None  # the transport closes: a client that half-closes has gone

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.admission.gone(self)
        self.listener.connections.discard(self)
        for exchange in self._queue:
            exchange.lost()
        if self._parsing is not None:
            self._parsing.lost()
        self.write_paused = False
        self._release_writers()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._release_writers()

    # -- what admission, the exchanges and the listener call -------------------------------------
    def expire(self) -> None:
        """A deadline passed, or a newcomer needs the slot: closed, without an answer."""
        self.abort()

    def abort(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self.listener.admission.gone(self)

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            write(self._transport, data)

    async def drained(self) -> None:
        if self.write_paused:
            if self._drain is None:
                self._drain = self.loop.create_future()
            await asyncio.shield(self._drain)

    def body_taken(self) -> None:
        """The app read the body so far: read on (reading paused at HIGH_WATER)."""
        if self._reading_paused and len(self._queue) <= 1:
            self._resume_reading()

    def responded(self, exchange: Exchange) -> None:
        """`exchange` (the one served) has its whole answer: the next request, if any, is served;
        the connection closes when either side asked, or the body was not all read."""
        admission = self.listener.admission
        admission.done(self)
        if self._queue and self._queue[0] is exchange:
            self._queue.popleft()
        if (not exchange.keep_alive or not exchange.complete or self._last
                or self.listener.closing or self._transport is None):
            self._close()
            return
        if self._queue:
            self._serve(self._queue[0])
        else:
            admission.waiting(self)
        if len(self._queue) <= 1:
            self._resume_reading()

    def shutdown(self) -> None:
        """The listener stops: an idle connection closes now, a busy one after its answer."""
        if not self._queue:
            self._close()

    # -- parser callbacks (llhttp, through httptools) --------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if len(self._url) + sum(len(n) + len(v) + 4 for n, v in self._headers) > MAX_HEAD:
            raise HttpRefused(HEAD_TOO_LARGE)
        self._head = 0
        parser = self._parser
        version = parser.get_http_version()
        url = self._url
        if url[:1] == b"/":
            raw_path, _, query = url.partition(b"?")
            raw_path = raw_path.partition(b"#")[0]
        else:  # absolute form, or `*`
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                raise HttpRefused(BAD_REQUEST) from None
            raw_path, query = parsed.path or b"/", parsed.query or b""
        try:
            path = raw_path.decode("ascii")
        except UnicodeDecodeError:
            raise HttpRefused(BAD_REQUEST) from None
        scope = {"type": "http", "asgi": _ASGI, "http_version": version, "scheme": "http",
                 "method": parser.get_method().decode("ascii"),
                 "path": unquote(path) if "%" in path else path,
                 "raw_path": raw_path, "query_string": query, "root_path": "",
                 "headers": self._headers, "server": self.listener.server, "client": self._client,
                 "state": {}}
        expect = version == "1.1" and (b"expect", b"100-continue") in self._headers
        exchange = Exchange(self, scope, keep_alive=parser.should_keep_alive() and not self._last,
                            expect_continue=expect)
        self._parsing = exchange
        self._queue.append(exchange)
        if len(self._queue) == 1:
            self._serve(exchange)
        else:  # pipelined: it waits for the answers before it, and nothing more is read till then
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self._parsing
        if exchange is not None and not exchange.finished:
            exchange.feed(body)
            if sum(map(len, exchange.body)) > HIGH_WATER:
                self._pause_reading()

    def on_message_complete(self) -> None:
        exchange, self._parsing = self._parsing, None
        if exchange is not None:
            exchange.ended()
            if self._queue and self._queue[0] is exchange:
                self.listener.admission.body_done(self)
        if self._last:
            self._pause_reading()  # its last request is read: nothing after it will be

    # -- inside ----------------------------------------------------------------------------------
    def _serve(self, exchange: Exchange) -> None:
        admission = self.listener.admission
        admission.busy(self)
        if not exchange.complete:
            admission.body_pending(self)
        task = self.loop.create_task(exchange.run(self.listener.app))
        tasks = self.listener.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _judged(self, data: bytes) -> bytes:
        """A request that may only be a health check, judged on its request line: the bytes to
        parse once it is one (then it is the connection's last), else HttpRefused."""
        start = (self._gate or b"") + data
        verdict = health_check(start)
        if verdict is None:
            self._gate = start
            return b""
        self._gate = None
        if not verdict:
            self.listener.admission.refused("over_cap")
            raise HttpRefused(OVER_CAPACITY)
        self._last = True
        return start

    def _refuse(self, answer: bytes) -> None:
        """Answer `answer` and close, unless an answer is under way: then it is cut short."""
        if self._queue and self._queue[0].started:
            self.abort()
            return
        for exchange in self._queue:
            exchange.lost()
        self._queue.clear()
        self.write(answer)
        self._close()

    def _stop_reading(self) -> None:
        self._last = True
        if not self._queue:
            self._close()

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self.listener.admission.gone(self)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._transport.is_closing():
            self._reading_paused = False
            self._transport.resume_reading()

    def _release_writers(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)


__all__ = ["BAD_REQUEST", "HEAD_TOO_LARGE", "MAX_HEAD", "OVER_CAPACITY", "Connection", "Listener",
           "health_check"]
