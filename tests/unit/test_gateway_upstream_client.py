"""The gateway's HTTP/1.1 client (gateway/upstream/client.py), one row per response a server can
send, in the manner of uvicorn's protocol tests: a raw socket on 127.0.0.1 writes the row's bytes,
and the row says what the request gets. After every row a second request must get its own answer,
on a connection that is reused only when the first exchange was clean, and the server must have
received each request exactly once (nothing is ever sent twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_preconditions.gateway.errors import (
    UpstreamClosed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTooLarge,
    UpstreamUnavailable,
)
from mcp_preconditions.gateway.upstream.client import Bounds, Pool, field_problem

BOUNDS = Bounds(body=1 << 16, head=1 << 12)
HEADERS = {"content-type": "application/json"}


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode() + body


@dataclass
class Reply:
    data: bytes
    close: bool = False  # close the connection after writing
    later: bytes = b""  # written 50 ms later, unasked
    hold: asyncio.Event | None = None  # written once this is set


@dataclass
class RawServer:
    """Answers each request it reads with the next reply; records what each connection received."""

    replies: list[Reply]
    connections: list[list[bytes]] = field(default_factory=list)
    url: str = ""
    # A reply is written in full (its `later` bytes too) and, if it closes, its connection closed.
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received: list[bytes] = []
        self.connections.append(received)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                received.append(await reader.readexactly(length))
                reply = self.replies.pop(0)
                if reply.hold is not None:
                    await reply.hold.wait()
                writer.write(reply.data)
                if reply.later:
                    await asyncio.sleep(0.05)  # a server that sends more later, unasked
                    writer.write(reply.later)
                if reply.close:
                    writer.close()
                    await writer.wait_closed()
                    self.answered.set()
                    break
                self.answered.set()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @property
    def requests(self) -> list[bytes]:
        return [body for connection in self.connections for body in connection]


@asynccontextmanager
async def raw_server(*replies: Reply) -> AsyncIterator[RawServer]:
    server = RawServer(list(replies))
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield server
    finally:
        listening.close()


async def exchange(pool: Pool, body: bytes) -> bytes | UpstreamError:
    try:
        async with asyncio.timeout(10):  # a safety net on two loaded cores, never reached
            response = await pool.request("POST", HEADERS, body)
            return await response.read()
    except UpstreamError as exc:
        return exc


# name, what the server writes, what the request gets (its body, or an error class and message),
# whether the connection may serve the next request.
Row = tuple[str, Reply, bytes | tuple[type[UpstreamError], str], bool]
ROWS: list[Row] = [
    ("clean", Reply(ok(b"one")), b"one", True),
    ("chunked", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n"),
     b"one", True),
    ("chunk extension and trailer", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                                          b"3;x=y\r\none\r\n0\r\nx-t: 1\r\n\r\n"), b"one", True),
    ("negative content-length", Reply(b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\none"),
     (UpstreamProtocolError, "Invalid character in Content-Length"), False),
    ("two content-lengths", Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 5\r\n"
                                  b"\r\none"), (UpstreamProtocolError, "Duplicate Content-Length"),
     False),
    ("content-length list", Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\none"),
     (UpstreamProtocolError, "Invalid character in Content-Length"), False),
    ("garbage before the status line", Reply(b"xx\r\n" + ok(b"one")),
     (UpstreamProtocolError, "Expected HTTP/"), False),
    ("a malformed status", Reply(b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n"),
     (UpstreamProtocolError, "Invalid status code"), False),
    ("chunk size +2", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n+3\r\none\r\n0"
                            b"\r\n\r\n"), (UpstreamProtocolError, "Invalid character in chunk size"),
     False),
    ("chunk size 0x2", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x3\r\none\r\n"
                             b"0\r\n\r\n"), (UpstreamProtocolError, "Invalid character in chunk size"),
     False),
    ("no crlf after chunk data", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n"
                                       b"oneXX0\r\n\r\n"),
     (UpstreamProtocolError, "Expected LF after chunk data"), False),
    ("transfer-encoding with content-length",
     Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n3\r\none\r\n"
           b"0\r\n\r\n"),
     (UpstreamProtocolError, "Content-Length can't be present with Transfer-Encoding"), False),
    ("an unknown transfer-encoding", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\none",
                                           close=True),
     (UpstreamProtocolError, "unsupported transfer-encoding 'gzip'"), False),
    ("http/2 status line", Reply(b"HTTP/2.0 200 OK\r\ncontent-length: 3\r\n\r\none"),
     (UpstreamProtocolError, "not an HTTP/1.1 response"), False),
    ("switching protocols", Reply(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n"
                                  b"connection: upgrade\r\n\r\n"),
     (UpstreamProtocolError, "the server switched protocols"), False),
    ("an obs-folded header", Reply(b"HTTP/1.1 200 OK\r\nx: a\r\n b\r\ncontent-length: 3\r\n\r\none"),
     (UpstreamProtocolError, "Unexpected whitespace after header value"), False),
    ("an injected header line", Reply(b"HTTP/1.1 200 OK\r\nmcp-session-id: abc\nx-injected: 1\r\n"
                                      b"content-length: 3\r\n\r\none"),
     (UpstreamProtocolError, "malformed response"), False),
    ("a nul in a header", Reply(b"HTTP/1.1 200 OK\r\nx: a\x00b\r\ncontent-length: 3\r\n\r\none"),
     (UpstreamProtocolError, "Invalid header value char"), False),
    ("lf without cr", Reply(b"HTTP/1.1 200 OK\ncontent-length: 3\n\none"),
     (UpstreamProtocolError, "Missing expected CR"), False),
    ("100 continue first", Reply(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"one")), b"one", True),
    ("204 has no body", Reply(b"HTTP/1.1 204 No Content\r\n\r\n"), b"", True),
    ("304 has no body", Reply(b"HTTP/1.1 304 Not Modified\r\n\r\n"), b"", True),
    ("204 with a length is served, then not reused",
     Reply(b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n"), b"", False),
    ("a body past its bound", Reply(ok(b"x" * (BOUNDS.body + 1))),
     (UpstreamTooLarge, "a response body over 65536 bytes"), False),
    ("a chunk declared 16 GiB", Reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                                      b"400000000\r\n" + b"x" * (BOUNDS.body + 1)),
     (UpstreamTooLarge, "a response body over 65536 bytes"), False),
    ("an endless body until close", Reply(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (BOUNDS.body + 1)),
     (UpstreamTooLarge, "a response body over 65536 bytes"), False),
    ("a head past its bound", Reply(b"HTTP/1.1 200 OK\r\nx: " + b"x" * BOUNDS.head + b"\r\n\r\n"),
     (UpstreamTooLarge, "a response head over 4096 bytes"), False),
    ("a body ending at close", Reply(b"HTTP/1.1 200 OK\r\n\r\none", close=True), b"one", False),
    ("closed before any answer", Reply(b"", close=True),
     (UpstreamClosed, "the server closed the connection"), False),
    ("closed mid-body", Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\none", close=True),
     (UpstreamClosed, "the server closed the connection"), False),
    ("connection: close", Reply(ok(b"one", "connection: close")), b"one", False),
    ("kept, then closed by the server while idle", Reply(ok(b"one"), close=True), b"one", False),
    ("http/1.0 without keep-alive", Reply(b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\none"),
     b"one", False),
    ("keep-alive timeout=1", Reply(ok(b"one", "keep-alive: timeout=1")), b"one", False),
    ("keep-alive timeout=30", Reply(ok(b"one", "keep-alive: timeout=30")), b"one", True),
    ("a second response unasked, in the same packet", Reply(ok(b"one") + ok(b"stale")), b"one",
     False),
    ("a second response unasked, later", Reply(ok(b"one"), later=ok(b"stale")), b"one", False),
]


async def turns() -> None:
    """A few turns of the event loop, no time passing: what the server wrote or closed is in the
    client's socket already (loopback, one loop), and is read within the next turn or two."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize(("name", "reply", "expected", "reused"), ROWS, ids=[r[0] for r in ROWS])
