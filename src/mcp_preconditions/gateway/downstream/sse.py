"""The bodies of the gateway's streamable-HTTP responses, written as raw bytes: a request answered as
one JSON body unless something must reach the client before its answer (progress, a log message, a
server's request), in which case the response becomes an SSE stream; a session's GET stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from .. import jsonrpc
from ..jsonrpc import Message

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

PING_SECONDS = 15.0  # a silent stream gets a comment this often (proxies close idle reads)
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
               (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]
_PING = b": ping\r\n\r\n"


def event(message: Message) -> bytes:
    return b"event: message\r\ndata: " + jsonrpc.dumps(message) + b"\r\n\r\n"


class Unanswered:
    """The replies still waiting for their answer, for one sweep every few seconds to turn those
    waiting longer than `PING_SECONDS` into kept-alive streams (a timer per request would cost
    every call)."""

    def __init__(self) -> None:
        self.since: dict[Reply, float] = {}

    async def keep_alive(self) -> None:
        """Run until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(PING_SECONDS / 3)
            cutoff = loop.time() - PING_SECONDS
            for reply in [r for r, since in self.since.items() if since < cutoff]:
                reply.commit()


class Reply:
    """The response to one POSTed request: `push` what belongs to the request before its answer
    (a `Sink`), `finish` with the answer. SSE from the first push on; until then either way: a
    2026-07-28 answer with nothing before it is plain JSON, a 2025-11-25 one one SSE event (the
    MCP SDK answers each POST of a session as a stream, and conformance checks that it does). A
    request still unanswered after `PING_SECONDS` becomes a stream too (kept alive)."""

    def __init__(self, send: Send, headers: list[tuple[bytes, bytes]], unanswered: Unanswered,
                 loop: asyncio.AbstractEventLoop, *, sse: bool = False) -> None:
        self._send = send
        self._headers = headers
        self._sse = sse
        self._queue: list[bytes] = []
        self._wake: asyncio.Event | None = None  # made with the stream, if one is needed
        self._writer: asyncio.Task[None] | None = None
        self._finished = False
        self._loop = loop
        self._unanswered = unanswered
        unanswered.since[self] = loop.time()

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
        self._queue.append(event(message))
        self.commit()
        assert self._wake is not None
        self._wake.set()

    def commit(self) -> None:
        """Answer as a stream from now on (what is pushed goes out as it comes)."""
        if self._writer is None and not self._finished:
            self._unanswered.since.pop(self, None)
            self._wake = asyncio.Event()
            self._writer = self._loop.create_task(self._stream())

    async def _stream(self) -> None:
        await self._send({"type": "http.response.start", "status": 200,
                          "headers": [*SSE_HEADERS, *self._headers]})
        while True:
            if self._queue:
                body, self._queue = b"".join(self._queue), []
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
                continue
            if self._finished:
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
        if self._finished:
            return
        if self._writer is None:
            self._finished = True
            if self._sse:
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
        if not self._finished:
            self._finished = True
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
