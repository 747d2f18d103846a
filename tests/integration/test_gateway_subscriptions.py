"""2025-11-25 clients' `resources/subscribe` in front of a 2026-07-28-only upstream (which has no
such method): the gateway holds a listen stream naming the URI upstream, and
notifications/resources/updated reach exactly the clients subscribed to that URI.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the asking upstream in memory (2026-07-28 only), the clients on its app over the streaming
bridge, a stdio gateway's one client included (its subscriptions are the gateway's, not its stdio
listener's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from tests.fixtures.asking_upstream import open_policy  # noqa: F401 (the `policy` fixture)
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway
from tests.fixtures.memory_upstream import MemoryServers

pytestmark = pytest.mark.asyncio(loop_scope="module")
HTTP = ("--listen", "http://127.0.0.1:0")


@asynccontextmanager
async def modern_only_gateway(policy: Path, log: Path, *options: str) -> AsyncIterator[InProcess]:
    """`gateway --policy P OPTIONS -- ASKING_UPSTREAM` in-process, the upstream in memory speaking
    2026-07-28 only, once it is listed."""
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.asking_upstream(ASKING_UPSTREAM_LOG=str(log),
                                           ASKING_UPSTREAM_MODERN_ONLY="1")
        async with cli_gateway(["--policy", str(policy), *options, "--", *upstream]) as gateway:
            await gateway.until_ready()
            yield gateway


class Updates:
    """A client's message handler: the URIs it was told changed."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))

    async def until(self, count: int) -> None:
        with anyio.fail_after(WAIT_SECONDS):
            while len(self.uris) < count:
                await anyio.sleep(0.01)


async def test_updates_reach_exactly_the_subscribed_2025_clients(tmp_path: Path, policy: Path) -> None:
    a, b, other, none = Updates(), Updates(), Updates(), Updates()
    async with modern_only_gateway(policy, tmp_path / "upstream.jsonl", *HTTP) as gw, \
            gw.client("legacy", message_handler=a) as one, \
            gw.client("legacy", message_handler=b) as two, \
            gw.client("legacy", message_handler=other) as three, \
            gw.client("legacy", message_handler=none) as four:
        assert one.server_capabilities.resources is not None
        assert one.server_capabilities.resources.subscribe
        await one.subscribe_resource("test://a")
        await two.subscribe_resource("test://a")
        await three.subscribe_resource("test://b")
        await four.list_resources()
        await four.call_tool("touch", {"uri": "test://a"})
        await a.until(1)
        await b.until(1)
        # One client letting go does not end the other's subscription upstream.
        await one.unsubscribe_resource("test://a")
        await four.call_tool("touch", {"uri": "test://a"})
        await b.until(2)
        await four.call_tool("touch", {"uri": "test://b"})
        await other.until(1)
    assert a.uris == ["test://a"]
    assert b.uris == ["test://a", "test://a"]
    assert other.uris == ["test://b"]
    assert none.uris == []


async def test_a_stdio_client_subscribes_in_front_of_a_2026_only_upstream(
        tmp_path: Path, policy: Path) -> None:
    updates = Updates()
    async with modern_only_gateway(policy, tmp_path / "upstream.jsonl") as gw, \
            gw.client("legacy", message_handler=updates) as client:
        await client.subscribe_resource("test://b")
        await client.call_tool("touch", {"uri": "test://a"})
        await client.call_tool("touch", {"uri": "test://b"})
        await updates.until(1)
        await client.unsubscribe_resource("test://b")
        await client.call_tool("touch", {"uri": "test://b"})
        await client.call_tool("touch", {"uri": "test://a"})
        await client.list_resources()
    assert updates.uris == ["test://b"]
