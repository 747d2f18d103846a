"""Connected accounts (`kind = "oauth"`, SPEC §14) through a real gateway process, driven in Debian's
Chromium: a caller denied for want of an account opens a connect link on the gateway's own
listener, signs in (`[auth.sign_in]`, the real oidc-provider), connects their account at the
server's authorization server (code with PKCE) and then reaches the server as themselves through
the gateway. The link is made where a replica would make it (the shared Redis store: a denial's
remedy carries it, SPEC §15); someone else opening it gets 403, a `state` stolen into another
browser is refused 400 and its code never redeemed; a caller lists only their own connections.
A stdio gateway serves the same pages on `--pages-listen`.

Interop: what is checked is the connect flow end to end between real components: the real
oidc-provider's sign-in, consent and code flow with PKCE, driven in Chromium (its cookies, its
redirects, a callback URL stolen into another browser), the links made in and redeemed from a real
redis-server the gateway process shares with a replica, a stdio gateway process serving its pages on
a listener of their own, and the cookies of a gateway process behind a TLS proxy's public URL. A
caller listing and removing only their own connections is checked in-process too
(test_credentials_connections_api.py).
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, BrowserContext

from mcp_preconditions.credentials import Caller, ConnectedAccounts, ConnectFlow, OAuthSettings
from mcp_preconditions.credentials import Client as OAuthClient
from mcp_preconditions.credentials.stores_redis import RedisTickets, RedisVault
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.approvals import envelope
from tests.fixtures.credential_gateway import (
    CONNECTOR_SECRET,
    GATEWAY_SECRET,
    PAGES_KEY,
    TOKEN_KEY,
    Gateway,
    call,
    connected,
    gateway,
    policy_text,
    text_of,
)
from tests.fixtures.credential_pages import run
from tests.fixtures.gateway_upstream import upstream_env
from tests.fixtures.mcp_servers import CLI, ROOT
from tests.fixtures.oidc import WIKI, WIKI_AUDIENCE, OidcServer, sign_in
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer
from tests.fixtures.token_servers import TokenServer
from tests.integration.test_credentials_pages import CONNECTED, message, walk

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def service(oidc_server: OidcServer) -> str:
    return "Bearer " + oidc_server.token("mission-control", resource=WIKI, scope=None)


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, wiki: TokenServer, service: str, redis_server: RedisServer,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    servers = {"wiki": {"url": wiki.url, "headers": {"Authorization": "env:WIKI_SERVICE"},
                        "credentials": connected(oidc_server, store="redis")}}
    with gateway(tmp_path_factory.mktemp("gateway"), oidc_server, servers,
                 policy=policy_text(oidc_server, redis_url=redis_server.url),
                 env={"WIKI_SERVICE": service}) as running:
        yield running


def link_for(oidc: OidcServer, redis: RedisServer, base: str, subject: str) -> str:
    """The connect link a denial's remedy carries, made as any replica makes it: in the Redis
    store the gateway shares, for this caller (`ConnectFlow.link`, what the remedy calls)."""
    source = RedisStateSource(redis.url, connect_timeout=10, read_timeout=10)  # loaded cores
    settings = OAuthSettings(OAuthClient("connector", CONNECTOR_SECRET), base64.b64decode(TOKEN_KEY),
                             issuer=oidc.issuer, scope=("wiki:read",), resource=WIKI, store="redis")
    accounts = ConnectedAccounts("wiki", settings, RedisVault(source))
    flow = ConnectFlow({"wiki": accounts}, RedisTickets(source), base)
    return run(flow.link(Caller(oidc.issuer, subject), "wiki"))


def caught_callback(context: BrowserContext, link: str, subject: str) -> str:
    """Drive `link` in `context` as `subject` until the browser is sent to /oauth/callback; stop it
    there (CDP Fetch, as a thief reading the URL would) and return that URL, unused."""
    page = context.new_page()
    captured: list[str] = []
    cdp = context.new_cdp_session(page)
    cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*/oauth/callback?*"}]})

    def caught(event: dict[str, Any]) -> None:
        captured.append(event["request"]["url"])
        cdp.send("Fetch.failRequest", {"requestId": event["requestId"], "errorReason": "Aborted"})

    cdp.on("Fetch.requestPaused", caught)
    page.goto(link)
    for _ in range(8):
        if page.locator('input[name="login"]').count():
            page.fill('input[name="login"]', subject)
            page.fill('input[name="password"]', "any")
        before = page.url
        page.click('button[type="submit"]')
        for _ in range(200):  # the next form, or the caught callback: 10 s at most
            page.wait_for_timeout(50)  # a poll that lets Playwright deliver the CDP event
            if captured or (page.url != before and page.locator('button[type="submit"]').count()):
                break
        if captured:
            break
    cdp.send("Fetch.disable")
    assert captured, page.url
    return captured[0]


def test_a_connected_account_is_used_through_the_gateway_after_the_browser_flow(
        browser: Browser, gw: Gateway, wiki: TokenServer, oidc_server: OidcServer,
        redis_server: RedisServer) -> None:
    frank = oidc_server.user_token("frank")
    denied = run(call(gw.url, frank, "wiki__whoami"))
    assert denied.is_error and denied.structured_content["unmet"] == ["credential:wiki"]
    link = link_for(oidc_server, redis_server, gw.base, "frank")
    assert link.startswith(gw.base + "/connect/")

    mallory = browser.new_context()
    page = mallory.new_page()
    page.goto(link)
    walk(page, "mallory", gw.base + "/connect/")
    assert message(page) == "This connect link was made for someone else."  # and it stays good

    owner = browser.new_context()
    callback = caught_callback(owner, link, "frank")
    assert parse_qs(urlsplit(callback).query)["code"]
    page.goto(callback)  # the thief's browser, signed in as mallory at the gateway
    assert message(page) == "This state was issued to another browser."
    own = owner.new_page()
    own.goto(callback)  # its code was never redeemed: it still connects frank
    assert message(own) == CONNECTED
    own.goto(callback)
    assert message(own) == "Unknown, used or expired state: start again from the connect link."
    for context in (mallory, owner):
        context.close()

    before = len(wiki.calls())
    assert text_of(run(call(gw.url, frank, "wiki__whoami"))) == "frank"
    assert [(c["subject"], c["audience"]) for c in wiki.calls()[before:]] == [("frank", WIKI_AUDIENCE)]
    assert gw.records()[-1]["credential"] == {"kind": "oauth", "cached": True}
    listed = httpx.get(gw.base + "/connections", headers={"Authorization": f"Bearer {frank}"},
                       timeout=10).json()
    assert [c["server"] for c in listed["connections"]] == ["wiki"]
    other = oidc_server.user_token("grace")
    assert httpx.get(gw.base + "/connections", headers={"Authorization": f"Bearer {other}"},
                     timeout=10).json() == {"connections": []}
    query = parse_qs(urlsplit(callback).query)
    leaked = [s for s in (query["code"][0], query["state"][0], link.rsplit("/", 1)[1], frank,
                          *wiki.tokens_seen()) if s in gw.output() or s in json.dumps(gw.records())]
    assert not leaked


def test_a_stdio_gateway_serves_its_pages_on_pages_listen(
        oidc_server: OidcServer, wiki: TokenServer, service: str, redis_server: RedisServer,
        tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(policy_text(oidc_server, redis_url=redis_server.url),
                                          encoding="utf-8")
    (tmp_path / "claims.json").write_text(json.dumps({"iss": oidc_server.issuer, "sub": "heidi"}),
                                          encoding="utf-8")
    table = connected(oidc_server, store="redis")
    (tmp_path / "gateway.toml").write_text(
        f'policy = "policy.toml"\nclaims = "claims.json"\n[servers.wiki]\nurl = "{wiki.url}"\n'
        'headers = { Authorization = "env:WIKI_SERVICE" }\n[servers.wiki.credentials]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()), encoding="utf-8")
    pages = f"http://127.0.0.1:{free_port()}"
    env = {**upstream_env(tmp_path / "upstream.jsonl"), "WIKI_SERVICE": service,
           "CONNECTOR_SECRET": CONNECTOR_SECRET, "GW_TOKEN_KEY": TOKEN_KEY,
           "GW_CLIENT_ID": "gateway", "GW_SECRET": GATEWAY_SECRET,
           "MCP_PRECONDITIONS_PAGES_KEY": PAGES_KEY}
    command = [*CLI, "gateway", "--config", str(tmp_path / "gateway.toml"), "--pages-listen", pages]
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=ROOT)

    async def session() -> tuple[Any, Any]:
        async with Client(stdio_client(params, errlog=sys.stderr)) as client:
            denied = await client.call_tool("wiki__whoami", {})
            link = await asyncio.to_thread(link_for, oidc_server, redis_server, pages, "heidi")
            with httpx.Client(timeout=10) as browser_like:  # heidi signs in, then connects
                back = await asyncio.to_thread(sign_in, browser_like, link, pages + "/oauth/callback",
                                               "heidi")
                done = await asyncio.to_thread(browser_like.get, back)
            assert done.status_code == 200 and CONNECTED in html.unescape(done.text)
            elsewhere = await asyncio.to_thread(httpx.get, pages + "/mcp", timeout=10)
            assert elsewhere.status_code == 404  # the pages, nothing else
            return denied, await client.call_tool("wiki__whoami", {})

    denied, allowed = run(session())  # (Playwright keeps a loop on this thread)
    assert denied.is_error and denied.structured_content["unmet"] == ["credential:wiki"]
    assert not allowed.is_error and text_of(allowed) == "heidi"


async def _denied_with_envelope(url: str, token: str, url_elicitation: bool) -> Any:
    """A call of `wiki__whoami` by a client that declares elicitation (form and URL modes, the
    SDK's client with a callback) or none."""
    async def decline(_ctx: Any, _params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="decline")

    declared: dict[str, Any] = {"elicitation_callback": decline} if url_elicitation else {}
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=10)), **declared) as client:
        return await client.call_tool("wiki__whoami", {})


