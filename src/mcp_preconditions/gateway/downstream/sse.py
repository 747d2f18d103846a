"""The bodies of the gateway's streamable-HTTP responses, written as raw bytes: a request answered as
one JSON body unless something must reach the client before its answer (progress, a log message, a
server's request), in which case the response becomes an SSE stream; a session's GET stream.

SSE polling (SEP-1699), the gateway's own: a call's stream in a 2025-11-25 session (`Reply` with
`polled`) begins with a priming event (an id, the `retry` delay, no data), written with the stream's
first bytes (no write of its own). The gateway closes that stream before its answer when the server
closes its own (`Reply.poll`, relayed) or when the call is still unanswered after the listener's
`poll_seconds` (`Unanswered`, off by default), whatever the server behind it. What comes for the
call after that is kept (`Backlog`: bounded) in the session (`Polled`), for the client's GET with
`Last-Event-ID`: a stream's id is its session's alone (another session, and so another principal,
finds nothing under it). A 2026-07-28 request's stream, or an older session's, has no ids: closing
one is cancelling it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from .. import jsonrpc
from ..jsonrpc import Message

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

PING_SECONDS = 15.0  # a silent stream gets a comment this often (proxies close idle reads)
# A session's streams closed for polling and kept for their client to resume: at most MAX_POLLED
# (beyond that, a server's close is not relayed: the call's answer comes on its open stream), each
# kept KEEP_SECONDS after its call ended, each holding at most MAX_BACKLOG events and
# MAX_BACKLOG_BYTES beside its answer (the oldest go first).
MAX_POLLED = 8
KEEP_SECONDS = 60.0
MAX_BACKLOG = 256
MAX_BACKLOG_BYTES = 4 << 20
RETRY_MAX_SECONDS = 10.0  # the `retry` passed on to a client, at most
RETRY_SECONDS = 0.5  # the `retry` of a priming event: a resumed GET waits for what is still to come
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
               (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]
_PING = b": ping\r\n\r\n"


def event(message: Message) -> bytes:
    return b"event: message\r\ndata: " + jsonrpc.dumps(message) + b"\r\n\r\n"


class Unanswered:
    """The replies still waiting for their answer, for one sweep every few seconds to turn those
    waiting longer than `PING_SECONDS` into kept-alive streams (a timer per request would cost
    every call). `poll_seconds`: a 2025-11-25 session's reply still unanswered that long is closed
    for polling (a timer per such reply, only when it is set)."""

    def __init__(self, poll_seconds: float | None = None) -> None:
        self.since: dict[Reply, float] = {}
        self.poll_seconds = poll_seconds

    async def keep_alive(self) -> None:
        """Run until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(PING_SECONDS / 3)
            cutoff = loop.time() - PING_SECONDS
            for reply in [r for r, since in self.since.items() if since < cutoff]:
                reply.commit()


def _milliseconds(retry: float) -> int:
    return round(min(max(retry, 0.0), RETRY_MAX_SECONDS) * 1000)


def retry_field(retry: float) -> bytes:
    """The reconnection delay alone (an event with no data: nothing is dispatched)."""
    return b"retry: %d\r\n\r\n" % _milliseconds(retry)


_PRIMED = b"retry: %d\r\ndata: \r\n\r\n" % _milliseconds(RETRY_SECONDS)  # made once: every call's


def priming(key: str, retry: float) -> bytes:
    """The event a pollable stream begins with: its id, the reconnection delay, no data."""
    tail = _PRIMED if retry == RETRY_SECONDS else b"retry: %d\r\ndata: \r\n\r\n" % _milliseconds(retry)
    return b"id: " + key.encode() + b".0\r\n" + tail


