"""Connected accounts end to end in Debian's Chromium (Playwright): the connect link a denial offers
signs the person in at the real oidc-provider (`[auth.sign_in]`), goes on to the server's
authorization server (the provider's `connector` client, code with PKCE) and ends with the
caller's token kept encrypted; the server (SDK auth, its own audience) then sees the caller. A link
opened by someone else is 403 and stays good; a `state` stolen into another browser is refused 400
and its code never redeemed; a used state is refused; a refresh works (the account connected over
plain HTTP, without a browser). With Redis, two replicas share links, states and tokens.

Interop: these are the connect flow end to end, through the real oidc-provider (its sign-in, its
`connector` client's code with PKCE, its refresh), Chromium's cookies and redirects, and Redis. The
script's `/connections` listing and removal (a caller's own connections only) are checked
in-process, with a connection kept in the vault (test_credentials_connections_api.py).
"""

from __future__ import annotations

import html
import logging
import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page

from mcp_preconditions.credentials import ConnectedAccounts, CredentialResolver, caller_of
from mcp_preconditions.credentials.stores_redis import RedisTickets, RedisVault
from mcp_preconditions.principal import Identity
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.credential_pages import REQ, Pages, pages, run
from tests.fixtures.oidc import OidcServer, sign_in
from tests.fixtures.redis import RedisServer
from tests.fixtures.token_servers import TokenServer
from tests.integration.test_credentials_exchange import whoami

pytestmark = [pytest.mark.integration, pytest.mark.interop]
CONNECTED = "Your account is connected for 'wiki'. You can close this page and call the tool again."


@pytest.fixture
def site(oidc_server: OidcServer) -> Iterator[Pages]:
    with pages(oidc_server) as served:
        yield served


def walk(page: Page, subject: str, until: str) -> None:
    """Answer the provider's login (as `subject`) and consent pages until the page is at `until`."""
    for _ in range(8):
        page.wait_for_load_state()
        if page.url.startswith(until):
            return
        if page.locator('input[name="login"]').count():
            page.fill('input[name="login"]', subject)
            page.fill('input[name="password"]', "any")
        with page.expect_navigation():
            page.click('button[type="submit"]')
    raise AssertionError(f"stuck at {page.url}")


def message(page: Page) -> str:
    return page.locator("#message").inner_text()


def test_a_connect_link_ends_with_the_callers_own_token_kept_encrypted(
        browser: Browser, site: Pages, wiki: TokenServer, oidc_server: OidcServer) -> None:
    alice = oidc_server.user_token("alice")
    identity = site.identity(alice)
    assert run(site.resolver.obtain(REQ, identity, alice)).result == "refused"
    link = site.link(alice)
    context = browser.new_context()
    page = context.new_page()
    response = page.goto(link)
    assert response is not None and response.url.startswith(oidc_server.issuer)  # signing in first
    walk(page, "alice", site.base + "/oauth/callback")
    assert message(page) == CONNECTED
    page.goto(link)
    assert message(page).startswith("This connect link was used already, or has expired.")
    context.close()

    obtained = run(site.resolver.obtain(REQ, identity, alice))
    assert obtained.result == "cached" and obtained.credential is not None
    assert run(whoami(wiki.url, obtained.credential)) == "alice"
    assert wiki.calls()[-1]["subject"] == "alice"
    token = obtained.credential.headers()["Authorization"].removeprefix("Bearer ")
    sealed = run(site.vault.all(digest_of(identity)))
    assert list(sealed) == ["wiki"] and token.encode() not in sealed["wiki"]


