"""The gateway's HTTP/1.1 client for its streamable-HTTP servers, parsing responses with llhttp
(httptools) in its strict default (RFC 9112): a malformed status line, a Content-Length that is not
one non-negative integer, Transfer-Encoding with Content-Length, bad chunk framing or any byte the
gateway did not ask for fails that request and closes its connection, which is never reused.

Keep-alive connections in a pool capped per server, of which one caller's requests hold at most
half (`Pool.share`: one greedy caller never holds every connection); one write per request, and a
request that may have been written is never sent again. A kept connection is used only while the
server keeps it (its `Keep-Alive: timeout`, else IDLE_SECONDS, under the servers' usual five); one
the server closed is seen before anything is written on it, one read as far as wanted once drained in
bounds (`Response.drain`). Bodies are bounded (`Bounds`) and read in bounded pieces (`response.py`).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import re
import ssl
import urllib.parse
from collections.abc import Hashable, Mapping

import httptools

from ..errors import UpstreamClosed, UpstreamProtocolError, UpstreamTooLarge, UpstreamUnavailable
from .response import DEFAULT_BOUNDS, DRAIN_SECONDS, Bounds, Later, Response

IDLE_SECONDS = 4.0  # uvicorn and Node close an idle keep-alive connection after 5 s
CONNECT_SECONDS = 10.0
MAX_CONNECTIONS = 100  # per server: requests beyond this wait for a connection
_KEEP_ALIVE = re.compile(r"(?:^|[\s,;])timeout\s*=\s*(\d+)", re.IGNORECASE)
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def field_problem(name: str, value: str) -> str | None:
    """Why `name: value` cannot be an HTTP header (a name that is no token; a value holding CR, LF,
    NUL or another control character, which could write headers of its own), or None."""
    if not _FIELD_NAME.fullmatch(name):
        return "not an HTTP header name"
    if not (_FIELD_VALUE.fullmatch(value) if len(value) < _LONG else _long_value_ok(value)):
        return "its value holds CR, LF, NUL or another control character"
    return None


_LONG = 128  # a value this long is judged once (a caller's exchanged JWT, ~1 KB, on every request)


@functools.lru_cache(maxsize=1024)
def _long_value_ok(value: str) -> bool:
    """`_FIELD_VALUE` on a long value, remembered: a str is immutable and its hash kept, so the
    same credential's next request costs a lookup, not a scan of its ~1 KB (~14k instructions)."""
    return _FIELD_VALUE.fullmatch(value) is not None


