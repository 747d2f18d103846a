"""The approver pages of a real gateway process (SPEC §15), its approvals in a real redis-server,
its callers and approvers with real tokens of the real oidc-provider. In Debian's Chromium an
approver opens the denial's `url` hint, is offered a sign-in (nothing is stored until
they start it: the shared Redis gains no key from anonymous visits), signs in at the provider
(authorization code with PKCE), sees the whole call (the tool, its server and description, every
argument, a padded one folded but expandable, a bidirectional override escaped, the caller, who
is signed in), and approves; the caller's retry runs once. The listing shows a signed-in person
their own requests beside those they may decide. `SCREENSHOT=1` saves the page as
docs/approvals-page.png.

Interop: a person signing in at the real provider (authorization code with PKCE) and approving in
a browser, what the page draws there (folded, escaped), and what the shared Redis holds. A script's
decisions (200, 401, 403, 404, 400, 409; the call run once; the audit trail, records and metrics)
and a stdio gateway's `--pages-listen` are checked in-process in test_approval_pages_api.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, Page

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY
from tests.fixtures.credential_gateway import Gateway, call, gateway, policy_text
from tests.fixtures.credential_pages import run
from tests.fixtures.explorer import chromium
from tests.fixtures.gateway_upstream import tool_calls, upstream_http
from tests.fixtures.oidc import OidcServer
from tests.fixtures.redis import RedisServer
from tests.integration.test_credentials_pages import walk

pytestmark = [pytest.mark.integration, pytest.mark.interop]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "approvals-page.png"
APPROVALS = """
[approvals.payout]
approvers = ["auth:claim:role:treasury"]
expires_seconds = 600
store = "redis"

[tools.up__echo]
requirements = ["approval:payout"]
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("upstream") / "upstream.jsonl"
    with upstream_http(log) as process:
        yield process.url, log


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, redis_server: RedisServer, upstream: tuple[str, Path],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    policy = policy_text(oidc_server, redis_url=redis_server.url, extra=APPROVALS)
    with gateway(tmp_path_factory.mktemp("gateway"), oidc_server, {"up": {"url": upstream[0]}},
                 policy=policy) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(oidc_server: OidcServer) -> dict[str, str]:
    """alice and bob hold no role; tess and trent are treasurers (tests/oidc/server.mjs)."""
    return {who: oidc_server.user_token(who) for who in ("alice", "bob", "tess", "trent")}


