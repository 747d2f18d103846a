"""A 2025-11-25 server that closes a request's event stream before its answer, after an event with an
id, for its client to poll (SEP-1699): the gateway's HTTP client reconnects with a GET carrying
`Last-Event-ID` after the server's `retry` (bounded), and reads on; the request is never sent again
(gateway/upstream/http.py `_resume`). Each row is a scripted server: its answers, one per request
in order, and what the gateway must have sent and ended with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcp_preconditions.gateway.errors import UpstreamError
from mcp_preconditions.gateway.upstream import http
from mcp_preconditions.gateway.upstream.http import HttpLink
from mcp_preconditions.gateway.upstream.peer import Polled
from mcp_preconditions.gateway.upstream.response import Bounds

BOUNDS = Bounds(event=4096, line=4096)
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "test_reconnection"}}
ANSWER = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
ASK = {"jsonrpc": "2.0", "id": 1, "method": "roots/list"}


def sse(*events: bytes) -> bytes:
    """A 200 event stream of `events`, chunked, ended."""
    body = b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events) + b"0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"\r\n" + body)


def data(message: dict[str, Any], id: str | None = None) -> bytes:
    return (f"id: {id}\n" if id else "").encode() + f"data: {json.dumps(message)}\n\n".encode()


PRIMED = b"id: e1\nretry: 20\ndata: \n\n"
REFUSED = b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n"


@dataclass
class Script:
    answers: list[bytes]
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # method, headers


@asynccontextmanager
async def server(script: Script) -> AsyncIterator[str]:
    """Answers the requests it is sent with the script's answers, in order; records each."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                pairs = (line.split(": ", 1) for line in head[1:] if line)
                headers = {name.lower(): value for name, value in pairs}
                await reader.readexactly(int(headers.get("content-length", "0")))
                script.asked.append((head[0].split()[0], headers))
                writer.write(script.answers.pop(0) if script.answers else REFUSED)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"
    finally:
        listening.close()


async def sent(script: Script, *, modern: bool = False) -> tuple[list[Any], str | None]:
    """CALL sent on a 2025-11-25 session (or a 2026-07-28 link) with the scripted server: what
    reached the session (message or Polled, with the request it came for), and the error it
    ended with."""
    async with server(script) as url:
        got: list[Any] = []
        link = HttpLink(url, {"authorization": "Bearer t"}, lambda m, via: got.append((m, via)),
                        "raw", BOUNDS)
        link.session_id, link.protocol_version, link.modern = "s1", "2025-11-25", modern
        outcome = None
        try:
            async with asyncio.timeout(5):
                await link.send(CALL, modern=modern)
        except UpstreamError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        await link.close()
    return got, outcome


def methods(script: Script) -> list[str]:
    """What the gateway asked the server, but the DELETE that ends the session when it closes."""
    return [method for method, _ in script.asked if method != "DELETE"]


async def test_a_stream_closed_after_an_id_is_resumed_with_last_event_id_and_never_posted_again(
        ) -> None:
    script = Script([sse(PRIMED), sse(data(ASK, "e2"), data(ANSWER, "e3"))])
    got, outcome = await sent(script)
    assert outcome is None
    assert got == [(Polled(0.02), 7), (ASK, 7), (ANSWER, 7)]  # the question: the call's own
    assert methods(script) == ["POST", "GET"]
    resumed = script.asked[1][1]
    assert resumed["last-event-id"] == "e1" and resumed["mcp-session-id"] == "s1"
    assert resumed["accept"] == "text/event-stream" and "content-type" not in resumed
    assert resumed["authorization"] == "Bearer t"  # as the request went


async def test_an_event_cut_by_the_close_is_dropped_and_the_resumed_stream_read_afresh() -> None:
    script = Script([sse(PRIMED, b'data: {"jsonrpc": "2.0", "method": "no'),
                     sse(data(ANSWER, "e2"))])
    got, outcome = await sent(script)
    assert (got, outcome) == ([(Polled(0.02), 7), (ANSWER, 7)], None)
    assert methods(script) == ["POST", "GET"]


async def test_each_new_event_counts_as_progress_and_the_last_id_is_asked_after() -> None:
    script = Script([sse(PRIMED), sse(data(NOTE, "e2")), sse(b": nothing new\n\n"),
                     sse(data(ANSWER, "e3"))])
    got, outcome = await sent(script)
    assert outcome is None and got[-1] == (ANSWER, 7)
    assert [h.get("last-event-id") for m, h in script.asked if m != "DELETE"] == [
        None, "e1", "e2", "e2"]


async def test_resumptions_that_bring_nothing_new_fail_the_request_after_a_few() -> None:
    script = Script([sse(PRIMED), *[sse(b": nothing\n\n")] * 5])
    got, outcome = await sent(script)
    assert outcome == "UpstreamClosed: the server ended the event stream without an answer"
    assert methods(script) == ["POST", *["GET"] * http.RESUMES]
    assert got == [(Polled(0.02), 7)] * http.RESUMES


@pytest.mark.parametrize(("name", "answers", "error"), [
    ("no event id", [sse(data(NOTE))], "the server ended the event stream without an answer"),
    ("an id no header can carry", [sse(b"id: a b\ndata: \n\n")],
     "the server ended the event stream without an answer"),
    ("the resumption refused", [sse(PRIMED), REFUSED],
     "the server did not resume the event stream (HTTP 405)"),
])
async def test_a_stream_that_cannot_be_resumed_fails_its_request_at_once(
        name: str, answers: list[bytes], error: str) -> None:
    script = Script(answers)
    _, outcome = await sent(script)
    assert outcome == f"UpstreamClosed: {error}", name
    assert methods(script).count("POST") == 1


async def test_a_2026_request_is_never_resumed() -> None:
    """At 2026-07-28 there are no sessions to resume a stream on."""
    script = Script([sse(PRIMED)])
    got, outcome = await sent(script, modern=True)
    assert outcome == "UpstreamClosed: the server ended the event stream without an answer"
    assert methods(script) == ["POST"] and got == []


async def test_the_servers_retry_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "RETRY_MAX_SECONDS", 0.01)
    script = Script([sse(b"id: e1\nretry: 999999999\ndata: \n\n"), sse(data(ANSWER))])
    got, outcome = await sent(script)
    assert (got, outcome) == ([(Polled(0.01), 7), (ANSWER, 7)], None)