class _Connection(asyncio.Protocol):
    """One connection to the server, its bytes parsed as they arrive. It carries one exchange at a
    time; whatever the server sends outside one ends it."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.bounds = pool.bounds
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_until = math.inf  # when a kept connection is retired unused
        self.held = False  # handed to a request, until its exchange is over (or it closes)
        self.owner: Hashable | None = None  # whose request holds it (None: the gateway's own)
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Response] | None = None  # an exchange waiting for its head
        self._response: Response | None = None  # the response being read
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._interim = False  # a 1xx head: skipped
        self._failure: BaseException | None = None
        self._paused = False

    # -- asyncio.Protocol --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._head is None and self._response is None:
            self.fail(UpstreamProtocolError("the server sent bytes no request asked for"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(UpstreamProtocolError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            cause = self._failure or exc.__context__
            self.fail(cause if isinstance(cause, UpstreamProtocolError)
                      else UpstreamProtocolError(f"malformed response: {exc}"))

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        response = self._response
        if response is not None and self._head is None and _until_close(response):
            self._response = None
            response._end()  # a body delimited by the connection's end is complete now
        self.fail(UpstreamClosed("the server closed the connection"))

    # -- llhttp callbacks --------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._head is None and self._response is None:
            raise self._refuse(UpstreamProtocolError("the server sent a response no request asked for"))
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self.bounds.head:
            raise self._refuse(UpstreamTooLarge(f"a response head over {self.bounds.head} bytes"))
        self._headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._head_bytes = 0
        if 100 <= status < 200:  # 100 Continue and the like: the final response follows
            self._interim = True
            return
        if self._parser.get_http_version() not in ("1.1", "1.0"):
            raise self._refuse(UpstreamProtocolError("not an HTTP/1.1 response"))
        coding = self._headers.get("transfer-encoding")
        if coding is not None and coding.strip().lower() != "chunked":
            raise self._refuse(UpstreamProtocolError(f"unsupported transfer-encoding {coding!r}"))
        head, self._head = self._head, None
        assert head is not None  # on_message_begin checked that an exchange waits
        response = self._response = Response(self, status, self._headers)
        if status in (204, 304) and ("content-length" in self._headers or coding is not None):
            self.idle_until = -math.inf  # framing it should not have: served, then not reused
        if not head.done():
            head.set_result(response)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            try:
                response._feed(body)
            except UpstreamTooLarge as exc:
                raise self._refuse(exc) from None

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        response, self._response = self._response, None
        keep = self._parser.should_keep_alive()
        self.resume()  # the body is whole: a reader still behind holds it, not the connection
        if response is not None:
            response._end()
            if keep:
                self.pool.release(self, response.headers.get("keep-alive"))
                return
        self.close()

    # -- the exchange ------------------------------------------------------------------------------
    async def exchange(self, data: bytes) -> Response:
        """Write one request (once) and return its response when the head has arrived."""
        assert self.transport is not None
        head: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._head = head
        self.transport.write(data)
        try:
            return await head
        except BaseException:
            self.close()  # cancelled or failed: its response may still come, so never reuse it
            raise

    def usable(self, now: float) -> bool:
        return not self.closed and now < self.idle_until and self.transport is not None \
            and not self.transport.is_closing()

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def draining(self) -> None:
        self.pool.drain(self)  # (never closed: a response of a closed one is not drained)

    def _refuse(self, error: UpstreamProtocolError) -> UpstreamProtocolError:
        """Remember why a callback stopped the parser (llhttp reports only that one did)."""
        self._failure = error
        return error

    def fail(self, error: BaseException) -> None:
        """End the connection: whatever waits on it gets `error`."""
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        response, self._response = self._response, None
        if response is not None:
            response._end(error)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.close()


def _until_close(response: Response) -> bool:
    """Whether a response's body ends when the connection does (no length, not chunked)."""
    return "content-length" not in response.headers and "transfer-encoding" not in response.headers \
        and response.status not in (204, 304)


