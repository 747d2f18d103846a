"""A server's re-listing never holds calls (SPEC §14, issue 39 item 9): one server's `list_changed`
with a slow `tools/list` held every call to every other server (7.7 s for one change). While a
server re-lists, calls to the others go at once, and its own calls use its last good catalog.

The gateway in-process, served to the SDK's client, in front of two wire doubles; b's second
`tools/list` (the re-list its `list_changed` asks for) is held until the test releases it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from mcp import Client

from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, result, wire_double

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_a_slow_relist_holds_no_call_and_its_server_calls_use_the_last_good_catalog() -> None:
    release, relisting = asyncio.Event(), asyncio.Event()
    async with wire_double() as a, wire_double() as b:
        listed = [0]

        def slow_relist(post: Post) -> Reply | None:
            if post.method != "tools/list":
                return None
            listed[0] += 1
            if listed[0] == 1:
                return None  # the first listing: echo
            relisting.set()
            return Reply([result(post, {"tools": [{"name": "echo", "inputSchema": {
                "type": "object"}}, {"name": "late", "inputSchema": {"type": "object"}}]})],
                hold=release)

        b.script = slow_relist
        guard = Guard(parse_policy(b"", "policy.toml"))
        gateway = Gateway(guard, [ServerSpec("a", "a__", url=a.url), ServerSpec("b", "b__", url=b.url)],
                          lambda _call: ANONYMOUS)
        async with served(gateway) as url, Client(url, mode="legacy") as client:
            with anyio.fail_after(30):
                while {"a__echo", "b__echo"} - {t.name for t in (await client.list_tools()).tools}:
                    await anyio.sleep(0.02)
                await b.streaming.wait()  # the gateway's own session's GET stream, at b
                b.push(next(iter(b.sessions)), LIST_CHANGED)
                await relisting.wait()  # b's re-list is under way, and held
                other: Any = await client.call_tool("a__echo", {})
                own: Any = await client.call_tool("b__echo", {})
                tools = {t.name for t in (await client.list_tools()).tools}
            assert not release.is_set() and listed[0] == 2  # all of it while the re-list was held
            assert [c.params["name"] for c in a.calls()] == ["echo"]
            assert [c.params["name"] for c in b.calls()] == ["echo"]  # by its last good catalog
            assert not other.is_error and not own.is_error
            assert "b__late" not in tools and {"a__echo", "b__echo"} <= tools
            release.set()
            with anyio.fail_after(30):  # once it is in, the new listing is the catalog
                while "b__late" not in {t.name for t in (await client.list_tools()).tools}:
                    await anyio.sleep(0.02)
