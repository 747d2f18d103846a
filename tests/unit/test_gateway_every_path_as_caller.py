"""Everything the gateway sends for a caller to a server with credentials goes as that caller, on
their own session (SPEC §14, issue 39 item 3): before, only `tools/call` did, and `resources/read`,
`prompts/get`, completions and subscriptions carried the gateway's static header (bob read alice's
record). The gateway's own session serves only its catalog (`tools/list`) and pings. A caller
without a credential is refused with the `credential:KEY` refusal (JSON-RPC error -32001, the
SEP-2643 envelope in `data`) and nothing is sent; a listing merged across servers leaves that
server out for them, and is that refusal (every server's that refused them) when no server
contributed to it. A subscription, and the update it produces, are the caller's.

The gateway in-process, served to the SDK's client, in front of wire doubles (`crm` with
per-subject credentials; `plain` without), one server and two (merged listings, routing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

from mcp_preconditions.gateway import listings
from tests.fixtures.caller_gateway import SERVICE, as_caller, caller_gateway, secret
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, WireDouble, wire_double

GATEWAYS_OWN = {"initialize", "notifications/initialized", "tools/list", "ping"}
# At 2026-07-28: its description, and its own listen stream for its catalog's changes.
GATEWAYS_OWN_MODERN = {"initialize", "server/discover", "subscriptions/listen", "tools/list"}


@asynccontextmanager
async def fleet(servers: int, modern: bool = False
                ) -> AsyncIterator[tuple[WireDouble, WireDouble, str]]:
    async with wire_double(modern=modern) as crm, wire_double() as plain:
        crm.scheme, plain.scheme = "crm", "plain"
        urls = {"crm": crm.url, "plain": plain.url} if servers == 2 else {"crm": crm.url}
        async with served(caller_gateway(urls, ["crm"])) as url:
            yield crm, plain, url


def session_of(double: WireDouble, authorization: str) -> str:
    (session,) = [s for s, opened_by in double.sessions.items() if opened_by == authorization]
    return session


async def every_method(client: Client, uri: str) -> dict[str, Any]:
    """Each request of the protocol a caller may send, but tools/call; what each answered."""
    prompt = mcp_types.PromptReference(type="ref/prompt", name="crm__greet")
    return {
        "resources/list": [r.uri for r in (await client.list_resources()).resources],
        "resources/templates/list": [t.uri_template for t in
                                     (await client.list_resource_templates()).resource_templates],
        "resources/read": [c.text for c in (await client.read_resource(uri)).contents
                           if isinstance(c, mcp_types.TextResourceContents)],
        "resources/subscribe": await client.subscribe_resource(uri),
        "resources/unsubscribe": await client.unsubscribe_resource(uri),
        "prompts/list": [p.name for p in (await client.list_prompts()).prompts],
        "prompts/get": [m.content.text for m in (await client.get_prompt("crm__greet")).messages
                        if isinstance(m.content, mcp_types.TextContent)],
        "completion/complete": (await client.complete(prompt, {"name": "x", "value": ""}))
        .completion.values,
        "logging/setLevel": await client.set_logging_level("debug"),
    }


@pytest.mark.parametrize(("servers", "modern"), [(1, False), (2, False), (2, True)],
                         ids=["one", "two", "two, crm at 2026-07-28"])
async def test_every_request_for_a_caller_goes_as_them_on_their_session(servers: int,
                                                                        modern: bool) -> None:
    async with fleet(servers, modern) as (crm, _plain, url), as_caller(url, "alice") as alice:
        answered = await every_method(alice, "crm://crm-alice")
    mine = secret("crm", "alice")
    theirs = {p.method for p in crm.posts if p.authorization == mine and p.method is not None}
    expected = set(answered)
    if modern:  # no sessions: a subscription is a listen stream of the caller's own
        expected = expected - {"resources/subscribe", "resources/unsubscribe"} \
            | {"subscriptions/listen"}
    assert theirs - GATEWAYS_OWN == expected  # every one of them as alice
    if not modern:
        session = session_of(crm, mine)
        assert {p.session for p in crm.posts
                if p.authorization == mine and p.method != "initialize"} == {session}
    own = {p.method for p in crm.posts if p.authorization == SERVICE}
    assert own <= (GATEWAYS_OWN_MODERN if modern else GATEWAYS_OWN)  # its catalog and pings
    assert answered["resources/read"] == ["crm-alice"]  # the server's answer to alice
    assert answered["prompts/get"] == ["crm-alice"]
    assert answered["completion/complete"] == ["crm-alice"]
    assert [u for u in answered["resources/list"] if u.startswith("crm:")] == ["crm://crm-alice"]
    if servers == 2:  # merged: the server without credentials listed on the gateway's session
        assert "plain://the-gateways-own" in answered["resources/list"]
        assert answered["prompts/list"] == ["crm__greet", "plain__greet"]


@pytest.mark.parametrize("servers", [1, 2])
@pytest.mark.parametrize("who", ["dave", None], ids=["no entry", "anonymous"])
async def test_a_caller_without_a_credential_is_refused_and_nothing_is_sent(
        servers: int, who: str | None) -> None:
    async with fleet(servers) as (crm, _plain, url), as_caller(url, who) as caller:
        refusals: dict[str, Any] = {}
        requests: dict[str, Callable[[], Awaitable[Any]]] = {
            "resources/read": lambda: caller.read_resource("crm://crm-dave"),
            "resources/subscribe": lambda: caller.subscribe_resource("crm://crm-dave"),
            "prompts/get": lambda: caller.get_prompt("crm__greet"),
            "completion/complete": lambda: caller.complete(
                mcp_types.PromptReference(type="ref/prompt", name="crm__greet"),
                {"name": "x", "value": ""})}
        listings: dict[str, Callable[[], Awaitable[Any]]] = {
            "resources/list": caller.list_resources, "prompts/list": caller.list_prompts,
            "resources/templates/list": caller.list_resource_templates}
        if servers == 1:  # the one server there is refused them: so is the listing (SPEC §14)
            requests.update(listings)
        for method, request in requests.items():
            with pytest.raises(MCPError) as refused:
                await request()
            refusals[method] = refused.value.error
        listed = [r.uri for r in (await caller.list_resources()).resources] if servers == 2 else []
        prompts = [p.name for p in (await caller.list_prompts()).prompts] if servers == 2 else []
    assert {p.method for p in crm.posts} <= GATEWAYS_OWN  # nothing was sent for them
    assert len(refusals) == (7 if servers == 1 else 4)
    for method, error in refusals.items():
        assert error.code == -32001, method
        assert error.message == f"Request {method} was not sent: unmet requirements: credential:crm"
        data = error.data
        assert (data["error"], data["unmet"], data["method"]) == \
            ("unmet_requirements", ["credential:crm"], method)
        envelope = data["_meta"]["io.modelcontextprotocol/authorization"]
        assert (envelope["reason"], envelope["remediation"]) == \
            ("insufficient_authorization", "unavailable")
    if servers == 2:  # merged: the server she may use listed, the other left out
        assert listed == ["plain://the-gateways-own"]
        assert prompts == ["plain__greet"]


@pytest.mark.parametrize("method", ["resources/list", "resources/templates/list", "prompts/list"])
async def test_a_listing_no_server_contributed_to_is_the_refusal_of_every_server(
        method: str) -> None:
    """Two servers with credentials, `wiki` first in the config: carol holds wiki's only, dave
    neither. Carol's listing is wiki's, as her (crm's left out); dave's is the refusal of both,
    in the order of their keys (never an empty listing that hides what he can do), and nothing is
    sent for him."""
    async with wire_double() as wiki, wire_double() as crm:
        wiki.scheme, crm.scheme = "wiki", "crm"
        gateway = caller_gateway({"wiki": wiki.url, "crm": crm.url}, ["wiki", "crm"],
                                 callers={"wiki": ["carol"], "crm": []})
        async with served(gateway) as url, as_caller(url, "carol") as carol, \
                as_caller(url, "dave") as dave:
            hers = await _listing(carol, method)
            with pytest.raises(MCPError) as refused:
                await _listing(dave, method)
    assert hers == {"resources/list": ["wiki://wiki-carol"], "prompts/list": ["wiki__greet"],
                    "resources/templates/list": ["wiki://{who}"]}[method]
    error = refused.value.error
    assert error.code == -32001
    assert error.message == (f"Request {method} was not sent: unmet requirements: "
                             "credential:crm, credential:wiki")
    assert (error.data["method"], error.data["unmet"]) == \
        (method, ["credential:crm", "credential:wiki"])
    assert "io.modelcontextprotocol/authorization" in error.data["_meta"]
    for double in (wiki, crm):  # nothing went as dave, nor carol's request to crm
        assert {p.method for p in double.posts if p.authorization != secret("wiki", "carol")} \
            <= GATEWAYS_OWN


@pytest.mark.parametrize("how", ["fails", "is slow"])
@pytest.mark.parametrize("method", ["resources/list", "resources/templates/list", "prompts/list"])
async def test_a_server_failing_a_listing_is_no_refusal_of_it(
        method: str, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Carol holds wiki's credential, not crm's; wiki fails her listing (an error), or is slower
    than the listing's wait (her session's handshake held until the test ends, as a token
    exchange and a handshake on a loaded machine can be). Her listing leaves both out and is
    answered: wiki did not refuse her for want of a credential, so it is not crm's refusal (on
    b508235 it was `credential:crm`, whenever a loaded machine made her first listing slow:
    test_credentials_every_path's prompts/list failed so under load)."""
    monkeypatch.setattr(listings, "LIST_WAIT_SECONDS", 0.05)  # (never released before it ends)
    never = asyncio.Event()

    def failing(post: Post) -> Reply | None:
        if post.authorization != secret("wiki", "carol"):
            return None
        if how == "is slow" and post.method == "initialize":
            return Reply([], 500, hold=never)
        if how != "fails" or post.method != method:
            return None
        return Reply([{"jsonrpc": "2.0", "id": post.id,
                       "error": {"code": -32603, "message": "the listing broke"}}])

    async with wire_double() as wiki, wire_double() as crm:
        wiki.scheme, crm.scheme = "wiki", "crm"
        wiki.script = failing
        gateway = caller_gateway({"wiki": wiki.url, "crm": crm.url}, ["wiki", "crm"],
                                 callers={"wiki": ["carol"], "crm": []})
        async with served(gateway) as url, as_caller(url, "carol") as carol:
            hers = await _listing(carol, method)
            never.set()
    assert hers == []
    asked = [p.method for p in wiki.posts if p.authorization == secret("wiki", "carol")]
    assert asked == (["initialize", "notifications/initialized", method] if how == "fails"
                     else ["initialize"])  # asked as her
    assert {p.method for p in crm.posts} <= GATEWAYS_OWN  # nothing went to crm for her


async def _listing(client: Client, method: str) -> list[str]:
    if method == "resources/list":
        return [str(r.uri) for r in (await client.list_resources()).resources]
    if method == "prompts/list":
        return [p.name for p in (await client.list_prompts()).prompts]
    return [t.uri_template for t in (await client.list_resource_templates()).resource_templates]


class Updates:
    """The resource URIs a client was told were updated, in order."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.changed = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self.changed.set()

    async def until(self, uri: str) -> None:
        while uri not in self.uris:
            self.changed.clear()
            await self.changed.wait()


def updated(uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


async def test_a_subscription_and_its_updates_are_the_callers() -> None:
    """Alice and bob subscribe to one URI: each on their own session; an update the server
    sends on alice's session reaches alice, never bob (whose own update, sent after it on his
    session, is all he gets)."""
    alice_got, bob_got = Updates(), Updates()
    async with fleet(2) as (crm, _plain, url), AsyncExitStack() as stack:
        alice = await stack.enter_async_context(as_caller(url, "alice", message_handler=alice_got))
        bob = await stack.enter_async_context(as_caller(url, "bob", message_handler=bob_got))
        await alice.subscribe_resource("crm://shared")
        await bob.subscribe_resource("crm://shared")
        await bob.subscribe_resource("crm://bobs")
        subscribed = {(p.authorization, p.session) for p in crm.posts
                      if p.method == "resources/subscribe"}
        hers, his = session_of(crm, secret("crm", "alice")), session_of(crm, secret("crm", "bob"))
        assert subscribed == {(secret("crm", "alice"), hers), (secret("crm", "bob"), his)}
        while not (crm.stream_open(hers) and crm.stream_open(his)):
            await asyncio.sleep(0.01)  # each caller's session listens for their updates
        crm.push(hers, updated("crm://shared"))
        await alice_got.until("crm://shared")
        crm.push(his, updated("crm://bobs"))
        await bob_got.until("crm://bobs")
    assert alice_got.uris == ["crm://shared"]
    assert bob_got.uris == ["crm://bobs"]


async def test_a_listen_stream_subscribes_as_its_caller() -> None:
    """A 2026-07-28 client's listen stream naming a resource of a server with credentials: the
    gateway subscribes as that caller, on their session; an update on alice's session reaches her
    stream, never bob's (his own update, sent after it, is the first he gets)."""
    async with fleet(2) as (crm, _plain, url), AsyncExitStack() as stack:
        alice = await stack.enter_async_context(as_caller(url, "alice", mode="auto"))
        bob = await stack.enter_async_context(as_caller(url, "bob", mode="auto"))
        hers_listen = await stack.enter_async_context(
            alice.listen(resource_subscriptions=["crm://shared"]))
        his_listen = await stack.enter_async_context(
            bob.listen(resource_subscriptions=["crm://shared", "crm://bobs"]))
        subscribed = {(p.authorization, p.params.get("uri")) for p in crm.posts
                      if p.method == "resources/subscribe"}
        assert subscribed == {(secret("crm", "alice"), "crm://shared"),
                              (secret("crm", "bob"), "crm://shared"),
                              (secret("crm", "bob"), "crm://bobs")}
        hers, his = session_of(crm, secret("crm", "alice")), session_of(crm, secret("crm", "bob"))
        while not (crm.stream_open(hers) and crm.stream_open(his)):
            await asyncio.sleep(0.01)
        crm.push(hers, updated("crm://shared"))
        assert isinstance(event := await anext(aiter(hers_listen)), ResourceUpdated)
        assert event.uri == "crm://shared"
        crm.push(his, updated("crm://bobs"))
        assert isinstance(event := await anext(aiter(his_listen)), ResourceUpdated)
        assert event.uri == "crm://bobs"