class Pool:
    """Keep-alive connections to one origin, at most `limit` open at once, of which one owner's
    requests hold at most `share` (half: SPEC §14, a server's pooled connections). A request over
    either bound waits, first come first served among those that may go (never for a drain)."""

    def __init__(self, url: str, *, bounds: Bounds = DEFAULT_BOUNDS, limit: int = MAX_CONNECTIONS,
                 tls: ssl.SSLContext | None = None, later: Later | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        https = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (443 if https else 80) == self.port
        self.authority = parts.netloc.rsplit("@", 1)[-1] if not default else self.host
        self.bounds = bounds
        self.limit = limit
        self.share = max(1, limit // 2)
        self._tls = tls if tls is not None or not https else _client_tls()
        self._idle: list[_Connection] = []
        self._draining: dict[_Connection, asyncio.TimerHandle] = {}  # oldest first: -> its end
        self._later = later  # schedules a drain's end: the loop's `call_later`, or a fake clock's
        self._open = 0
        self._held: dict[Hashable, int] = {}  # connections each owner's requests hold now
        self._waiting: collections.deque[tuple[Hashable | None, asyncio.Future[None]]] = \
            collections.deque()

    def encode(self, method: str, headers: Mapping[str, str], body: bytes = b"") -> bytes:
        """The request's bytes; ValueError for a header that cannot be written safely."""
        lines = [f"{method} {self.path} HTTP/1.1\r\nhost: {self.authority}\r\n"]
        for name, value in headers.items():
            problem = field_problem(name, value)
            if problem is not None:
                raise ValueError(f"header {name!r}: {problem}")
            lines.append(f"{name}: {value}\r\n")
        if body or method in ("POST", "PUT"):
            lines.append(f"content-length: {len(body)}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1") + body

    async def request(self, method: str, headers: Mapping[str, str], body: bytes = b"",
                      owner: Hashable | None = None) -> Response:
        """Send one request (of `owner`'s: a caller; None: the gateway's own); its response once
        the head has arrived. Raises ValueError (a header refused: nothing is sent),
        UpstreamUnavailable (no connection could be made: nothing was sent), and once it may have
        been sent UpstreamProtocolError or UpstreamClosed; it is never sent again."""
        data = self.encode(method, headers, body)
        connection = await self._connection(owner)
        return await connection.exchange(data)

    def held_by(self, owner: Hashable) -> int:
        """How many connections `owner`'s requests hold now."""
        return self._held.get(owner, 0)

    async def _connection(self, owner: Hashable | None) -> _Connection:
        loop = asyncio.get_running_loop()
        held = self._held
        while True:
            if owner is None or held.get(owner, 0) < self.share:
                now = loop.time()
                while self._idle:
                    kept = self._idle.pop()
                    if kept.usable(now):
                        kept.idle_until = math.inf
                        kept.held = True
                        if owner is not None:  # (inline: every request of a caller's)
                            held[owner] = held.get(owner, 0) + 1
                            kept.owner = owner
                        return kept
                    kept.close()
                if self._open >= self.limit and self._draining:  # a drain is in nobody's way
                    next(iter(self._draining)).close()
                if self._open < self.limit:
                    self._open += 1
                    if owner is not None:  # counted before connecting: never overdrawn
                        held[owner] = held.get(owner, 0) + 1
                    try:
                        connection = await self._connect(loop)
                    except BaseException:
                        self._open -= 1
                        if owner is not None:
                            self._give_back(owner)
                        self._wake()
                        raise
                    connection.held = True
                    connection.owner = owner
                    return connection
            entry = (owner, loop.create_future())
            self._waiting.append(entry)
            try:
                await entry[1]
            finally:
                if entry in self._waiting:
                    self._waiting.remove(entry)

    def _give_back(self, owner: Hashable) -> None:
        left = self._held[owner] - 1
        if left:
            self._held[owner] = left
        else:
            del self._held[owner]

    def _unheld(self, connection: _Connection) -> None:
        """`connection`'s exchange is over (kept, or closed): its owner holds one fewer."""
        if (drained := self._draining.pop(connection, None)) is not None:
            drained.cancel()  # its response ended in time (kept), or it closed
        if connection.held:
            connection.held = False
            owner = connection.owner
            if owner is not None:
                connection.owner = None
                self._give_back(owner)

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self), self.host, self.port, ssl=self._tls,
                    server_hostname=self.host if self._tls is not None else None)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise UpstreamUnavailable(f"cannot connect to {self.authority}: "
                                      f"{exc or type(exc).__name__}") from None
        return connection

    def drain(self, connection: _Connection) -> None:
        """Its reader is done, its response not: nobody's now; closed in DRAIN_SECONDS or for a request."""
        self._unheld(connection)
        later = self._later or asyncio.get_running_loop().call_later
        self._draining[connection] = later(DRAIN_SECONDS, connection.close)
        self._wake()

    def release(self, connection: _Connection, keep_alive: str | None) -> None:
        """A connection whose exchange is over: kept for the next request while the server keeps it."""
        self._unheld(connection)
        seconds = IDLE_SECONDS
        if keep_alive is not None and (said := _KEEP_ALIVE.search(keep_alive)) is not None:
            seconds = min(seconds, int(said[1]) - 1.0)  # a second early: the server's clock ran first
        if connection.closed or seconds <= 0 or connection.idle_until == -math.inf:
            connection.close()
            return
        connection.idle_until = asyncio.get_running_loop().time() + seconds
        self._idle.append(connection)
        self._wake()

    def forget(self, connection: _Connection) -> None:
        """A connection closed (by either side)."""
        self._unheld(connection)
        if connection in self._idle:
            self._idle.remove(connection)
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        """Wake the waiting requests that may go now, in the order they came, as many as there
        is room for: a request whose owner holds its share already waits on (it is not in the
        way of anyone else's)."""
        room = len(self._idle) + len(self._draining) + self.limit - self._open
        woken: dict[Hashable, int] = {}
        for owner, waiter in self._waiting:
            if room <= 0:
                return
            if waiter.done():
                continue
            if owner is not None:
                holds = self._held.get(owner, 0) + woken.get(owner, 0)
                if holds >= self.share:
                    continue
                woken[owner] = woken.get(owner, 0) + 1
            waiter.set_result(None)
            room -= 1

    def close(self) -> None:
        for connection in [*self._idle, *self._draining]:
            connection.close()  # (forgotten: out of both)


def _client_tls() -> ssl.SSLContext:
    from ...tls import client_context

    return client_context()


__all__ = ["DEFAULT_BOUNDS", "MAX_CONNECTIONS", "Bounds", "Pool", "Response", "field_problem"]
