"""A request's answer read from the event stream a server answers its POST with (gateway/upstream/
http.py): whether the stream has all arrived when it is read (the usual answer to a call, read at
once) or comes in pieces (read as it comes), each row ends the same way: what comes before the
answer is handed on in order, an answer to another request is dropped, nothing after the answer is
read, a stream without the answer fails the request, and an event past its bound fails it too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from mcp_preconditions.gateway.errors import UpstreamClosed, UpstreamError, UpstreamTooLarge
from mcp_preconditions.gateway.upstream.http import HttpLink
from mcp_preconditions.gateway.upstream.response import Bounds

BOUNDS = Bounds(event=256, line=1024)
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}
ANSWER = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
OTHER = {"jsonrpc": "2.0", "id": 8, "result": {}}


def event(message: dict[str, Any] | str) -> bytes:
    data = message if isinstance(message, str) else json.dumps(message)
    return f"event: message\ndata: {data}\n\n".encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"\r\n")

# name, the events of the stream, what reaches the session, what the request ends with.
ROWS: list[tuple[str, list[bytes], list[dict[str, Any]], str | None]] = [
    ("a notification, the answer, then more", [event(NOTE), event(ANSWER), event(NOTE)],
     [NOTE, ANSWER], None),
    ("an answer to another request first", [b"id: 1\ndata: \n\n", event(OTHER), event(ANSWER)],
     [ANSWER], None),
    ("no answer before the end", [event(NOTE)], [NOTE],
     "UpstreamClosed: the server ended the event stream without an answer"),
    ("an event past its bound", [event(NOTE), event("x" * 300), event(ANSWER)], [NOTE],
     "UpstreamTooLarge: an SSE event over 256 bytes"),
]


@asynccontextmanager
async def server(events: list[bytes], whole: bool) -> AsyncIterator[str]:
    """Answers each POST with `events` as one chunked event stream: in one write (`whole`), or
    the head and the first event, then the rest 50 ms later."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                body = [chunk(e) for e in events] + [b"0\r\n\r\n"]
                if whole:
                    writer.write(HEAD + b"".join(body))
                else:
                    writer.write(HEAD + body[0])
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    writer.write(b"".join(body[1:]))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"
    finally:
        listening.close()


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "in pieces"])
@pytest.mark.parametrize(("name", "events", "received", "error"), ROWS, ids=[r[0] for r in ROWS])
async def test_each_stream_ends_its_request_the_same_way_whole_or_in_pieces(
        name: str, events: list[bytes], received: list[dict[str, Any]], error: str | None,
        whole: bool) -> None:
    async with server(events, whole) as url:
        got: list[dict[str, Any]] = []
        link = HttpLink(url, {}, lambda m, via: got.append(m), "raw", BOUNDS)
        outcome = None
        try:
            async with asyncio.timeout(5):
                await link.send(CALL)
        except UpstreamError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        await link.close()
    assert (got, outcome) == (received, error), name
    assert error is None or error.split(":")[0] in (UpstreamClosed.__name__, UpstreamTooLarge.__name__)


async def test_a_whole_answer_leaves_its_connection_for_the_next_request() -> None:
    async with server([event(ANSWER)], whole=True) as url:
        got: list[dict[str, Any]] = []
        link = HttpLink(url, {}, lambda m, via: got.append(m), "raw", BOUNDS)
        await link.send(CALL)
        await link.send(CALL)
        assert link._pool._open == 1 and len(link._pool._idle) == 1  # one connection, kept
        await link.close()
    assert got == [ANSWER, ANSWER]
