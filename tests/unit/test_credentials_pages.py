"""The pages app's own rules, with doubles (the flows run in Chromium against the real provider in
tests/integration/test_credentials_pages.py): headers that keep a link's id and a page's content
where they belong, a link opened by nobody signed in goes to the sign-in first (there is no other
way: `[auth.sign_in]` is required), a used link 410, `/connections` in a browser that stores nothing
for a visitor until they start a sign-in, forms refused without their token or from another origin,
a refused step logged at WARNING with its reason, and an unexpected failure answered by one line
that names its type only.
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.auth.base import PassThroughAuthenticator
from mcp_preconditions.credentials import Caller, ConnectedAccounts, ConnectFlow, MemoryTickets, MemoryVault
from mcp_preconditions.credentials.accounts import Connection
from mcp_preconditions.credentials.signin import SESSION_COOKIE
from mcp_preconditions.errors import CredentialBackendError
from mcp_preconditions.pages.credentials import CredentialPages
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock
from tests.unit.test_credentials_accounts import oauth_settings
from tests.unit.test_credentials_signin import sign_in

BASE = "http://testserver"
ALICE, BOB = Caller(ISSUER, "alice"), Caller(ISSUER, "bob")
HTML = {"Accept": "text/html,application/xhtml+xml"}


class Site:
    def __init__(self, tickets: MemoryTickets | None = None) -> None:
        self.clock = Clock()
        self.accounts = ConnectedAccounts("gh", oauth_settings(), MemoryVault(), clock=self.clock,
                                          transport=AuthServer().transport())
        self.tickets = tickets if tickets is not None else MemoryTickets()
        self.flow = ConnectFlow({"gh": self.accounts}, self.tickets, BASE)
        self.sign_in = sign_in(self.clock)
        self.app = CredentialPages(self.flow, PassThroughAuthenticator(), self.sign_in).app()

    def browser(self, person: Caller | None = None) -> TestClient:
        client = TestClient(self.app, follow_redirects=False)
        if person is not None:
            client.cookies.set(SESSION_COOKIE, self.sign_in.session(person))
        return client


def test_a_link_opened_by_nobody_signed_in_goes_to_the_sign_in_first() -> None:
    site = Site()
    url = asyncio.run(site.flow.link(ALICE, "gh"))
    first = site.browser().get(url.removeprefix(BASE))
    assert first.status_code == 303 and first.headers["location"].startswith(f"{ISSUER}/authorize?")
    assert "scope=openid" in first.headers["location"]  # the gateway's sign-in, not the server's
    assert first.headers["referrer-policy"] == "no-referrer"
    assert first.headers["cache-control"] == "no-store"
    assert "mcp_preconditions_flow" in first.cookies
    assert asyncio.run(site.flow.peek(url.rsplit("/", 1)[1])).caller == ALICE  # still good


def test_a_link_goes_to_the_authorization_server_once_for_its_caller_signed_in() -> None:
    site = Site()
    url = asyncio.run(site.flow.link(ALICE, "gh"))
    browser = site.browser(ALICE)
    first = browser.get(url.removeprefix(BASE))
    assert first.status_code == 303 and first.headers["location"].startswith(f"{ISSUER}/authorize?")
    assert "scope=repo" in first.headers["location"]
    again = browser.get(url.removeprefix(BASE))
    assert again.status_code == 410
    assert "This connect link was used already" in again.text
    assert again.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_a_callback_with_nobody_signed_in_is_refused_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    site = Site()
    answer = site.browser().get("/oauth/callback?code=the-code&state=the-state")
    assert answer.status_code == 400
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(
        logging.WARNING, "connect page /oauth/callback refused (400): Unknown, used or expired "
                         "state: start again from the connect link.")]
    assert "the-code" not in caplog.text and "the-state" not in caplog.text


def test_an_unexpected_failure_is_one_line_naming_its_type(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryTickets):
        async def get(self, key: str) -> bytes | None:
            raise RuntimeError("state=the-secret-state")

    answer = Site(Broken()).browser().get("/oauth/callback?code=the-code&state=the-secret-state")
    assert (answer.status_code, "The gateway could not complete this step." in answer.text) == (500, True)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "connect page /oauth/callback failed: RuntimeError"]
    assert "the-secret-state" not in caplog.text and "the-code" not in caplog.text


def test_a_link_id_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Down(MemoryTickets):
        async def get(self, key: str) -> bytes | None:
            raise CredentialBackendError("redis GET failed: ConnectionError")

    answer = Site(Down()).browser().get("/connect/the-secret-link-id")
    assert answer.status_code == 502
    assert "connect page /connect/ID failed: redis GET failed" in caplog.text
    assert "the-secret-link-id" not in caplog.text


# -- /connections in a browser ------------------------------------------------------------------------
def test_a_visitor_is_offered_a_sign_in_and_nothing_is_stored_until_they_start_it() -> None:
    site = Site()
    browser = site.browser()
    for _ in range(50):
        shown = browser.get("/connections", headers=HTML)
        assert shown.status_code == 200 and 'href="/connections/sign-in"' in shown.text
    assert len(site.tickets) == 0 and len(site.sign_in.tickets) == 0  # type: ignore[arg-type]
    assert not shown.cookies
    started = browser.get("/connections/sign-in")
    assert started.status_code == 303 and started.headers["location"].startswith(f"{ISSUER}/authorize?")
    assert len(site.sign_in.tickets) == 1  # type: ignore[arg-type]
    # A script (no Accept: text/html) still gets the bearer-token answer.
    assert browser.get("/connections").status_code == 401


def form_of(text: str) -> dict[str, str]:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found is not None
    return {"server": "gh", "csrf": found.group(1)}


def test_the_signed_in_person_connects_and_disconnects_only_their_own() -> None:
    site = Site()
    asyncio.run(site.accounts.save(ALICE, Connection("alices-token", None, 1.0, None)))
    alice, bob = site.browser(ALICE), site.browser(BOB)
    mine = alice.get("/connections", headers=HTML)
    assert "Signed in as alice" in mine.text and 'value="disconnect">Disconnect' in mine.text
    assert mine.headers["referrer-policy"] == "same-origin"
    theirs = bob.get("/connections", headers=HTML)
    assert 'value="connect">Connect' in theirs.text and "Disconnect" not in theirs.text
    bobs = form_of(theirs.text)
    gone = bob.post("/connections", data={**bobs, "do": "disconnect"})  # bob's own form, alice's server
    assert gone.status_code == 404 and "You have no connection for &#x27;gh&#x27;." in gone.text
    stolen = bob.post("/connections", data={**form_of(mine.text), "do": "disconnect"})
    assert stolen.status_code == 403  # alice's form token is no good in bob's session
    assert asyncio.run(site.accounts.load(ALICE)) is not None
    connect = bob.post("/connections", data={**bobs, "do": "connect"})
    assert connect.status_code == 303 and connect.headers["location"].startswith(BASE + "/connect/")
    link = asyncio.run(site.flow.peek(connect.headers["location"].rsplit("/", 1)[1]))
    assert link.caller == BOB  # a link made for bob, whoever the form named
    done = alice.post("/connections", data={**form_of(mine.text), "do": "disconnect"})
    assert (done.status_code, done.headers["location"]) == (303, "/connections")
    assert asyncio.run(site.accounts.load(ALICE)) is None


@pytest.mark.parametrize(("headers", "data", "status", "message"), [
    ({}, {"do": "disconnect", "csrf": "forged"}, 403,
     "This form was not sent from its page: open /connections again."),
    ({"Origin": "https://evil.test"}, {"do": "disconnect"}, 403,
     "This form was not sent from its page: open /connections again."),
    ({}, {"do": "nothing"}, 400, "The form must say connect or disconnect."),
    ({}, {"do": "connect", "server": "nope"}, 404, "No server by that name has connected accounts."),
    ({}, {"do": "connect", "pad": "x" * 2000}, 413, "The form is larger than 1024 bytes."),
])
def test_a_bad_form_is_refused(headers: dict[str, str], data: dict[str, str], status: int,
                               message: str) -> None:
    site = Site()
    browser = site.browser(ALICE)
    form = {**form_of(browser.get("/connections", headers=HTML).text), **data}
    answer = browser.post("/connections", data=form, headers=headers)
    assert (answer.status_code, message in answer.text) == (status, True), answer.text


def test_a_form_with_nobody_signed_in_is_refused() -> None:
    answer = Site().browser().post("/connections", data={"do": "connect", "server": "gh"})
    assert answer.status_code == 403 and "Sign in first" in answer.text


def test_the_gateway_serves_its_client_id_metadata_document() -> None:
    """SPEC §17: where an authorization server takes a URL as client_id, the gateway's is the URL
    of this document, which names that URL and the gateway's callback, for anyone to read."""
    answer = Site().browser().get("/client-metadata.json")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "client_id": f"{BASE}/client-metadata.json", "client_name": "mcp-preconditions gateway",
        "client_uri": BASE, "redirect_uris": [f"{BASE}/oauth/callback"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none", "application_type": "web"}
    from mcp_preconditions.pages.credentials import PATHS

    assert "/client-metadata.json" in PATHS  # the listener routes it to the pages