class Backlog:
    """What comes for a call after its stream was closed for polling: its events, numbered from 1,
    until its answer (the last); written to every GET that resumes the stream, as they come."""

    def __init__(self, key: str, ended: Callable[[str], None]) -> None:
        self.key = key
        self.over = False  # the answer is in (or the call ended without one)
        self._events: collections.deque[tuple[int, bytes]] = collections.deque()
        self._bytes = 0  # of the events before the answer
        self._next = 1
        self._ended = ended
        self._readers: set[asyncio.Event] = set()  # the resuming GETs', set when there is news

    def add(self, data: bytes, *, last: bool = False) -> None:
        if self.over:
            return
        self._events.append((self._next, data))
        self._next += 1
        if last:
            self.end()
            return
        self._bytes += len(data)
        while len(self._events) > MAX_BACKLOG or self._bytes > MAX_BACKLOG_BYTES:
            self._bytes -= len(self._events.popleft()[1])
        self._signal()

    def end(self) -> None:
        if not self.over:
            self.over = True
            self._ended(self.key)
            self._signal()

    def _signal(self) -> None:
        for wake in self._readers:
            wake.set()

    async def serve(self, after: int, receive: Receive, send: Send,
                    headers: list[tuple[bytes, bytes]]) -> None:
        """Write the events after number `after`, then each as it comes, until the answer is
        written (the stream ends) or the client goes."""
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*SSE_HEADERS[:3], *headers]})
        wake = asyncio.Event()
        gone = asyncio.get_running_loop().create_task(_disconnected(receive))
        gone.add_done_callback(lambda _: wake.set())
        self._readers.add(wake)
        try:
            while not gone.done():
                wake.clear()
                out = [b"id: %s.%d\r\n%s" % (self.key.encode(), n, data)
                       for n, data in self._events if n > after]
                if out:
                    after = self._events[-1][0]
                    await send({"type": "http.response.body", "body": b"".join(out),
                                "more_body": True})
                    continue
                if self.over:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                try:
                    async with asyncio.timeout(PING_SECONDS):
                        await wake.wait()
                except TimeoutError:
                    await send({"type": "http.response.body", "body": _PING, "more_body": True})
        finally:
            self._readers.discard(wake)
            gone.cancel()


class Polled:
    """One 2025-11-25 session's streams: each call's stream is named by a key (`key`: the part of
    its event ids before the dot, new for each), and those closed for polling are kept by it for as
    long as each is kept: at most MAX_POLLED, each until KEEP_SECONDS after its call ended. A
    session's alone: a GET on another session finds none of them."""

    def __init__(self) -> None:
        self._streams: dict[str, Backlog] = {}
        self._count = 0

    def key(self) -> str:
        self._count += 1
        return str(self._count)

    def open(self, key: str) -> Backlog | None:
        """The backlog of the stream named `key`, closed now; None at the bound (when every one
        kept is of a call still on)."""
        if len(self._streams) >= MAX_POLLED:
            done = next((k for k, backlog in self._streams.items() if backlog.over), None)
            if done is None:
                return None
            del self._streams[done]
        backlog = self._streams[key] = Backlog(key, self._ended)
        return backlog

    def find(self, last_event_id: str) -> tuple[Backlog, int] | None:
        """The stream a `Last-Event-ID` names, and the number of the last event the client has."""
        key, dot, number = last_event_id.strip().partition(".")
        backlog = self._streams.get(key) if dot and number.isascii() and number.isdigit() else None
        if backlog is None or len(number) > 9:
            return None
        return backlog, int(number)

    def _ended(self, key: str) -> None:
        asyncio.get_running_loop().call_later(KEEP_SECONDS, self._streams.pop, key, None)


