"""The gateway's HTTP/1.1 connection (gateway/downstream/http11.py, exchange.py), byte by byte in
the manner of uvicorn's tests/protocols/test_http.py: a table of requests fed to the protocol object
over a fake transport, and what it wrote and whether it closed. Malformed, chunked, pipelined, HEAD,
HTTP/1.0, oversize heads, 100-continue, streamed answers, a client gone mid-body; then write flow
control, and the gate over the cap (health checks answered once, anything else 503).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mcp_preconditions.gateway.downstream.admission import HEALTH_RESERVE, Admission, Limits
from mcp_preconditions.gateway.downstream.http11 import (
    BAD_REQUEST,
    HEAD_TOO_LARGE,
    MAX_HEAD,
    OVER_CAPACITY,
    Connection,
    Listener,
    health_check,
)


class Wire(asyncio.Transport):
    """What the connection writes, each write apart, and whether it closed or paused reading."""

    def __init__(self, peer: str = "127.0.0.1") -> None:
        super().__init__()
        self.written = bytearray()
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True
        self.peer = peer

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.written += data
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": (self.peer, 5000), "sockname": ("127.0.0.1", 80)}.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


@dataclass
class Seen:
    """What the app saw: each request's scope and body, and how many ran at once."""

    requests: list[tuple[dict[str, Any], bytes]]
    running: int = 0
    most: int = 0


def echo_app(seen: Seen) -> Callable[..., Any]:
    """Reads the whole body, then answers 200 with what it read (method, path, query, body)."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.running += 1
        seen.most = max(seen.most, seen.running)
        body = b""
        while (message := await receive())["type"] == "http.request":
            body += message["body"]
            if not message["more_body"]:
                break
        await asyncio.sleep(0)  # a pipelined request would start here if it were not held back
        seen.requests.append((scope, body))
        answer = json.dumps({"method": scope["method"], "path": scope["path"],
                             "query": scope["query_string"].decode(), "body": body.decode()}).encode()
        seen.running -= 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})
    return app


def connect(app: Any, admission: Admission | None = None, peer: str = "127.0.0.1"
            ) -> tuple[Connection, Wire]:
    listener = Listener(app, admission or Admission(), asyncio.get_running_loop(), ("127.0.0.1", 80))
    connection, wire = Connection(listener), Wire(peer)
    connection.connection_made(wire)
    return connection, wire


async def settled(until: Callable[[], bool] = lambda: False, steps: int = 200) -> None:
    """Let the loop run the app's tasks (no timer is involved): until `until`, or `steps` steps."""
    for _ in range(steps):
        if until():
            return
        await asyncio.sleep(0)


def answers(written: bytes) -> list[tuple[bytes, bytes]]:
    """Each response's head and body (Content-Length framed), in order."""
    out = []
    rest = written
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        out.append((head, rest[:length]))
        rest = rest[length:]
    return out


GET = b"GET /healthz?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
POST = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n" + b'{"a": "b"}'
CHUNKED = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"4\r\n{\"a\"\r\n6\r\n: \"b\"}\r\n0\r\n\r\n")

