"""A 2025-11-25 HTTP session's GET stream is asked for, and its answer waited for (bounded), before
the server is first listed (gateway/upstream/session.py `_get_stream`, http.py `HttpLink.listen`):
a server sends its `list_changed` outside any request on that stream alone, and one not yet open
has nowhere to send it. A server that refuses the stream, or never answers it, is listed anyway;
what the stream's request ends in (a refusal, a failure, an answer that is not an event stream) is
told to whoever waits for it, once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from mcp_preconditions.gateway.upstream import http, session
from mcp_preconditions.gateway.upstream.http import GET_ATTEMPTS, HttpLink
from mcp_preconditions.gateway.upstream.session import HttpTarget, Upstream

WAIT = 10.0
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"\r\n")
CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def json_reply(message: dict[str, Any], *extra: str) -> bytes:
    body = json.dumps(message).encode()
    head = "".join(f"{line}\r\n" for line in ("HTTP/1.1 200 OK", "content-type: application/json",
                                                f"content-length: {len(body)}", *extra))
    return head.encode() + b"\r\n" + body


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Double:
    """A 2025-11-25 streamable-HTTP server, as the SDK's behaves: its `tools/list` answer is sent
    after a `list_changed` outside any request, on the GET stream if one is open (else dropped).
    `get` is how it answers GET: "stream" (an event stream, held open), "405", "silent" (never)."""

    def __init__(self, get: str) -> None:
        self.get = get
        self.seen: list[str] = []  # "GET answered", "tools/list", ... in the order they happened
        self.stream: asyncio.StreamWriter | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                verb = head[0].split(" ", 1)[0]
                length = next((int(line.split(":", 1)[1]) for line in head
                               if line.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length)
                if verb == "GET":
                    await self._get(writer)
                elif verb == "DELETE":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                else:
                    self._post(json.loads(body), writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _get(self, writer: asyncio.StreamWriter) -> None:
        if self.get == "405":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            self.seen.append("GET refused")
            return
        if self.get == "stream":
            writer.write(SSE_HEAD)
            self.stream = writer
            self.seen.append("GET answered")
        await asyncio.sleep(3600)  # held open (or never answered) until the gateway goes

    def _post(self, message: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        method, rid = message.get("method"), message.get("id")
        self.seen.append(str(method))
        if rid is None:  # notifications/initialized
            writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
        elif method == "initialize":
            writer.write(json_reply({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "double", "version": "1"}}}, "mcp-session-id: s-1"))
        elif method == "tools/list":
            if self.stream is not None:  # the change goes where the server can send it, or nowhere
                self.stream.write(chunk(b"data: " + json.dumps(CHANGED).encode() + b"\n\n"))
            writer.write(json_reply({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}}))
        else:
            writer.write(json_reply({"jsonrpc": "2.0", "id": rid, "result": {}}))


@asynccontextmanager
async def serving(double: Double) -> AsyncIterator[str]:
    listening = await asyncio.start_server(double.handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"
    finally:
        listening.close()


async def first_listing(url: str) -> list[str]:
    """An upstream session to `url` whose on_connect lists its tools (as the gateway's does); the
    notifications it heard by the time it has listed and heard one (or WAIT has passed)."""
    upstream = Upstream(HttpTarget(url), connect_timeout=lambda: WAIT)
    heard: list[str] = []
    listed, changed = anyio.Event(), anyio.Event()

    async def on_connect() -> None:
        await upstream.list_all("tools/list", "tools", WAIT)
        listed.set()

    def on_notification(method: str, _params: dict[str, Any]) -> None:
        heard.append(method)
        changed.set()

    upstream.on_connect = on_connect
    upstream.on_notification = on_notification
    async with anyio.create_task_group() as tg:
        tg.start_soon(upstream.run)
        with anyio.fail_after(WAIT):
            await listed.wait()
        with anyio.move_on_after(WAIT):
            await changed.wait()
        tg.cancel_scope.cancel()
    return heard


async def test_the_get_stream_is_answered_before_the_first_listing_and_its_change_is_heard() -> None:
    double = Double("stream")
    async with serving(double) as url:
        heard = await first_listing(url)
    assert double.seen[:4] == ["initialize", "notifications/initialized", "GET answered",
                               "tools/list"]
    assert heard == ["notifications/tools/list_changed"]


@pytest.mark.parametrize(("get", "seen"), [
    ("405", ["initialize", "notifications/initialized", "GET refused", "tools/list"]),
    ("silent", ["initialize", "notifications/initialized", "tools/list"]),
])
async def test_a_server_without_a_get_stream_is_listed_all_the_same(
        get: str, seen: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused: listed at once; never answered: listed when LISTEN_ACK_SECONDS have passed."""
    monkeypatch.setattr(session, "LISTEN_ACK_SECONDS", 0.2)
    double = Double(get)
    async with serving(double) as url:
        upstream = Upstream(HttpTarget(url), connect_timeout=lambda: WAIT)
        listed = anyio.Event()

        async def on_connect() -> None:
            await upstream.list_all("tools/list", "tools", WAIT)
            listed.set()

        upstream.on_connect = on_connect
        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream.run)
            with anyio.fail_after(WAIT):
                await listed.wait()
            tg.cancel_scope.cancel()
    assert double.seen == seen


# -- the link: what the stream's first request ends in is told once -------------------------------
ROWS: list[tuple[str, bytes | None, int | None]] = [  # name, every GET's answer, GETs asked for
    ("405", b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n", 1),
    ("500", b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n", GET_ATTEMPTS),
    ("200 not an event stream",
     b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
     GET_ATTEMPTS),
    ("an event stream the server ends", SSE_HEAD + b"0\r\n\r\n", None),  # asked for again, on
    ("connection refused", None, 0),
]


@pytest.mark.parametrize(("name", "reply", "asked"), ROWS, ids=[r[0] for r in ROWS])
async def test_the_first_answer_is_told_once_whatever_it_is(
        name: str, reply: bytes | None, asked: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "GET_RETRY_SECONDS", 0.01)
    gets = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal gets
        try:
            gets += (await reader.readuntil(b"\r\n\r\n")).startswith(b"GET ")  # not DELETE
            writer.write(reply or b"")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    if reply is None:  # nothing listens there any more
        listening.close()
        await listening.wait_closed()
    calls: list[str] = []
    link = HttpLink(f"http://127.0.0.1:{port}/mcp", {}, lambda _m, _via: None, "raw")
    link.session_id = "s-1"
    try:
        link.listen(lambda: calls.append("answered"))
        task = link._listening
        assert task is not None
        with anyio.fail_after(WAIT):
            while not (task.done() if asked is not None else gets >= 3):
                await asyncio.sleep(0.01)  # polled on the deadline
    finally:
        await link.close()
        listening.close()
    assert calls == ["answered"], name
    assert asked is None or gets == asked, (name, gets)
