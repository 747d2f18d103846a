"""What a server sends on one caller's session goes to that caller alone (SPEC §14, issue 39 item 5):
a notification sent on alice's session reached bob's GET stream. Notifications on a caller's
session or request stream reach that caller's own connections and streams only; the server's
requests to the client (sampling, elicitation, roots) likewise go only to that caller, whoever
else has calls in flight; what a server with credentials sends on the gateway's own session
reaches no caller.

The gateway in-process, served to the SDK's client, in front of wire doubles: `crm` takes
per-caller credentials, `plain` only the gateway's static header (whose GET stream carries a
marker every client gets: what a client has not received before it, it never will).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.fixtures.caller_gateway import as_caller, caller_gateway, secret
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, WireDouble, result, wire_double


def completed(elicitation: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
            "params": {"elicitationId": elicitation}}


class Inbox:
    """The elicitation ids a client was told are complete, in order, and who asked it what."""

    def __init__(self) -> None:
        self.completed: list[str] = []
        self.asked: list[str] = []
        self.changed = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            self.completed.append(message.params.elicitation_id)
            self.changed.set()

    async def elicitation(self, context: Any, params: Any) -> Any:
        self.asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"ok": True})

    async def until(self, elicitation: str) -> None:
        while elicitation not in self.completed:
            self.changed.clear()
            await self.changed.wait()


@asynccontextmanager
async def fleet(modern: bool = False) -> AsyncIterator[tuple[WireDouble, WireDouble, str]]:
    """crm (2026-07-28 only when `modern`: a caller's requests then go on the gateway's own
    connection, with their credential, and what comes on their request's stream is theirs)."""
    async with wire_double(modern=modern) as crm, wire_double() as plain:
        gateway = caller_gateway({"crm": crm.url, "plain": plain.url}, ["crm"])
        async with served(gateway) as url:
            yield crm, plain, url


async def clients(stack: AsyncExitStack, url: str, plain: WireDouble, **who: Inbox
                  ) -> dict[str, Client]:
    """A 2025-11-25 client per caller, each known to the gateway and its GET stream open (each
    has had a marker pushed on `plain`'s own session)."""
    opened = {name: await stack.enter_async_context(as_caller(
        url, name, message_handler=inbox, elicitation_callback=inbox.elicitation))
        for name, inbox in who.items()}
    for client in opened.values():
        await client.list_tools()
    await plain.streaming.wait()
    await marker(plain, "ready", *who.values())
    return opened


async def marker(plain: WireDouble, name: str, *inboxes: Inbox) -> None:
    """A notification on the gateway's own session of a server without credentials, which every
    client gets: once it has, anything sent to them before it has arrived."""
    plain.push(next(iter(plain.sessions)), completed(name))
    for inbox in inboxes:
        await inbox.until(name)


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
async def test_a_notification_on_alices_session_reaches_her_alone(modern: bool) -> None:
    alice, bob = Inbox(), Inbox()
    async with fleet(modern) as (crm, plain, url), AsyncExitStack() as stack:
        def on_her_stream(post: Post) -> Reply | None:
            if post.method != "tools/call":
                return None
            return Reply([completed(f"for {post.authorization}"), result(post, {"content": []})],
                         sse=True)

        crm.script = on_her_stream
        client = (await clients(stack, url, plain, alice=alice, bob=bob))["alice"]
        await client.call_tool("crm__echo", {})
        await alice.until(f"for {secret('crm', 'alice')}")
        await marker(plain, "after", alice, bob)
    assert bob.completed == ["ready", "after"]  # never alice's
    assert alice.completed == ["ready", f"for {secret('crm', 'alice')}", "after"]


async def test_a_notification_on_the_gateways_own_session_of_a_credentialed_server_reaches_no_one(
        ) -> None:
    alice = Inbox()
    async with fleet() as (crm, plain, url), AsyncExitStack() as stack:
        await clients(stack, url, plain, alice=alice)
        await crm.streaming.wait()  # the gateway's own session with crm (its GET stream)
        crm.push(next(iter(crm.sessions)), completed("the service account's"))
        await marker(plain, "after", alice)
    assert alice.completed == ["ready", "after"]


async def test_a_servers_request_on_alices_stream_goes_to_her_while_bobs_calls_are_in_flight(
        ) -> None:
    """Before, with two callers' calls in flight, the gateway could not tell whose session asked
    and refused the request; now it knows: alice is asked, bob never is."""
    alice, bob = Inbox(), Inbox()
    release, answered = asyncio.Event(), asyncio.Event()
    async with fleet() as (crm, plain, url), AsyncExitStack() as stack:
        def script(post: Post) -> Reply | None:
            if post.method is None and post.id == "ask-1":
                answered.set()  # the gateway's answer to the server's request
                return None
            if post.method != "tools/call":
                return None
            if post.authorization == secret("crm", "bob"):
                return Reply([result(post, {"content": []})], hold=release)
            ask = {"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
                   "params": {"message": "whose?", "requestedSchema": {
                       "type": "object", "properties": {"ok": {"type": "boolean"}}}}}
            return Reply([ask, answered, result(post, {"content": []})], sse=True)

        crm.script = script
        both = await clients(stack, url, plain, alice=alice, bob=bob)
        his = asyncio.ensure_future(both["bob"].call_tool("crm__echo", {}))
        while not any(p.authorization == secret("crm", "bob") for p in crm.calls()):
            await asyncio.sleep(0.01)  # (his call is at the server, held)
        hers: Any = await both["alice"].call_tool("crm__echo", {})
        answer = next(p for p in crm.posts if p.method is None and p.id == "ask-1")
        release.set()
        await his
    assert not hers.is_error and alice.asked == ["whose?"] and bob.asked == []
    assert answer.authorization == secret("crm", "alice")  # answered on her session
