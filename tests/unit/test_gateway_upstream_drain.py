"""A connection is kept after a request's answer on an event stream (gateway/upstream/response.py,
`Response.drain`; issue 42 item 5): the rest of the stream is discarded unread, and the connection
goes back to the pool when the stream ends within DRAIN_BYTES and DRAIN_SECONDS, else it is closed.
What follows an answer is never handed on (to its caller or anyone else), a draining connection
holds no caller's share and gives way to any request, and a server that never ends its stream
holds nothing past the bound. The server runs on the test's loop and counts the connections it
accepted; the drain's time bound runs on a fake clock (`Pool(later=...)`).
"""

from __future__ import annotations

import asyncio

import pytest

from mcp_preconditions.gateway.upstream.response import DRAIN_BYTES, DRAIN_SECONDS
from tests.fixtures.draining_server import (
    END,
    HEAD,
    WAIT,
    FakeLater,
    Watched,
    after_the_answer,
    answer,
    call,
    chunk,
    event,
    heard,
    link,
    more_than_the_bound,
    serving,
    silent,
)


async def test_sequential_answers_on_event_streams_use_one_connection() -> None:
    """Fails before the drain: each answer's connection was closed, five calls took five."""
    async with serving() as server:
        pool, got = Watched(server), heard()
        one = link(server, pool, got)
        for rid in range(1, 6):
            async with asyncio.timeout(WAIT):
                await one.send(call(rid))
            await server.until(pool.settled)  # the stream's end has come: kept, or closed
        pool.close()
    assert got == [answer(rid, "alice") for rid in range(1, 6)]
    assert server.accepted == 1


async def test_a_stream_going_on_past_the_byte_bound_is_closed_and_the_next_call_connects_anew(
        ) -> None:
    async with serving(more_than_the_bound) as server:
        later = FakeLater()
        pool, got = Watched(server, later=later), heard()
        one = link(server, pool, got)
        await one.send(call(1))
        await server.until(lambda: server.ended == 1)  # closed at DRAIN_BYTES, not by the clock
        await one.send(call(2))
        await server.until(lambda: server.ended == 2)  # the same bound again
        assert not pool._draining and pool._open == 0
        pool.close()
    assert got == [answer(1, "alice"), answer(2, "alice")]
    assert server.accepted == 2


async def test_a_stream_that_never_ends_is_closed_after_drain_seconds_and_holds_nothing() -> None:
    async with serving(silent) as server:
        later = FakeLater()
        pool, got = Watched(server, later=later), heard()
        one = link(server, pool, got)
        await one.send(call(1))
        assert len(pool._draining) == 1 and pool.held_by("alice") == 0  # nobody's share
        later.advance(DRAIN_SECONDS - 0.01)
        assert len(pool._draining) == 1 and server.ended == 0
        later.advance(0.01)
        assert not pool._draining and pool._open == 0  # no task or timer left either
        await server.until(lambda: server.ended == 1)
        await one.send(call(2))
        pool.close()
    assert got == [answer(1, "alice"), answer(2, "alice")]
    assert server.accepted == 2


async def test_a_draining_connection_gives_way_to_a_request_of_a_full_pool() -> None:
    async with serving(silent) as server:
        later = FakeLater()  # never advanced: the drain would last
        pool, got = Watched(server, limit=1, later=later), heard()
        one = link(server, pool, got)
        await one.send(call(1))
        async with asyncio.timeout(WAIT):
            await one.send(call(2))  # closes the drain at once, never waits for it
        await server.until(lambda: server.ended == 1)
        assert pool._open == 1
        pool.close()
    assert got == [answer(1, "alice"), answer(2, "alice")]
    assert server.accepted == 2


NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
ASKS = {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {}}

# name, what the server writes after the answer, connections the two calls take.
ROWS: list[tuple[str, bytes, int]] = [
    ("a notification, a request of the call, its answer again, the next call's answer, then the end",
     chunk(event(NOTE) + event(ASKS) + event(answer(1, "again")) + event(answer(2, "early")))
     + END, 1),
    ("bytes that are no event, then the end", chunk(b"\x00\xff\r\nnot: sse\n{]\n\n") + END, 1),
    ("bad chunk framing", b"zz\r\nxx\r\n", 2),
    ("the end, then a response nobody asked for", END + HEAD + chunk(event(answer(2, "early"))),
     2),
    ("an event cut by the end", chunk(b'data: {"jsonrpc": "2.0", "id": 2, "res') + END, 1),
]


@pytest.mark.parametrize(("name", "tail", "connections"), ROWS, ids=[r[0] for r in ROWS])
async def test_what_follows_an_answer_reaches_nobody_and_the_connection_is_kept_only_if_sound(
        name: str, tail: bytes, connections: int) -> None:
    """Two callers on one pool (SPEC §14): what the server sends after alice's answer never
    reaches alice or bob, and bob's call gets bob's answer alone, on the kept connection or a
    new one."""
    async with serving(after_the_answer(tail)) as server:
        pool, alice, bob = Watched(server), heard(), heard()
        dropped: list[str] = []
        to_alice, to_bob = link(server, pool, alice, "alice"), link(server, pool, bob, "bob")
        to_alice.dropped = to_bob.dropped = dropped.append
        async with asyncio.timeout(WAIT):
            await to_alice.send(call(1))
            await server.until(pool.settled)
            await to_bob.send(call(2))
        pool.close()
    assert (alice, bob) == ([answer(1, "alice")], [answer(2, "bob")]), name
    assert dropped == [], name  # never read, so never counted: as before the drain
    assert server.accepted == connections, name


async def test_the_byte_bound_counts_what_follows_the_answer_whatever_its_pieces() -> None:
    """At the bound exactly the connection is kept; one byte more and it is closed."""
    for size, connections in ((DRAIN_BYTES, 1), (DRAIN_BYTES + 1, 2)):
        comment = b":" + b"c" * (size - 3) + b"\n\n"  # `size` bytes of body after the answer
        pieces = [chunk(comment[i:i + 1000]) for i in range(0, len(comment), 1000)]
        async with serving(after_the_answer(*pieces, END)) as server:
            pool, got = Watched(server), heard()
            one = link(server, pool, got)
            await one.send(call(1))
            await server.until(pool.settled)
            await one.send(call(2))
            pool.close()
        assert got == [answer(1, "alice"), answer(2, "alice")]
        assert server.accepted == connections, size


@pytest.mark.parametrize("head", [
    HEAD.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"),
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
], ids=["connection: close", "delimited by the connection's end"])
async def test_a_stream_that_cannot_leave_its_connection_reusable_is_closed_at_once(
        head: bytes) -> None:
    async with serving(silent, head) as server:
        later = FakeLater()  # never advanced: only the answer closes it
        pool, got = Watched(server, later=later), heard()
        one = link(server, pool, got)
        await one.send(call(1))
        assert not pool._draining and pool._open == 0
        await server.until(lambda: server.ended == 1)
        pool.close()
    assert got == [answer(1, "alice")]