async def test_each_response_gets_its_outcome_and_the_next_request_its_own_answer(
        name: str, reply: Reply, expected: bytes | tuple[type[UpstreamError], str],
        reused: bool) -> None:
    async with raw_server(reply, Reply(ok(b"two"))) as server:
        pool = Pool(server.url, bounds=BOUNDS)
        first = await exchange(pool, b"1")
        await asyncio.wait_for(server.answered.wait(), 10)  # unasked bytes, a close: all sent
        await turns()  # and read by the pool's connection
        second = await exchange(pool, b"2")
        pool.close()
    if isinstance(expected, bytes):
        assert first == expected, name
    else:
        assert isinstance(first, expected[0]) and expected[1] in str(first), (name, first)
    assert second == b"two", name
    assert server.requests == [b"1", b"2"], name  # each sent once, never again
    assert [len(c) for c in server.connections] == ([2] if reused else [1, 1]), name


async def test_a_request_that_may_have_been_read_is_never_sent_again() -> None:
    """The server reads a call and resets the connection: the call fails, it is not re-sent."""
    async with raw_server(Reply(b"", close=True), Reply(ok(b"two"))) as server:
        pool = Pool(server.url, bounds=BOUNDS)
        first = await exchange(pool, b"tools/call")
        second = await exchange(pool, b"2")
        pool.close()
    assert isinstance(first, UpstreamClosed)
    assert second == b"two"
    assert server.requests == [b"tools/call", b"2"]


