"""A server's re-listing never holds calls (SPEC §14, issue 39 item 9): one server's `list_changed`
with a slow `tools/list` held every call to every other server (7.7 s for one change), and a slow
prompts or resources re-list held every prompt, resource, completion and subscription routed
(5 s each). While a server re-lists, calls to the others go at once, and its own calls use its
last good catalog.

The gateway in-process, served to the SDK's client, in front of two wire doubles; b's re-lists
(the listings its `list_changed` asks for) are held until the test releases them.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.gateway import Gateway, ServerSpec, listings
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, WireDouble, result, wire_double

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
            with anyio.fail_after(10):
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
            with anyio.fail_after(10):  # once it is in, the new listing is the catalog
                while "b__late" not in {t.name for t in (await client.list_tools()).tools}:
                    await anyio.sleep(0.02)


LISTS = ("prompts/list", "resources/list", "resources/templates/list")


def _relisted(post: Post) -> dict[str, Any]:
    """b's listings after its change (anonymous: its URIs name `None`): a prompt more."""
    if post.method == "prompts/list":
        return {"prompts": [{"name": "greet"}, {"name": "late"}]}
    if post.method == "resources/list":
        return {"resources": [{"uri": "b://None", "name": "None"}]}
    return {"resourceTemplates": [{"uriTemplate": "b://{who}", "name": "whose"}]}


async def test_a_slow_relist_of_prompts_and_resources_holds_no_routed_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`prompts/get`, `resources/read`, completions (by prompt and by template) and subscriptions
    are routed by each server's last good listings while b re-lists its prompts and resources
    (held until released), to a and to b alike. A listing that is waited for would be waited for
    until released here (the bound of a wait for a slow listing is lifted), so a request that
    waits never answers before the release: on c9a2f0f the first of them, `prompts/get a__greet`,
    waits for b's re-list until the test's safety net ends it."""
    monkeypatch.setattr(listings, "LIST_WAIT_SECONDS", math.inf)
    release = asyncio.Event()
    held = {method: asyncio.Event() for method in LISTS}
    armed = [False]

    def slow_relist(post: Post) -> Reply | None:
        if post.method not in LISTS or not armed[0]:
            return None
        held[post.method].set()
        return Reply([result(post, _relisted(post))], hold=release)

    async with wire_double() as a, wire_double() as b:
        a.scheme, b.scheme = "a", "b"
        b.script = slow_relist
        gateway = Gateway(Guard(parse_policy(b"", "policy.toml")),
                          [ServerSpec("a", "a__", url=a.url), ServerSpec("b", "b__", url=b.url)],
                          lambda _call: ANONYMOUS)
        async with served(gateway) as url, Client(url, mode="legacy") as client:
            with anyio.fail_after(10):
                assert {p.name for p in (await client.list_prompts()).prompts} == \
                    {"a__greet", "b__greet"}
                await client.list_resources()
                await client.list_resource_templates()
                armed[0] = True
                await _changed(b, held)
                answers = await _routed(client)
            assert not release.is_set()  # all of it while b's re-lists were held
            assert answers == {"a__greet": "None", "b__greet": "None", "a://None": "None",
                               "b://None": "None", "ref/prompt b__greet": ["None"],
                               "ref/resource a://{who}": ["None"]}
            assert [p.params["name"] for p in a.calls("prompts/get")] == ["greet"]
            assert [p.params["name"] for p in b.calls("prompts/get")] == ["greet"]
            assert [p.params["uri"] for p in b.calls("resources/subscribe")] == ["b://None"]
            assert [p.params["uri"] for p in b.calls("resources/unsubscribe")] == ["b://None"]
            release.set()
            with anyio.fail_after(10):  # once it is in, the new listing routes
                while "b__late" not in {p.name for p in (await client.list_prompts()).prompts}:
                    await anyio.sleep(0.02)
                await client.get_prompt("b__late")
            assert [p.params["name"] for p in b.calls("prompts/get")] == ["greet", "late"]


async def _changed(b: WireDouble, held: dict[str, asyncio.Event]) -> None:
    """b says its prompts and resources changed, on the gateway's own session's GET stream; once
    this returns, the re-lists that asks for are under way at b, and held."""
    await b.streaming.wait()
    session = next(iter(b.sessions))
    for kind in ("prompts", "resources"):
        b.push(session, {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"})
    await held["prompts/list"].wait()
    await held["resources/list"].wait()


async def _routed(client: Client) -> dict[str, Any]:
    """A request of each routed kind, to a and to b, and what each was answered."""
    found: dict[str, Any] = {}
    for name in ("a__greet", "b__greet"):
        found[name] = _text((await client.get_prompt(name)).messages[0].content)
    for uri in ("a://None", "b://None"):
        found[uri] = _text((await client.read_resource(uri)).contents[0])
    found["ref/prompt b__greet"] = (await client.complete(
        mcp_types.PromptReference(type="ref/prompt", name="b__greet"),
        {"name": "x", "value": ""})).completion.values
    found["ref/resource a://{who}"] = (await client.complete(
        mcp_types.ResourceTemplateReference(type="ref/resource", uri="a://{who}"),
        {"name": "who", "value": ""})).completion.values
    await client.subscribe_resource("b://None")
    await client.unsubscribe_resource("b://None")
    return found


def _text(content: Any) -> str:
    return str(getattr(content, "text", content))