def test_the_denials_remedy_is_the_callers_connect_link_for_a_client_that_can_open_it(
        gw: Gateway, oidc_server: OidcServer) -> None:
    """SPEC §15: an unmet `credential:KEY` of an `oauth` server is `available` with a `url` hint
    to a connect link made for the denied caller; a client without URL elicitation is told
    `undisclosed` (no link made for it)."""
    seeker = oidc_server.user_token("remedy-seeker")  # connected nowhere (heidi is, above)
    denied = run(_denied_with_envelope(gw.url, seeker, url_elicitation=True))
    assert denied.is_error and denied.structured_content["unmet"] == ["credential:wiki"]
    found = envelope(denied)
    assert found is not None and found[0] == "available"
    (hint,) = found[1]
    assert hint["type"] == "url" and hint["url"].startswith(gw.base + "/connect/")
    again = envelope(run(_denied_with_envelope(gw.url, seeker, url_elicitation=True)))
    assert again is not None and again[1] == [hint]  # the same link while it has time left
    blind = envelope(run(_denied_with_envelope(gw.url, seeker, url_elicitation=False)))
    assert blind == ("undisclosed", [])
    assert hint["url"].rsplit("/", 1)[1] not in gw.output()  # a link's id is never logged


def test_behind_a_tls_proxy_every_pages_cookie_is_host_and_secure(
        oidc_server: OidcServer, wiki: TokenServer, service: str, gw: Gateway, tmp_path: Path) -> None:
    """SPEC §14 (issue 39.14): with an https public URL (a TLS proxy in front of the listener,
    which speaks http) the pages' cookies are `__Host-` and Secure, and only those are read; over
    plain http (the module's gateway) the plain name without Secure. Before, no cookie was Secure
    behind a proxy and none had the prefix."""
    plain = httpx.get(gw.base + "/connections/sign-in", timeout=10).headers["set-cookie"]
    assert plain.startswith("mcp_preconditions_flow=") and "secure" not in plain.lower()
    servers = {"wiki": {"url": wiki.url, "headers": {"Authorization": "env:WIKI_SERVICE"},
                        "credentials": connected(oidc_server)}}
    with gateway(tmp_path, oidc_server, servers, args=("--public-url", "https://gw.example"),
                 env={"WIKI_SERVICE": service}) as behind:
        started = httpx.get(behind.base + "/connections/sign-in", timeout=10)  # as the proxy sends it
        assert started.status_code == 303
        assert "redirect_uri=https%3A%2F%2Fgw.example%2Fconnect%2Fcallback" in started.headers["location"]
        cookie = started.headers["set-cookie"]
        attributes = [a.strip().lower() for a in cookie.split(";")]
        assert cookie.startswith("__Host-mcp_preconditions_flow=")
        assert {"secure", "path=/", "httponly", "samesite=lax"} <= set(attributes[1:])
        assert not [a for a in attributes if a.startswith("domain")]
        # A flow cookie without the prefix (tossed in by a sibling host) is not this browser's.
        binding = cookie.split(";")[0].split("=", 1)[1]
        state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
        tossed = httpx.get(f"{behind.base}/connect/callback?state={state}&code=c", timeout=10,
                           headers={"Cookie": f"mcp_preconditions_flow={binding}"})
        assert tossed.status_code == 400
        assert "This sign-in was started in another browser." in html.unescape(tossed.text)
        own = httpx.get(f"{behind.base}/connect/callback?state={state}&code=made-up", timeout=10,
                        headers={"Cookie": f"__Host-mcp_preconditions_flow={binding}"})
        assert "The sign-in was refused" in html.unescape(own.text)  # its browser: on to the code
