"""A response of one of the gateway's servers whose head has arrived: its body read once, whole (at
most `Bounds.body`) or as a stream of pieces whose reading pauses while more than a megabyte waits
for its reader (an event stream is bounded per event by the SSE decoder instead). Fed by the
connection that parses it (`client.py`).

A stream whose reader has what it wanted (a request's answer on its event stream) is drained: the
rest is discarded unread as it comes, and the connection goes back to the pool when the response
ends within DRAIN_BYTES and DRAIN_SECONDS; past either it is closed. Nothing drained reaches anyone.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

from ..errors import UpstreamClosed, UpstreamTooLarge

_STREAM_HIGH, _STREAM_LOW = 1 << 20, 1 << 18  # buffered bytes of a stream: pause / resume reading

Later = Callable[[float, Callable[[], None]], asyncio.TimerHandle]  # when a drain is given up

DRAIN_BYTES = 64 << 10
"""What may follow a request's answer on its stream before its connection is closed instead of
kept. A server that has answered ends the stream (a zero-size chunk), at most after a keep-alive
comment or a stray notification: a few hundred bytes. Past 64 KiB the server is still talking, and
reading on costs more than the handshake a new connection takes. Counted in bytes, not events: an
event is at least a few bytes, and nothing drained is decoded."""

DRAIN_SECONDS = 1.0
"""How long the rest of a request's stream is waited for after its answer before its connection is
closed instead of kept. The SDKs' servers end the stream in the write after the answer
(milliseconds); a second leaves a loaded server room, and a connection is worth no more than its
handshake. A draining connection is in nobody's way meanwhile: it counts against no caller's share,
and is closed the moment a request needs its place in the pool (`Pool.drain`)."""


@dataclass(frozen=True)
class Bounds:
    """What one server's response may hold: a whole body, the head, and (read by the SSE decoder)
    one event and one line of a stream."""

    body: int = 64 << 20
    event: int = 4 << 20
    line: int = 4 << 20
    head: int = 64 << 10


DEFAULT_BOUNDS = Bounds()


class Carrier(Protocol):
    """The connection a response arrives on."""

    bounds: Bounds
    closed: bool

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...

    def draining(self) -> None:
        """The response's reader is done: the connection is kept if the response ends in time."""


class Response:
    """A response whose head has arrived. Its body is read once: whole (`read`, at most
    `Bounds.body`) or in pieces as they come (`stream`). `close` gives up on the rest (the
    connection is closed, unless the body was already complete); `drain` discards the rest, to
    keep the connection if it ends within DRAIN_BYTES."""

    def __init__(self, connection: Carrier, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection
        self._parts: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._total = 0
        self._whole = False  # read whole: never paused
        # Bounded by Bounds.body unless it is an event stream (read in pieces: the SSE decoder
        # bounds each event; the stream may last as long as the session).
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        self._bounded = kind != "text/event-stream"
        self.complete = False
        self._error: BaseException | None = None
        self._wake: asyncio.Future[None] | None = None
        self._drained = -1  # bytes discarded since `drain` (-1: not draining)

    # -- fed by the connection ---------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if self._drained >= 0:
            self._drained += len(data)
            if self._drained > DRAIN_BYTES:
                raise UpstreamTooLarge(f"over {DRAIN_BYTES} bytes after the answer: not kept")
            return
        self._parts.append(data)
        self._buffered += len(data)
        self._total += len(data)
        if (self._bounded or self._whole) and self._total > self._connection.bounds.body:
            raise UpstreamTooLarge(f"a response body over {self._connection.bounds.body} bytes")
        if not self._whole and self._buffered > _STREAM_HIGH:
            self._connection.pause()
        self._signal()

    def _end(self, error: BaseException | None = None) -> None:
        if self.complete or self._error is not None:
            return
        if error is None:
            self.complete = True
        else:
            self._error = error
        self._signal()

    def _signal(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _next(self) -> bool:
        """Wait until there is a piece, the end, or an error; False at the end."""
        while not self._parts:
            if self._error is not None:
                raise self._error
            if self.complete:
                return False
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None
        return True

    # -- read by its reader ------------------------------------------------------------------------
    async def read(self) -> bytes:
        """The whole body (UpstreamTooLarge past `Bounds.body`)."""
        self._whole = True
        try:
            if self._total > self._connection.bounds.body:
                raise UpstreamTooLarge(f"a response body over {self._connection.bounds.body} bytes")
            self._connection.resume()
            while not self.complete:
                if self._error is not None:
                    raise self._error
                self._wake = asyncio.get_running_loop().create_future()
                try:
                    await self._wake
                finally:
                    self._wake = None
        except BaseException:
            self.close()
            raise
        parts, self._parts = self._parts, collections.deque()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def pieces(self) -> list[bytes]:
        """A complete body's pieces, at once (nothing to wait for: `complete` is true)."""
        if not self.complete:
            raise RuntimeError("the body is not complete")
        parts, self._parts = list(self._parts), collections.deque()
        self._buffered = 0
        return parts

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """The body's pieces as they arrive; reading pauses while more than a megabyte waits."""
        try:
            while await self._next():
                part = self._parts.popleft()
                self._buffered -= len(part)
                if self._buffered < _STREAM_LOW:
                    self._connection.resume()
                yield part
        finally:
            self.close()

    def drain(self) -> None:
        """The reader has what it wanted: the rest is discarded as it comes (what waits unread
        counts too), and the connection is kept if the body ends within DRAIN_BYTES (the
        connection closes it past DRAIN_SECONDS). A body that ends only with its connection
        cannot leave it reusable: closed at once."""
        if self.complete or self._error is not None or self._drained >= 0 or self._connection.closed:
            return
        framed = "content-length" in self.headers or "transfer-encoding" in self.headers
        if not framed or "close" in self.headers.get("connection", "").lower() \
                or self._buffered > DRAIN_BYTES:
            self.close()
            return
        self._drained = self._buffered
        self._parts.clear()
        self._buffered = 0
        self._connection.resume()
        self._connection.draining()

    def close(self) -> None:
        """Give up on the rest of the body: unless it is complete or draining, the connection is
        closed."""
        if not self.complete and self._drained < 0:
            self._end(UpstreamClosed("the response was abandoned"))
            self._connection.close()
