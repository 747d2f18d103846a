"""`/connections` in a browser (SPEC §15, issue 40.1), in Debian's Chromium against the real
oidc-provider: a person whose client cannot open a connect link signs in on the page
(`[auth.sign_in]`), connects their account for the `wiki` server (the same single-use flow as a
connect link, through the provider's `connector` client), sees it listed, and disconnects it. Bob,
signed in beside her, never sees alice's connection, and his Disconnect (a form of his own page, or
alice's form replayed in his session) never removes it. The bearer-token JSON answer stays for
scripts.

Interop: the page is what a person uses in a browser, signing in at the real provider; what the
page draws and its forms' cookies and tokens are Chromium's (the JSON answer for scripts is
checked in-process in test_credentials_connections_api.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.fixtures.credential_pages import REQ, Pages, pages, run
from tests.fixtures.oidc import OidcServer
from tests.fixtures.token_servers import TokenServer
from tests.integration.test_credentials_exchange import whoami
from tests.integration.test_credentials_pages import CONNECTED, message, walk

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture
def site(oidc_server: OidcServer) -> Iterator[Pages]:
    with pages(oidc_server) as served:
        yield served


def signed_in(browser: Browser, site: Pages, subject: str) -> Page:
    """A browser of its own, signed in on /connections as `subject`."""
    page = browser.new_context().new_page()
    page.goto(site.base + "/connections")
    assert page.locator("#sign-in").inner_text() == "Sign in"
    with page.expect_navigation():
        page.click("#sign-in")
    walk(page, subject, site.base + "/connections")
    assert page.locator("#who").inner_text().startswith(f"Signed in as {subject} (")
    return page


def row(page: Page) -> str:
    return page.locator('tr[data-server="wiki"]').inner_text()


def listed(site: Pages, token: str) -> list[str]:
    answer = httpx.get(site.base + "/connections", headers={"Authorization": f"Bearer {token}"},
                       timeout=10)
    return [c["server"] for c in answer.json()["connections"]]


def test_a_person_connects_and_disconnects_on_the_page_and_nobody_else_touches_it(
        browser: Browser, site: Pages, wiki: TokenServer, oidc_server: OidcServer) -> None:
    alice_token = oidc_server.user_token("alice")
    alice = signed_in(browser, site, "alice")
    assert "not connected" in row(alice)
    with alice.expect_navigation():
        alice.click('tr[data-server="wiki"] button[value="connect"]')
    walk(alice, "alice", site.base + "/oauth/callback")
    assert message(alice) == CONNECTED
    alice.goto(site.base + "/connections")
    assert "connected since" in row(alice) and alice.locator('button[value="disconnect"]').count() == 1
    obtained = run(site.resolver.obtain(REQ, site.identity(alice_token), alice_token))
    assert run(whoami(wiki.url, obtained.credential)) == "alice"

    bob = signed_in(browser, site, "bob")
    assert "not connected" in row(bob) and bob.locator('button[value="disconnect"]').count() == 0
    # Bob turns his own Connect into a Disconnect of wiki: his own connection, which he has not.
    bob.evaluate("document.querySelector('tr[data-server=\"wiki\"] button').value = 'disconnect'")
    bob.click('tr[data-server="wiki"] button')
    assert message(bob) == "You have no connection for 'wiki'."
    # Alice's own form (her token, bound to her session), posted from bob's browser.
    token = alice.locator('input[name="csrf"]').get_attribute("value")
    bob.goto(site.base + "/connections")
    bob.evaluate(f"document.querySelector('input[name=\"csrf\"]').value = {token!r}")
    bob.evaluate("document.querySelector('tr[data-server=\"wiki\"] button').value = 'disconnect'")
    bob.click('tr[data-server="wiki"] button')
    assert message(bob) == "This form was not sent from its page: open /connections again."
    assert listed(site, alice_token) == ["wiki"]  # alice's connection stands

    alice.click('tr[data-server="wiki"] button[value="disconnect"]')
    alice.wait_for_url(site.base + "/connections")
    assert "not connected" in row(alice)
    assert listed(site, alice_token) == []
    for page in (alice, bob):
        page.context.close()