def test_someone_elses_link_is_403_and_a_stolen_state_is_400_with_its_code_unredeemed(
        browser: Browser, site: Pages, wiki: TokenServer, oidc_server: OidcServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice = oidc_server.user_token("alice")
    link = site.link(alice)
    mallory = browser.new_context()
    page = mallory.new_page()
    page.goto(link)
    walk(page, "mallory", site.base + "/connect/")
    assert message(page) == "This connect link was made for someone else."

    owner = browser.new_context()
    own = owner.new_page()
    captured: list[str] = []
    # The callback arrives by a redirect, which page.route does not see: catch it in the browser's
    # own network layer (CDP Fetch) and stop it there, as a thief reading the URL would.
    cdp = owner.new_cdp_session(own)
    cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*/oauth/callback?*"}]})

    def caught(event: dict[str, Any]) -> None:
        captured.append(event["request"]["url"])
        cdp.send("Fetch.failRequest", {"requestId": event["requestId"], "errorReason": "Aborted"})

    cdp.on("Fetch.requestPaused", caught)
    own.goto(link)  # the link stayed good for its caller
    for _ in range(8):  # sign in as alice and consent, until the callback is caught
        if own.locator('input[name="login"]').count():
            own.fill('input[name="login"]', "alice")
            own.fill('input[name="password"]', "any")
        before = own.url
        own.click('button[type="submit"]')
        for _ in range(200):  # the next form (another interaction's page), or the caught callback
            own.wait_for_timeout(50)  # a poll that lets Playwright deliver the CDP event
            if captured or (own.url != before and own.locator('button[type="submit"]').count()):
                break
        if captured:
            break
    assert captured and parse_qs(urlsplit(captured[0]).query)["code"]

    page.goto(captured[0])  # the thief's browser, signed in as mallory
    assert message(page) == "This state was issued to another browser."
    stranger = browser.new_context().new_page()
    stranger.goto(captured[0])  # a browser with no cookie of ours at all
    assert message(stranger) == "This state was issued to another browser."
    cdp.send("Fetch.disable")
    own.goto(captured[0])  # the code was never redeemed: it still connects its caller
    assert message(own) == CONNECTED
    own.goto(captured[0])
    assert message(own) == "Unknown, used or expired state: start again from the connect link."
    obtained = run(site.resolver.obtain(REQ, site.identity(alice), alice))
    assert run(whoami(wiki.url, obtained.credential)) == "alice"
    assert obtained.credential is not None
    query = parse_qs(urlsplit(captured[0]).query)
    secrets = [query["code"][0], query["state"][0], link.rsplit("/", 1)[1], alice,
               obtained.credential.headers()["Authorization"].split()[1]]
    assert caplog.records and not [s for s in secrets if s in caplog.text]  # nothing secret logged
    for context in (mallory, owner):
        context.close()


def connect_without_browser(site: Pages, token: str, subject: str) -> None:
    """The connect flow driven over plain HTTP (cookies kept): link, sign-in, authorization."""
    with httpx.Client(timeout=10) as client:
        back = sign_in(client, site.link(token), site.base + "/oauth/callback", subject)
        done = client.get(back)
    assert done.status_code == 200 and CONNECTED in html.unescape(done.text)


def test_a_refresh_gets_a_new_token_the_server_accepts(site: Pages, wiki: TokenServer,
                                                       oidc_server: OidcServer) -> None:
    carol = oidc_server.user_token("carol")
    connect_without_browser(site, carol, "carol")
    identity = site.identity(carol)
    first = run(site.resolver.obtain(REQ, identity, carol)).credential
    later = ConnectedAccounts("wiki", site.accounts.settings, site.vault,
                              clock=lambda: time.time() + 3600)  # an hour on: within 60 s of expiry
    refreshed = run(CredentialResolver({"wiki": later}).obtain(REQ, identity, carol))
    assert refreshed.result == "obtained" and refreshed.credential is not None
    assert first is not None and not refreshed.credential.same(first)
    assert run(whoami(wiki.url, refreshed.credential)) == "carol"
    assert run(site.resolver.obtain(REQ, identity, carol)).credential.same(  # type: ignore[union-attr]
        refreshed.credential)  # the refreshed tokens were kept for every later call


def test_replicas_share_links_states_and_tokens_in_redis(oidc_server: OidcServer, wiki: TokenServer,
                                                         redis_server: RedisServer) -> None:
    key = os.urandom(32)
    prefix = f"test-{os.getpid()}-{time.monotonic_ns()}:"

    def replica() -> tuple[RedisVault, RedisTickets]:
        # each replica its own client and pool; timeouts for two loaded cores (the default
        # 0.25 s is a production setting for a fast fail-closed lookup)
        source = RedisStateSource(redis_server.url, connect_timeout=10, read_timeout=10)
        return RedisVault(source, prefix + "tokens:"), RedisTickets(source, prefix + "ticket:")

    vault_a, tickets_a = replica()
    vault_b, tickets_b = replica()
    with pages(oidc_server, vault=vault_a, tickets=tickets_a, key=key) as a, \
            pages(oidc_server, vault=vault_b, tickets=tickets_b, key=key,
                  public=a.base) as b:  # one address for both, as behind a load balancer
        erin = oidc_server.user_token("erin")
        link = a.link(erin)  # made by replica a ...
        with httpx.Client(timeout=10) as client:  # ... opened on replica b, whose sign-in and
            # callback land on a
            back = sign_in(client, b.base + link.removeprefix(a.base), a.base + "/oauth/callback", "erin")
            done = client.get(back)
        assert done.status_code == 200 and CONNECTED in html.unescape(done.text)
        identity = b.identity(erin)
        obtained = run(b.resolver.obtain(REQ, identity, erin))  # b holds the token too
        assert obtained.result == "cached"
        assert run(whoami(wiki.url, obtained.credential)) == "erin"
        token = obtained.credential.headers()["Authorization"].split()[1]  # type: ignore[union-attr]
        stored = run(vault_a.all(digest_of(identity)))
        assert list(stored) == ["wiki"] and token.encode() not in stored["wiki"]  # sealed in Redis


def digest_of(identity: Identity) -> str:
    caller = caller_of(identity.principal)
    assert caller is not None
    return caller.digest()