def denied(gw: Gateway, token: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = run(call(gw.url, token, "up__echo", arguments))
    assert result.is_error, result
    payload: dict[str, Any] = result.structured_content
    assert payload["error"] == "unmet_requirements" and payload["unmet"] == ["approval:payout"]
    return payload


def waiting(gw: Gateway, token: str) -> list[dict[str, Any]]:
    answer = httpx.get(gw.base + "/approvals", headers={"Authorization": f"Bearer {token}"},
                       timeout=10)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["requests"]
    return found


def request_of(gw: Gateway, approver: str, caller: str, arguments: dict[str, Any]) -> str:
    """The ID of the request waiting for `caller`'s call with `arguments`, as `approver` sees it."""
    ids = [r["id"] for r in waiting(gw, approver)
           if r["caller"]["subject"] == caller and r["arguments"] == arguments]
    assert len(ids) == 1, ids
    return str(ids[0])


async def _decline(context: Any, params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="decline")


async def call_declaring(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """`call` from a client that declares elicitation, URL mode included (the SDK's client)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10)
    async with Client(streamable_http_client(url, http_client=http),
                      elicitation_callback=_decline) as client:
        return await client.call_tool(tool, arguments)


def test_an_approver_signs_in_sees_the_call_and_approves_in_chromium(
        gw: Gateway, upstream: tuple[str, Path], tokens: dict[str, str],
        oidc_server: OidcServer) -> None:
    arguments = {"text": "<b>wire</b> 2,500 EUR to ACME GmbH", "reference": "INV-2026-0042"}
    result = run(call_declaring(gw.url, tokens["alice"], "up__echo", arguments))
    assert result.is_error and result.structured_content["unmet"] == ["approval:payout"]
    envelope = result.meta[AUTHORIZATION_META_KEY]
    assert envelope["remediation"] == "available"
    [hint] = envelope["remediationHints"]
    request_id = request_of(gw, tokens["tess"], "alice", arguments)
    assert hint == {"type": "url", "url": f"{gw.base}/approvals/{request_id}"}
    with chromium() as browser:
        approve_in(browser, gw, hint["url"], oidc_server)
    shown = httpx.get(f"{gw.base}/approvals/{request_id}",
                      headers={"Authorization": f"Bearer {tokens['trent']}"}, timeout=10)
    assert shown.status_code == 200 and shown.json()["state"] == "approved"
    before = tool_calls(upstream[1]).count("echo")
    assert not run(call(gw.url, tokens["alice"], "up__echo", arguments)).is_error
    assert tool_calls(upstream[1]).count("echo") == before + 1


def signed_in_page(browser: Browser, url: str, person: str, oidc_server: OidcServer) -> Page:
    """`url` in a new browser context, signed in as `person`: the page offers a sign-in first."""
    context = browser.new_context(viewport={"width": 900, "height": 640})
    page = context.new_page()
    response = page.goto(url)
    assert response is not None and response.url == url  # the gateway's own page: a sign-in link
    with page.expect_navigation():
        page.click("#sign-in")
    assert page.url.startswith(oidc_server.issuer)  # signing in at the provider
    walk(page, person, url)
    return page


def approve_in(browser: Browser, gw: Gateway, url: str, oidc_server: OidcServer) -> None:
    """Open the denial's `url` as tess, sign in, check what the page shows, approve."""
    page = signed_in_page(browser, url, "tess", oidc_server)
    errors: list[str] = []  # from here on: the gateway's own pages
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.reload()
    assert page.locator("h1").inner_text() == "Approve a call to up__echo?"
    assert page.locator("#tool").inner_text() == "up__echo"
    assert page.locator("#server").inner_text() == "up"
    assert page.locator("#description").inner_text() == "the echo tool"
    assert page.locator("#approval").inner_text() == "payout"
    assert page.locator("#caller").inner_text() == f"alice ({oidc_server.issuer})"
    assert page.locator("#signed-in").inner_text() == f"tess ({oidc_server.issuer})"
    rows = page.locator("#arguments tr")
    shown = {json.loads(rows.nth(i).locator("th").inner_text()):
             json.loads(rows.nth(i).locator("td").inner_text()) for i in range(rows.count())}
    assert shown == {"reference": "INV-2026-0042", "text": "<b>wire</b> 2,500 EUR to ACME GmbH"}
    assert page.locator("b").count() == 0  # the arguments are text, never markup
    if os.environ.get("SCREENSHOT") == "1":
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    with page.expect_navigation():
        page.click('button[value="approve"]')
    assert page.locator("#message").inner_text() == (
        "The call to up__echo is approved: the caller can now make the call again, once.")
    # nothing refused by the page's CSP (its style is allowed by its hash)
    assert [e for e in errors if "Content Security Policy" in e] == []
    page.context.close()


def test_the_page_shows_a_padded_scope_and_an_override_escaped_in_chromium(
        gw: Gateway, tokens: dict[str, str], oidc_server: OidcServer) -> None:
    """Issue 39.15 / 40.4: padding one value hid `z_scope: ALL-CUSTOMERS` past the 4,000
    characters shown, and Approve was offered; a right-to-left override was rendered raw."""
    arguments = {"amount": "100 EUR", "memo": "invoice " + " " * 6000 + "z_scope: ALL-CUSTOMERS",
                 "to": "ACME \u202eHbmG\u202c", "z_scope": "ALL-CUSTOMERS"}
    result = run(call_declaring(gw.url, tokens["alice"], "up__echo", arguments))
    url = result.meta[AUTHORIZATION_META_KEY]["remediationHints"][0]["url"]
    with chromium() as browser:
        page = signed_in_page(browser, url, "tess", oidc_server)
        table = page.locator("#arguments")
        assert [json.loads(t) for t in table.locator("th").all_inner_texts()] == [
            "amount", "memo", "to", "z_scope"]  # every key, the last one too
        z_scope = table.locator("tr").nth(3).locator("td")
        assert z_scope.is_visible() and json.loads(z_scope.inner_text()) == "ALL-CUSTOMERS"
        memo = table.locator("tr").nth(1).locator("details")
        hidden = memo.locator("pre")
        assert not hidden.is_visible()  # folded...
        memo.locator("summary").click()
        assert hidden.is_visible()  # ...and whole, one click away
        assert json.loads(hidden.inner_text()) == arguments["memo"]
        to = table.locator("tr").nth(2).locator("td")
        assert to.inner_text() == '"ACME \\u202eHbmG\\u202c"'  # escaped, never reordered
        assert "\u202e" not in page.content()
        assert [e.inner_text() for e in page.locator(".esc").all()] == ["\\u202e", "\\u202c"]
        assert page.locator('button[value="approve"]').is_visible()
        page.context.close()


def test_anonymous_visits_store_nothing_until_a_sign_in_starts(
        gw: Gateway, redis_server: RedisServer, oidc_server: OidcServer) -> None:
    """Issue 39.11: each anonymous GET of an approvals page wrote a 600 s sign-in key to the
    shared Redis."""
    def sign_ins() -> int:
        found = subprocess.run(["redis-cli", "-p", str(redis_server.port), "--scan", "--pattern",
                                "mcp-preconditions:credentials:signin:*"],
                               capture_output=True, text=True, check=True).stdout
        # the flows themselves, not the index of the store's bound (credentials/stores_redis.py)
        return len([k for k in found.split() if not k.endswith(":index")])

    before = sign_ins()
    with httpx.Client(base_url=gw.base, timeout=10, follow_redirects=False) as http:
        pages = [http.get(f"/approvals/request-{i}" if i % 2 else "/approvals",
                          headers={"Accept": "text/html"}) for i in range(30)]
        assert sign_ins() == before  # it was 30 more, each kept 600 s
        for page in pages:
            assert page.status_code == 200 and 'id="sign-in"' in page.text
            assert "set-cookie" not in page.headers
        started = http.get("/approvals/sign-in", params={"next": "/approvals"})
        assert started.status_code == 303
        assert started.headers["location"].startswith(oidc_server.issuer)
    assert sign_ins() == before + 1  # the one sign-in started


def test_the_listing_shows_a_person_their_own_requests_beside_those_they_decide(
        gw: Gateway, tokens: dict[str, str], oidc_server: OidcServer) -> None:
    """SPEC §15 (issue 40.1): trent, a treasurer, sees his own request waiting and alice's he may
    decide, each with its arguments in short."""
    denied(gw, tokens["trent"], {"text": "trent's own", "n": 1})
    denied(gw, tokens["alice"], {"text": "alice's", "n": 2})
    with chromium() as browser:
        page = signed_in_page(browser, gw.base + "/approvals", "trent", oidc_server)
        assert page.locator("#signed-in").inner_text() == f"Signed in as trent ({oidc_server.issuer})"
        mine = page.locator("#mine li").all_inner_texts()
        theirs = page.locator("#requests li").all_inner_texts()
        assert any('"text":"trent\'s own"' in item for item in mine)
        assert not any("trent's own" in item for item in theirs)
        assert any('"text":"alice\'s"' in item and f"by alice ({oidc_server.issuer})" in item
                   for item in theirs)
        page.context.close()
