"""One caller's requests hold at most half of a server's pooled connections (SPEC §14, issue 39 item
13): one caller's 100 slow calls held every connection, and another caller's instant call waited
9.9 s. A server double holds alice's calls until the test releases them; bob's call is answered
while every one of hers is held, and no more of hers reach the server than half the pool.

With events, never times: the double tells when it holds alice's share, and the assertions are
made while it still holds them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import anyio
import pytest

from mcp_preconditions.credentials import Credential
from mcp_preconditions.gateway.upstream.caller_sessions import AsCaller, CallerSessions
from mcp_preconditions.gateway.upstream.client import Pool
from mcp_preconditions.gateway.upstream.peer import OwnerHooks
from tests.fixtures.caller_gateway import as_caller, caller_gateway, secret
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, WireDouble, result, wire_double


def holding(double: WireDouble, who: str, share: int) -> tuple[asyncio.Event, asyncio.Event]:
    """Script `double` to hold every tools/call of `who`'s (their authorization) until `release`;
    `full` is set once `share` of them are held."""
    release, full = asyncio.Event(), asyncio.Event()

    def script(post: Post) -> Reply | None:
        if post.method != "tools/call" or post.authorization != who:
            return None
        if sum(1 for p in double.calls() if p.authorization == who) >= share:
            full.set()
        return Reply([result(post, {"content": []})], hold=release)

    double.script = script
    return release, full


async def test_one_callers_requests_hold_at_most_half_the_pool() -> None:
    async with wire_double() as double:
        sessions = CallerSessions(double.url, "double", NO_CLIENT,
                                  connections=4)
        alice = AsCaller("alice", Credential.bearer("alice", "per-subject"))
        bob = AsCaller("bob", Credential.bearer("bob", "per-subject"))
        release, full = holding(double, "Bearer alice", 2)
        try:
            hers = [asyncio.ensure_future(sessions.request(alice, "tools/call", {}, timeout=10))
                    for _ in range(10)]
            await full.wait()  # two of hers at the server, held
            answer = await sessions.request(bob, "tools/call", {}, timeout=10)
            assert answer["content"][0]["text"] != ""  # bob's, answered while hers are held
            assert not any(h.done() for h in hers)
            assert [p.authorization for p in double.calls()].count("Bearer alice") == 2
            release.set()
            assert len(await asyncio.gather(*hers)) == 10
            assert [p.authorization for p in double.calls()].count("Bearer alice") == 10
        finally:
            await sessions.close()


async def test_the_pool_wakes_a_waiting_caller_when_a_connection_frees() -> None:
    """Bounds of the pool itself: a request of an owner at its share waits while the pool has
    room (others still go), and goes once one of its own connections is released."""
    pool = Pool("http://127.0.0.1:1/mcp", limit=4)
    assert pool.share == 2 and Pool("http://127.0.0.1:1/mcp", limit=1).share == 1
    async with wire_double() as double:
        pool = Pool(double.url, limit=4)
        release, full = holding(double, "Bearer a", 2)
        held = [asyncio.ensure_future(_post(pool, "a", n)) for n in range(3)]
        await full.wait()
        assert pool.held_by("a") == 2  # the third waits
        other = await _post(pool, "b", 9)
        assert other.status == 200 and not held[2].done()
        release.set()
        assert [r.status for r in await asyncio.gather(*held)] == [200] * 3
        assert pool.held_by("a") == 0 and pool.held_by("b") == 0
        pool.close()


async def _post(pool: Pool, who: str, rid: int) -> Any:
    body = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{}}' % rid
    response = await pool.request("POST", {"authorization": f"Bearer {who}",
                                           "content-type": "application/json",
                                           "accept": "application/json"}, body, owner=who)
    await response.read()
    return response


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
async def test_through_the_gateway_another_callers_call_is_answered_while_one_holds_half(
        modern: bool) -> None:
    """Alice's 120 slow calls to a server with per-caller credentials (the pool: 100 connections)
    reach it 50 at a time; bob's call is answered while those 50 are held (before, hers took all
    100 and his waited for them). At 2026-07-28 (no sessions: callers' requests go on the
    gateway's own connections, each with its credential) alike."""
    async with wire_double(modern=modern) as crm:
        gateway = caller_gateway({"crm": crm.url}, ["crm"])
        release, full = holding(crm, secret("crm", "alice"), 50)
        async with served(gateway) as url, as_caller(url, "alice") as alice, \
                as_caller(url, "bob") as bob:
            hers = [asyncio.ensure_future(alice.call_tool("crm__echo", {})) for _ in range(120)]
            await full.wait()
            with anyio.fail_after(10):  # (a deadline for the failure only: it waits for nothing)
                result: Any = await bob.call_tool("crm__echo", {})
            assert not result.is_error and not any(h.done() for h in hers)
            held = [p.authorization for p in crm.calls()].count(secret("crm", "alice"))
            assert held == 50
            release.set()
            assert not any(r.is_error for r in await asyncio.gather(*hers))
        assert [p.authorization for p in crm.calls()].count(secret("crm", "alice")) == 120


async def _no_request(owner: Hashable, method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)


NO_CLIENT = OwnerHooks(_no_request, lambda owner, method, params: None)
