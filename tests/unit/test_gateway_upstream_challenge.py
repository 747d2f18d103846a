"""What the gateway's HTTP link to a server hands on of a refusal (SPEC §14, §17): a 401 or 403 with
`WWW-Authenticate` fails the request with UpstreamChallenged carrying that challenge (a caller's
renewal reads its step-up scope), and tells the link's `refused` hook when the request went with the
link's own headers (an account lent to the gateway's own session is renewed), never for a caller's.
A server that offers no GET stream and no session (404 to the GET) does not lose the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from mcp_preconditions.gateway.errors import UpstreamChallenged
from mcp_preconditions.gateway.upstream.http import HttpLink

CHALLENGE = 'Bearer error="insufficient_scope", scope="mcp:write"'
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}


@asynccontextmanager
async def refusing(status: int, get_status: int = 404) -> AsyncIterator[str]:
    """Answers each POST with `status` and the challenge, each GET with `get_status`."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if head.startswith(b"GET"):
                    writer.write(f"HTTP/1.1 {get_status} X\r\ncontent-length: 0\r\n\r\n".encode())
                else:
                    writer.write(f"HTTP/1.1 {status} X\r\nwww-authenticate: {CHALLENGE}\r\n"
                                 "content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                                 .encode())
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


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refusal_carries_its_challenge_and_tells_the_link_of_its_own_headers(
        status: int) -> None:
    told: list[str] = []
    async with refusing(status) as url:
        link = HttpLink(url, {"Authorization": "Bearer lent"}, lambda _m, _via: None, "raw",
                        refused=told.append)
        with pytest.raises(UpstreamChallenged) as own:
            await link.send(CALL)
        with pytest.raises(UpstreamChallenged) as callers:
            await link.send(CALL, headers={"Authorization": "Bearer a-callers"})
        await link.close()
    assert (own.value.status, own.value.challenge) == (status, CHALLENGE)
    assert callers.value.challenge == CHALLENGE
    assert told == [CHALLENGE]  # the link's own headers only, never a caller's


async def test_no_get_stream_and_no_session_is_not_a_lost_session() -> None:
    """Before, a server answering 404 to the GET (an Express app serving POST only, as the
    conformance suite's servers are) lost the gateway's session each time it was opened."""
    async with refusing(401, get_status=404) as url:
        link = HttpLink(url, {}, lambda _m, _via: None, "raw")
        answered = asyncio.Event()
        link.listen(answered.set)
        assert link._listening is not None
        async with asyncio.timeout(5):
            await answered.wait()
            await link._listening  # the GET stream given up: the server offers none
        assert not link.lost.is_set()
        link.session_id = "s-1"  # with a session, a 404 is that session gone
        link._listening = None
        link.listen()
        async with asyncio.timeout(5):
            await link.lost.wait()
        await link.close()
