"""The pages' cookie rule (SPEC §14, issue 39.14; pages/cookies.py): on a gateway whose public
URL is https every cookie is `__Host-`, Secure, Path=/ and has no Domain, and only `__Host-`
cookies are read (one tossed in by a sibling host without the prefix is ignored); over plain http
(loopback, where a browser refuses both) the plain name, without Secure. Before, no cookie was
Secure behind a TLS proxy (the listener speaks http), and none had the prefix.
"""

from __future__ import annotations

from http.cookies import SimpleCookie

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.credentials.signin import SESSION_COOKIE
from mcp_preconditions.pages.cookies import HostCookies, host_cookies_only, secured
from tests.unit.test_credentials_pages import ALICE, HTML, Site


@pytest.mark.parametrize(("header", "expected"), [
    ("mcp_preconditions_flow=abc; HttpOnly; Max-Age=900; Path=/; SameSite=lax",
     "__Host-mcp_preconditions_flow=abc; HttpOnly; Max-Age=900; SameSite=lax; Path=/; Secure"),
    ("s=1; Domain=example.com; Path=/sub; Secure; HttpOnly",
     "__Host-s=1; HttpOnly; Path=/; Secure"),
    ("__Host-s=1; Path=/; Secure", "__Host-s=1; Path=/; Secure"),
])
def test_a_set_cookie_is_named_and_secured(header: str, expected: str) -> None:
    assert secured(header) == expected


def test_only_host_cookies_are_read_under_their_plain_names() -> None:
    assert host_cookies_only("a=1; __Host-b=2;__Host-c=x=y; b=tossed") == "b=2; c=x=y"
    assert host_cookies_only("a=1") == ""


def cookies_of(response: object) -> dict[str, str]:
    """Each Set-Cookie of a response, by name: its whole header value."""
    headers = response.headers.get_list("set-cookie")  # type: ignore[attr-defined]
    return {header.split("=", 1)[0]: header for header in headers}


def test_on_an_https_gateway_every_cookie_is_host_and_secure() -> None:
    site = Site()
    browser = TestClient(HostCookies(site.app, secure=True), base_url="https://gw.test",
                         follow_redirects=False)
    started = browser.get("/connections/sign-in")
    assert started.status_code == 303
    flow = cookies_of(started)["__Host-mcp_preconditions_flow"]
    attributes = [a.strip().lower() for a in flow.split(";")[1:]]
    assert {"secure", "path=/", "httponly", "samesite=lax"} <= set(attributes)
    assert not [a for a in attributes if a.startswith("domain")]
    parsed = SimpleCookie()
    parsed.load(flow)
    assert parsed["__Host-mcp_preconditions_flow"]["secure"]

    session = site.sign_in.session(ALICE)
    browser.cookies.set(SESSION_COOKIE, session, domain="gw.test")  # tossed in, without the prefix
    assert 'href="/connections/sign-in"' in browser.get("/connections", headers=HTML).text
    browser.cookies.clear()
    browser.cookies.set("__Host-" + SESSION_COOKIE, session, domain="gw.test")
    assert "Signed in as alice" in browser.get("/connections", headers=HTML).text


def test_over_plain_http_cookies_keep_their_names_without_secure() -> None:
    site = Site()
    browser = TestClient(HostCookies(site.app, secure=False), follow_redirects=False)
    flow = cookies_of(browser.get("/connections/sign-in"))["mcp_preconditions_flow"]
    assert "secure" not in flow.lower() and "path=/" in flow.lower()
    browser.cookies.set(SESSION_COOKIE, site.sign_in.session(ALICE))
    assert "Signed in as alice" in browser.get("/connections", headers=HTML).text