class Reply:
    """The response to one POSTed request: `push` what belongs to the request before its answer
    (a `Sink`), `finish` with the answer. SSE from the first push on; until then either way: a
    2026-07-28 answer with nothing before it is plain JSON, a 2025-11-25 one one SSE event (the
    MCP SDK answers each POST of a session as a stream, and conformance checks that it does). A
    request still unanswered after `PING_SECONDS` becomes a stream too (kept alive). A reply of a
    2025-11-25 session (`polled`: that session's) begins with a priming event and may be closed
    for polling (`poll`): by the server's doing, or after `unanswered.poll_seconds`."""

    def __init__(self, send: Send, headers: list[tuple[bytes, bytes]], unanswered: Unanswered,
                 loop: asyncio.AbstractEventLoop, *, sse: bool = False,
                 polled: Polled | None = None) -> None:
        self._send = send
        self._polled = polled
        self._key: str | None = None  # its event ids' (once its priming event is written)
        self._retry = RETRY_SECONDS  # what its priming event says
        self._backlog: Backlog | None = None  # once closed for polling: what comes after
        self._headers = headers
        self._sse = sse
        self._queue: list[bytes] = []
        self._wake: asyncio.Event | None = None  # made with the stream, if one is needed
        self._writer: asyncio.Task[None] | None = None
        self._finished = False
        self._loop = loop
        self._unanswered = unanswered
        self._timer: asyncio.TimerHandle | None = None
        unanswered.since[self] = loop.time()
        if polled is not None and unanswered.poll_seconds is not None:
            self._timer = loop.call_later(unanswered.poll_seconds, self.poll, RETRY_SECONDS)

    @property
    def open(self) -> bool:
        return not self._finished

    @property
    def streaming(self) -> bool:
        """Whether the response has begun as a stream (its status line is sent: 200)."""
        return self._writer is not None

    def push(self, message: Message) -> None:
        if self._finished:
            return
        if self._backlog is not None:
            self._backlog.add(event(message))
            return
        self._queue.append(event(message))
        self.commit()
        assert self._wake is not None
        self._wake.set()

    def commit(self) -> None:
        """Answer as a stream from now on (what is pushed goes out as it comes)."""
        if self._writer is None and not self._finished:
            self._unanswered.since.pop(self, None)
            if self._polled is not None:
                self._queue.insert(0, self._priming(self._polled))
            self._wake = asyncio.Event()
            self._writer = self._loop.create_task(self._stream())

    def _priming(self, polled: Polled) -> bytes:
        self._key = polled.key()
        return priming(self._key, self._retry)

    def poll(self, retry: float) -> None:
        """Close the stream now, before the answer, for the client to resume it with a GET and
        `Last-Event-ID` after `retry` seconds (SEP-1699): the priming event gave it an id (and the
        delay, which is given again if it changed), and what comes after is kept for the client.
        Not a 2025-11-25 session's reply, or one already closed: nothing changes; past the
        session's bound the stream stays open, and its answer comes on it."""
        if self._finished or self._backlog is not None or self._polled is None:
            return
        self._cancel_timer()
        if self._writer is None:
            self._retry = retry
            self.commit()
        elif retry != self._retry:
            self._queue.append(retry_field(retry))
        assert self._key is not None and self._wake is not None
        backlog = self._polled.open(self._key)
        if backlog is None:
            return
        self._backlog = backlog
        self._wake.set()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _stream(self) -> None:
        await self._send({"type": "http.response.start", "status": 200,
                          "headers": [*SSE_HEADERS, *self._headers]})
        while True:
            if self._queue:
                body, self._queue = b"".join(self._queue), []
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
                continue
            if self._finished or self._backlog is not None:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            assert self._wake is not None
            self._wake.clear()
            try:
                async with asyncio.timeout(PING_SECONDS):
                    await self._wake.wait()
            except TimeoutError:
                await self._send({"type": "http.response.body", "body": _PING, "more_body": True})

    async def finish(self, answer: Message, status: int = 200) -> None:
        """Send the answer and end the response (`status` applies to a JSON answer only)."""
        self._unanswered.since.pop(self, None)
        self._cancel_timer()
        if self._finished:
            return
        if self._backlog is not None:  # closed for polling: the answer waits for its client
            self._finished = True
            self._backlog.add(event(answer), last=True)
            assert self._writer is not None
            await self._writer
            return
        if self._writer is None:
            self._finished = True
            if self._polled is not None:  # one write: the priming event and the answer
                body, kind = self._priming(self._polled) + event(answer), SSE_HEADERS[:3]
            elif self._sse:
                body, kind = event(answer), SSE_HEADERS[:3]
            else:
                body, kind = jsonrpc.dumps(answer), [(b"content-type", b"application/json")]
            await self._send({"type": "http.response.start", "status": status, "headers": [
                *kind, (b"content-length", str(len(body)).encode()), *self._headers]})
            await self._send({"type": "http.response.body", "body": body})
            return
        self._queue.append(event(answer))
        self._finished = True
        assert self._wake is not None
        self._wake.set()
        await self._writer

    def abandon(self) -> None:
        """The request ended without an answer to send (its stream, if any, just ends)."""
        self._unanswered.since.pop(self, None)
        self._cancel_timer()
        if not self._finished:
            self._finished = True
            if self._backlog is not None:
                self._backlog.end()
            if self._wake is not None:
                self._wake.set()


class Stream:
    """A session's GET stream: what the server sends outside any request, until the client goes."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queue: list[bytes] = []
        self._wake = asyncio.Event()
        self._closed = False

    @property
    def open(self) -> bool:
        return not self._closed

    def push(self, message: Message) -> None:
        if not self._closed:
            self._queue.append(event(message))
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def serve(self, receive: Receive, headers: list[tuple[bytes, bytes]]) -> None:
        """Write the stream until the client disconnects or `close` is called."""
        await self._send({"type": "http.response.start", "status": 200,
                          "headers": [*SSE_HEADERS[:3], *headers]})
        gone = asyncio.get_running_loop().create_task(_disconnected(receive))
        gone.add_done_callback(lambda _: self.close())
        try:
            while not self._closed:
                if self._queue:
                    body, self._queue = b"".join(self._queue), []
                    await self._send({"type": "http.response.body", "body": body, "more_body": True})
                    continue
                self._wake.clear()
                try:
                    async with asyncio.timeout(PING_SECONDS):
                        await self._wake.wait()
                except TimeoutError:
                    await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
            with contextlib.suppress(Exception):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._closed = True
            gone.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
