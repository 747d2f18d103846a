"""The pages app's own rules, with doubles (the flows run in Chromium against the real provider in
tests/integration/test_credentials_pages.py): headers that keep a link's id and a page's content
where they belong, a used link 410, a sign-in callback on a gateway that signs nobody in, and an
unexpected failure answered by one line that names its type only.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.auth.base import PassThroughAuthenticator
from mcp_preconditions.credentials import Caller, ConnectedAccounts, ConnectFlow, MemoryTickets, MemoryVault
from mcp_preconditions.credentials.pages import CredentialPages
from mcp_preconditions.errors import CredentialBackendError
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock
from tests.unit.test_credentials_accounts import oauth_settings

BASE = "http://testserver"


def client(tickets: MemoryTickets | None = None) -> tuple[TestClient, ConnectFlow]:
    accounts = ConnectedAccounts("gh", oauth_settings(), MemoryVault(), clock=Clock(),
                                 transport=AuthServer().transport())
    flow = ConnectFlow({"gh": accounts}, tickets if tickets is not None else MemoryTickets(), BASE)
    app = CredentialPages(flow, PassThroughAuthenticator()).app()
    return TestClient(app, follow_redirects=False), flow


def test_a_link_without_sign_in_goes_to_the_authorization_server_once() -> None:
    browser, flow = client()
    url = asyncio.run(flow.link(Caller(ISSUER, "alice"), "gh"))
    first = browser.get(url.removeprefix(BASE))
    assert first.status_code == 303 and first.headers["location"].startswith(f"{ISSUER}/authorize?")
    assert first.headers["referrer-policy"] == "no-referrer"
    assert first.headers["cache-control"] == "no-store"
    assert "mcp_preconditions_flow" in first.cookies
    again = browser.get(url.removeprefix(BASE))
    assert again.status_code == 410
    assert "This connect link was used already" in again.text
    assert again.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_a_sign_in_callback_on_a_gateway_that_signs_nobody_in() -> None:
    browser, _ = client()
    answer = browser.get("/connect/callback?code=c&state=s")
    assert answer.status_code == 404 and "This gateway signs nobody in." in answer.text


def test_an_unexpected_failure_is_one_line_naming_its_type(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryTickets):
        async def get(self, key: str) -> bytes | None:
            raise RuntimeError("state=the-secret-state")

    browser, _ = client(Broken())
    answer = browser.get("/oauth/callback?code=the-code&state=the-secret-state")
    assert (answer.status_code, "The gateway could not complete this step." in answer.text) == (500, True)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "connect page /oauth/callback failed: RuntimeError"]
    assert "the-secret-state" not in caplog.text and "the-code" not in caplog.text


def test_a_link_id_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Down(MemoryTickets):
        async def get(self, key: str) -> bytes | None:
            raise CredentialBackendError("redis GET failed: ConnectionError")

    browser, _ = client(Down())
    answer = browser.get("/connect/the-secret-link-id")
    assert answer.status_code == 502
    assert "connect page /connect/ID failed: redis GET failed" in caplog.text
    assert "the-secret-link-id" not in caplog.text