# (name, the bytes the client sends in these pieces, the bodies answered, closed afterwards)
CASES: list[tuple[str, list[bytes], list[str], bool]] = [
    ("get", [GET], ["/healthz?x=1:"], False),
    ("post with a length", [POST], ['/mcp?:{"a": "b"}'], False),
    ("chunked body", [CHUNKED], ['/mcp?:{"a": "b"}'], False),
    ("one byte at a time", [bytes([b]) for b in POST], ['/mcp?:{"a": "b"}'], False),
    ("pipelined, in one packet", [GET + POST + GET], ["/healthz?x=1:", '/mcp?:{"a": "b"}',
                                                     "/healthz?x=1:"], False),
    ("pipelined, split mid-head", [GET + POST[:7], POST[7:]], ["/healthz?x=1:", '/mcp?:{"a": "b"}'],
     False),
    ("client asks to close", [b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"], ["/a?:"],
     True),
    ("http/1.0", [b"GET /a HTTP/1.0\r\n\r\n"], ["/a?:"], True),
    ("http/1.0 keep-alive", [b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"], ["/a?:"], False),
    ("percent-encoded path", [b"GET /a%20b?q=%20 HTTP/1.1\r\nHost: x\r\n\r\n"], ["/a b?q=%20:"], False),
    ("absolute form", [b"GET http://x/a/b?c HTTP/1.1\r\nHost: x\r\n\r\n"], ["/a/b?c:"], False),
]


@pytest.mark.parametrize(("name", "pieces", "bodies", "closes"), CASES, ids=[c[0] for c in CASES])
async def test_requests_are_answered_in_order_one_at_a_time(
        name: str, pieces: list[bytes], bodies: list[str], closes: bool) -> None:
    seen = Seen([])
    connection, wire = connect(echo_app(seen))
    for piece in pieces:
        connection.data_received(piece)
        await settled(lambda: wire.reading)
    await settled(lambda: len(answers(bytes(wire.written))) == len(bodies))
    got = [json.loads(body) for _, body in answers(bytes(wire.written))]
    assert [f"{g['path']}?{g['query']}:{g['body']}" for g in got] == bodies
    assert all(head.startswith(b"HTTP/1.1 200 OK\r\n") for head, _ in answers(bytes(wire.written)))
    assert seen.most == 1  # never two of one connection's requests at once
    assert wire.closed is closes
    assert all(b"connection: close" in h for h, _ in answers(bytes(wire.written))[-1:]) is closes


# (name, bytes, the answer written): each is refused whole, and the connection closed
REFUSED: list[tuple[str, bytes, bytes]] = [
    ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", BAD_REQUEST),
    ("bad version", b"GET /a HTTP/2.7\r\nHost: x\r\n\r\n", BAD_REQUEST),
    ("length and chunked", b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", BAD_REQUEST),
    ("length not a number", b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", BAD_REQUEST),
    ("two lengths", b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
     BAD_REQUEST),
    ("bad chunk size", b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     BAD_REQUEST),
    ("a space before a colon", b"GET /a HTTP/1.1\r\nHost : x\r\n\r\n", BAD_REQUEST),
    ("bare LF in a header", b"GET /a HTTP/1.1\r\nHost: x\nY: z\r\n\r\n", BAD_REQUEST),
    ("not ASCII in the path", "GET /é HTTP/1.1\r\nHost: x\r\n\r\n".encode(), BAD_REQUEST),
    ("oversize head", b"GET /a HTTP/1.1\r\nHost: x\r\nX: " + b"a" * MAX_HEAD + b"\r\n\r\n",
     HEAD_TOO_LARGE),
]


@pytest.mark.parametrize(("name", "data", "answer"), REFUSED, ids=[c[0] for c in REFUSED])
async def test_a_malformed_request_is_answered_and_the_connection_closed(
        name: str, data: bytes, answer: bytes) -> None:
    seen = Seen([])
    connection, wire = connect(echo_app(seen))
    connection.data_received(data)
    await settled()
    assert bytes(wire.written) == answer and wire.closed  # (an app that began hears the client went)


async def test_an_oversize_head_in_pieces_is_refused_once_past_the_bound() -> None:
    connection, wire = connect(echo_app(Seen([])))
    connection.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\nX: ")
    piece = b"a" * 4096
    for _ in range((MAX_HEAD - 100) // len(piece)):
        connection.data_received(piece)
        assert not wire.closed
    connection.data_received(piece)
    assert bytes(wire.written) == HEAD_TOO_LARGE and wire.closed


async def test_head_answers_with_the_length_and_no_body() -> None:
    connection, wire = connect(echo_app(Seen([])))
    connection.data_received(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
    await settled(lambda: wire.written.count(b"HTTP/1.1 200") == 2)
    first, _, rest = bytes(wire.written).partition(b"\r\n\r\n")
    assert b"content-length: " in first and rest.startswith(b"HTTP/1.1 200 OK\r\n")  # no body between


async def test_a_streamed_answer_is_chunked_and_to_http_1_0_delimited_by_the_close() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for part in (b"data: 1\n\n", b"data: 2\n\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    connection, wire = connect(app)
    connection.data_received(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
    await settled(lambda: wire.written.endswith(b"0\r\n\r\n"))
    head, _, body = bytes(wire.written).partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and not wire.closed
    assert body == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    old, old_wire = connect(app)
    old.data_received(b"GET /s HTTP/1.0\r\n\r\n")
    await settled(lambda: old_wire.closed)
    head, _, body = bytes(old_wire.written).partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"data: 1\n\ndata: 2\n\n"


async def test_an_answer_goes_out_in_one_write_its_head_with_its_body() -> None:
    connection, wire = connect(echo_app(Seen([])))
    connection.data_received(POST)
    await settled(lambda: bool(wire.writes))
    assert len(wire.writes) == 1 and wire.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_streams_head_goes_out_alone_on_the_loops_next_step() -> None:
    go = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await go.wait()
        await send({"type": "http.response.body", "body": b"x", "more_body": False})

    connection, wire = connect(app)
    connection.data_received(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
    await settled(lambda: bool(wire.writes))
    assert wire.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
    go.set()
    await settled(lambda: len(wire.writes) == 2)
    assert wire.writes[1] == b"1\r\nx\r\n0\r\n\r\n"


async def test_100_continue_is_sent_when_the_app_reads_the_body() -> None:
    seen = Seen([])
    connection, wire = connect(echo_app(seen))
    connection.data_received(b"POST /mcp HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                             b"Content-Length: 2\r\n\r\n")
    await settled(lambda: bool(wire.written))
    assert bytes(wire.written) == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.data_received(b"{}")
    await settled(lambda: b"200 OK" in wire.written)
    assert json.loads(answers(bytes(wire.written)[25:])[0][1])["body"] == "{}"


async def test_an_answer_before_the_whole_body_closes_the_connection_after_it() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    connection, wire = connect(app)
    connection.data_received(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n{")
    await settled(lambda: wire.closed)
    assert wire.written.startswith(b"HTTP/1.1 413 ") and b"connection: close" in wire.written
    connection.data_received(b"GET /a HTTP/1.1\r\n\r\n")  # what was left of that body is never a request


async def test_a_client_gone_mid_body_is_told_to_the_app_and_nothing_is_written() -> None:
    told: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        told.extend([await receive(), await receive()])

    connection, wire = connect(app)
    connection.data_received(POST[:-4])
    await settled(lambda: len(told) == 1)
    connection.connection_lost(None)
    await settled(lambda: len(told) == 2)
    assert told == [{"type": "http.request", "body": b'{"a": ', "more_body": True},
                    {"type": "http.disconnect"}]
    assert wire.written == b""


async def test_every_receive_waiting_hears_the_client_go_and_one_cancelled_leaves_the_others() -> None:
    heard: list[str] = []
    waiting: list[asyncio.Task[None]] = []

    async def listen(receive: Any) -> None:
        heard.append((await receive())["type"])

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()  # the (empty) body
        waiting.extend(asyncio.ensure_future(listen(receive)) for _ in range(3))
        await asyncio.gather(*waiting, return_exceptions=True)

    connection, _ = connect(app)
    connection.data_received(GET)
    await settled(lambda: len(waiting) == 3)
    await settled()
    waiting[0].cancel()
    await settled(lambda: waiting[0].done())
    connection.connection_lost(None)
    await settled(lambda: len(heard) == 2)
    assert heard == ["http.disconnect", "http.disconnect"]


@pytest.mark.parametrize(("failure", "written"), [
    ("raises", b"HTTP/1.1 500 Internal Server Error\r\n"),
    ("bad header", b"HTTP/1.1 500 Internal Server Error\r\n"),
    ("no answer", b"HTTP/1.1 500 Internal Server Error\r\n"),
])
async def test_an_app_that_fails_before_answering_gets_500_and_the_connection_closes(
        failure: str, written: bytes) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if failure == "raises":
            raise ValueError("boom")
        if failure == "bad header":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"x-session", b"a\r\nset-cookie: evil")]})

    connection, wire = connect(app)
    connection.data_received(GET)
    await settled(lambda: wire.closed)
    assert wire.written.startswith(written) and b"evil" not in wire.written


async def test_an_upgrade_is_answered_as_plain_http_and_the_connection_closed() -> None:
    connection, wire = connect(echo_app(Seen([])))
    connection.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                             b"\r\n\x81\x05hello")
    await settled(lambda: wire.closed)
    assert [json.loads(b)["path"] for _, b in answers(bytes(wire.written))] == ["/a"]


async def test_a_writer_waits_while_the_client_reads_slowly() -> None:
    sent: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(3):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            sent.append(n)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    connection, wire = connect(app)
    connection.pause_writing()  # the transport's buffer is full
    connection.data_received(GET)
    await settled()
    assert sent == [] and wire.written == b""
    connection.resume_writing()
    await settled(lambda: wire.written.endswith(b"0\r\n\r\n"))
    assert sent == [0, 1, 2]


async def test_a_large_body_pauses_reading_until_the_app_takes_it() -> None:
    release = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await release.wait()
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    connection, wire = connect(app)
    connection.data_received(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
    connection.data_received(b"x" * 70_000)
    assert not wire.reading
    release.set()
    await settled(lambda: wire.reading)
    connection.data_received(b"x" * 130_000)
    await settled(lambda: bool(wire.written))
    assert wire.written.startswith(b"HTTP/1.1 204 No Content\r\n") and not wire.closed


# -- over the cap: the gate --------------------------------------------------------------------------
LIMITS = Limits(connections=2)


def capped(refused: list[str]) -> Admission:
    return Admission(LIMITS, refused.append)


async def busy_pair(admission: Admission, app: Any) -> list[tuple[Connection, Wire]]:
    """The cap's worth of connections, each with a request under way (not to be ended)."""
    held = [connect(app, admission) for _ in range(LIMITS.connections)]
    for connection, _ in held:
        connection.data_received(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await settled()
    return held


def slow_app() -> Any:
    never = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await never.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


async def test_over_the_cap_and_the_reserve_a_connection_is_answered_503_as_it_is_accepted() -> None:
    refused: list[str] = []
    admission, app = capped(refused), slow_app()
    await busy_pair(admission, app)
    reserve = [connect(app, admission) for _ in range(HEALTH_RESERVE)]
    assert not any(wire.closed for _, wire in reserve)
    _, wire = connect(app, admission)
    assert bytes(wire.written) == OVER_CAPACITY and wire.closed
    assert OVER_CAPACITY.startswith(b"HTTP/1.1 503 ")
    assert OVER_CAPACITY.endswith(b"\r\n\r\nService Unavailable")
    assert refused == ["over_cap"]


@pytest.mark.parametrize("line", [b"GET /healthz HTTP/1.1\r\n", b"HEAD /readyz?verbose HTTP/1.1\r\n"])
async def test_over_the_cap_a_health_check_is_answered_once_and_the_connection_closed(line: bytes) -> None:
    refused: list[str] = []
    admission, app = capped(refused), slow_app()
    await busy_pair(admission, app)
    connection, wire = connect(app, admission)  # in the reserve
    connection.data_received(line[:7])  # the request line comes in pieces: it waits for the rest
    assert wire.written == b"" and not wire.closed
    connection.data_received(line[7:] + b"Host: 127.0.0.1\r\n\r\n" + GET)  # and one more, pipelined
    await settled(lambda: wire.closed)
    assert wire.written.startswith(b"HTTP/1.1 200 OK\r\n") and wire.written.count(b"HTTP/1.1") == 1
    assert b"\r\nconnection: close\r\n" in wire.written and refused == []


@pytest.mark.parametrize("start", [
    POST, b"GET /metrics HTTP/1.1\r\n", b"GET /healthzz HTTP/1.1\r\n", b"POST /healthz HTTP/1.1\r\n",
    b"GET /" + b"a" * 300])
async def test_over_the_cap_anything_else_is_answered_503_and_closed(start: bytes) -> None:
    refused: list[str] = []
    admission, app = capped(refused), slow_app()
    await busy_pair(admission, app)
    connection, wire = connect(app, admission)
    connection.data_received(start)
    assert bytes(wire.written) == OVER_CAPACITY and wire.closed and refused == ["over_cap"]


@pytest.mark.parametrize(("start", "verdict"), [
    (b"GET /healthz HTTP/1.1\r\n", True), (b"GET /readyz HTTP/1.0\r\nHost: x", True),
    (b"GET /heal", None), (b"GET /healthz HTTP/1.1\r", None), (b"GET /healthz?a=b HTTP/1.1\r\n", True),
    (b"GET  /healthz HTTP/1.1\r\n", False), (b"\r\nGET /healthz HTTP/1.1\r\n", False),
    (b"OPTIONS /healthz HTTP/1.1\r\n", False), (b"GET /healthz/x HTTP/1.1\r\n", False),
    (b"GET /mcp HTTP/1.1\r\n", False), (b"G" * 256, False)])
def test_what_counts_as_a_health_check(start: bytes, verdict: bool | None) -> None:
    assert health_check(start) is verdict


@pytest.mark.interop
def test_the_gateway_imports_no_uvicorn() -> None:
    """The listener is the project's own (no private class of another library, SPEC §9): neither it
    nor the `gateway` command loads uvicorn, so any uvicorn the user has installs beside it.
    Interop: what a fresh interpreter imports is what it checks (the test process has uvicorn
    loaded by the in-process fixtures), so it runs one."""
    code = ("import sys\nfrom mcp_preconditions.gateway.downstream import listener\n"
            "from mcp_preconditions.cli import gateway_cmds\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('uvicorn', 'h11')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"
