"""The bounds of SPEC §14 in a real redis-server, as in memory (issues 39.10, 39.11): a caller's
pending connect links and flows (16, the oldest dropped) follow the same reference model as
MemoryTickets (tests/properties/test_credentials_props.py); the sign-in store keeps at most its
limit (10,000 in a gateway), forgetting a flow as it is taken; and a visitor who opens
`/connections` without starting a sign-in writes nothing to Redis. Before, each unauthenticated
page wrote a 600 s key, and neither bound existed in Redis.

Interop, marked, with why: Redis is the component under test (the tickets' scripts, their keys and
what a visit leaves in the real server), the last test with the real provider's sign-in through the
pages; the same bounds in memory are tests/properties/test_credentials_props.py's, in the default
tier.
"""

from __future__ import annotations

import asyncio
import html
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis
from hypothesis import given, settings

from mcp_preconditions.credentials import Caller
from mcp_preconditions.credentials.connect import MAX_PENDING
from mcp_preconditions.credentials.stores_redis import RedisTickets
from mcp_preconditions.errors import FlowError
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.credential_pages import pages, run
from tests.fixtures.oidc import OidcServer, sign_in
from tests.fixtures.redis import RedisServer
from tests.properties.test_credentials_props import LIMIT, OWNED_OPS, Owned

pytestmark = [pytest.mark.integration, pytest.mark.interop]


def source(server: RedisServer) -> RedisStateSource:
    return RedisStateSource(server.url, connect_timeout=10, read_timeout=10)


def fresh() -> str:
    return f"bounds-{os.getpid()}-{time.monotonic_ns()}:"


def keys(server: RedisServer, prefix: str) -> list[str]:
    with redis.Redis.from_url(server.url) as client:
        return sorted(k.decode() for k in client.scan_iter(match=prefix + "*"))


@settings(max_examples=25, deadline=None)
@given(OWNED_OPS)
def test_an_owners_tickets_in_redis_match_the_reference(redis_server: RedisServer,
                                                        ops: list[tuple[Any, ...]]) -> None:
    async def run_ops() -> None:
        tickets, ref = RedisTickets(source(redis_server), fresh()), Owned()
        for op in ops:
            if op[0] == "wait":  # (Redis keeps its own time: expiry is the memory model's part)
                continue
            key = op[1] + op[2]
            if op[0] == "put":
                await tickets.put_for(op[1], key, op[3], 600, LIMIT)
                ref.put_for(op[1], key, op[3], 600)
            elif op[0] == "get":
                assert await tickets.get(key) == ref.read(key)
            else:
                assert await tickets.take(key) == ref.read(key, remove=True)
    asyncio.run(run_ops())


def test_a_stores_limit_holds_and_a_taken_ticket_leaves_room(redis_server: RedisServer) -> None:
    prefix = fresh()

    async def scenario() -> None:
        tickets = RedisTickets(source(redis_server), prefix, limit=5)
        for n in range(8):
            await tickets.put(f"signin:{n}", b"v%d" % n, 600)
        assert [await tickets.get(f"signin:{n}") for n in range(8)] == [None] * 3 + [
            b"v%d" % n for n in range(3, 8)]
        assert await tickets.take("signin:3") == b"v3"
        await tickets.delete("signin:4")
        for n in (8, 9):
            await tickets.put(f"signin:{n}", b"v%d" % n, 600)
        assert [await tickets.get(f"signin:{n}") for n in (5, 6, 7, 8, 9)] == [
            b"v5", b"v6", b"v7", b"v8", b"v9"]  # the two forgotten made room: nothing pushed out
    asyncio.run(scenario())
    assert keys(redis_server, prefix) == [prefix + "index", *(f"{prefix}signin:{n}" for n in range(5, 10))]


def test_a_callers_flows_in_redis_are_bounded_and_a_visitor_writes_nothing(
        oidc_server: OidcServer, redis_server: RedisServer) -> None:
    prefix = fresh()
    tickets = RedisTickets(source(redis_server), prefix)
    with pages(oidc_server, tickets=tickets) as site:
        for _ in range(30):  # a visitor who never starts a sign-in
            shown = httpx.get(site.base + "/connections", headers={"Accept": "text/html"}, timeout=10)
            assert shown.status_code == 200 and "/connections/sign-in" in shown.text
        assert keys(redis_server, prefix) == []

        alice = site.identity(oidc_server.user_token("alice"))
        caller = Caller(oidc_server.issuer, "alice")
        flow = site.resolver.connect
        assert flow is not None

        async def start() -> str:
            url = await site.resolver.connect_url("credential:wiki", alice)
            assert url is not None
            link = await flow.use(url.rsplit("/", 1)[1])
            return parse_qs(urlsplit(await flow.authorize(link, "browser-1")).query)["state"][0]

        states = [run(start()) for _ in range(MAX_PENDING + 3)]
        pending = [k for k in keys(redis_server, prefix) if "state:" in k]
        assert len(pending) == MAX_PENDING
        for state in states[:3]:
            with pytest.raises(FlowError, match="Unknown, used or expired state"):
                run(flow.callback({"state": state, "code": "c"}, "browser-1", caller))

        with httpx.Client(timeout=10) as client:  # the newest still connects its caller, signed in
            client.cookies.set("mcp_preconditions_flow", "browser-1")
            started = client.get(site.base + "/connections/sign-in")
            back = sign_in(client, started.headers["location"], site.base + "/connect/callback", "alice")
            assert client.get(back).status_code == 303
            # (with the provider's `iss`, which it advertises it always sends: RFC 9207)
            done = client.get(f"{site.base}/oauth/callback",
                              params={"state": states[-1], "code": "made-up", "iss": oidc_server.issuer})
        assert done.status_code == 400 and "refused the code" in html.unescape(done.text)