async def test_connections_per_server_are_capped() -> None:
    """Three requests at once on a pool of two connections: the third waits for one of them to be
    free (the first two are answered only once both were received), never opens a third."""
    both = asyncio.Event()
    replies = [Reply(ok(str(i).encode()), hold=both) for i in range(3)]
    async with raw_server(*replies) as server:
        pool = Pool(server.url, bounds=BOUNDS, limit=2)
        calls = [asyncio.create_task(exchange(pool, str(i).encode())) for i in range(3)]
        async with asyncio.timeout(10):
            while len(server.requests) < 2:
                await asyncio.sleep(0.01)  # a poll, within the wait for two requests
            await turns()  # (a third connection, were it opened, is accepted within these)
            opened = len(server.connections)
            both.set()
            answers = await asyncio.gather(*calls)
        pool.close()
    assert opened == 2
    assert sorted(answers) == [b"0", b"1", b"2"]  # type: ignore[type-var]
    assert len(server.connections) == 2 and sorted(server.requests) == [b"0", b"1", b"2"]


async def test_a_refused_connection_is_unavailable_and_nothing_was_sent() -> None:
    async with raw_server() as server:
        url = server.url
    result = await exchange(Pool(url, bounds=BOUNDS), b"1")
    assert isinstance(result, UpstreamUnavailable) and "cannot connect to 127.0.0.1:" in str(result)


VALUE = "its value holds CR, LF, NUL or another control character"


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("mcp-session-id", "abc\nx-injected: 1", VALUE),
    ("authorization", "Bearer a\r\nx: 1", VALUE),
    ("x-api-key", "a\x00b", VALUE),
    ("x-api-key", "a\x7fb", VALUE),
    ("bad name", "v", "not an HTTP header name"),
])
async def test_a_header_value_with_cr_lf_or_nul_is_refused_and_never_written(
        name: str, value: str, problem: str) -> None:
    assert field_problem(name, value) == problem
    async with raw_server(Reply(ok(b"one"))) as server:
        pool = Pool(server.url, bounds=BOUNDS)
        with pytest.raises(ValueError) as caught:
            await pool.request("POST", {name: value}, b"1")
        pool.close()
    assert str(caught.value) == f"header {name!r}: {problem}"
    assert server.connections == []


def test_a_header_value_with_tabs_and_latin1_is_allowed() -> None:
    assert field_problem("x-note", "a\tb é") is None


@given(st.text(alphabet=st.characters(max_codepoint=0x17F)))
def test_a_header_value_is_judged_by_the_rfc_9110_rule_alone(value: str) -> None:
    """A value is allowed exactly when each character is HTAB, SP, VCHAR or obs-text (RFC 9110
    §5.5), short or long (a long one's verdict is remembered): the same verdict asked twice."""
    allowed = all(c == "\t" or " " <= c <= "~" or "\x80" <= c <= "\xff" for c in value)
    long = value * (1 + 128 // max(len(value), 1)) if value else "x" * 200
    long_allowed = allowed if value else True
    for _ in range(2):
        assert (field_problem("x-note", value) is None) == allowed
        assert (field_problem("x-note", long) is None) == long_allowed


class _Transport(asyncio.Transport):
    """Records what the connection asks of its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


async def test_a_stream_whose_last_piece_paused_reading_leaves_its_connection_reading() -> None:
    """The piece that fills a stream's buffer may also end it: the connection goes back to the pool
    reading again (else the next request on it would wait for ever)."""
    from mcp_preconditions.gateway.upstream.client import _Connection

    pool = Pool("http://127.0.0.1:1/mcp", bounds=BOUNDS)
    connection, transport = _Connection(pool), _Transport()
    connection.connection_made(transport)
    pool._open = 1
    head = asyncio.get_running_loop().create_task(connection.exchange(b"request"))
    await asyncio.sleep(0)
    body = b"x" * (2 << 20)
    connection.data_received(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"content-length: %d\r\n\r\n" % len(body) + body)
    response = await head
    assert response.complete and not transport.paused
    assert pool._idle == [connection]
    assert b"".join([part async for part in response.stream()]) == body
