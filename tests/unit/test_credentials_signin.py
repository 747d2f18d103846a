"""The sign-in's pieces that need no issuer: the signed-in person's cookie (sealed, short-lived,
unforgeable), where a flow may return to (this site only), and a sign-in state bound to its browser.
The flow itself runs against the real oidc-provider (tests/integration/test_credentials_pages.py).
"""

from __future__ import annotations

import base64

import pytest

from mcp_preconditions.credentials import Caller, Client, MemoryTickets, SignIn, SignInSettings
from mcp_preconditions.credentials.discovery import Endpoints
from mcp_preconditions.credentials.signin import SESSION_SECONDS, local_path
from mcp_preconditions.errors import FlowError
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock

KEY = bytes(32)
ALICE = Caller(ISSUER, "alice")


def sign_in(clock: Clock, key: bytes = KEY, server: AuthServer | None = None) -> SignIn:
    settings = SignInSettings(ISSUER, Client("gw", "gw-secret"), jwks_uri=f"{ISSUER}/jwks")
    made = SignIn(settings, MemoryTickets(clock=clock), key, clock=clock,
                  transport=(server or AuthServer()).transport())
    made.discovery._found = Endpoints(f"{ISSUER}/authorize", f"{ISSUER}/token", f"{ISSUER}/jwks")
    return made


def test_the_session_cookie_names_the_person_until_it_expires() -> None:
    clock = Clock()
    signed = sign_in(clock)
    cookie = signed.session(ALICE)
    assert "alice" not in base64.urlsafe_b64decode(cookie).decode("latin-1")
    assert signed.person_of(cookie) == ALICE
    clock.now += SESSION_SECONDS
    assert signed.person_of(cookie) is None


@pytest.mark.parametrize("cookie", [None, "", "garbage", "!!!", base64.urlsafe_b64encode(b"x" * 80).decode()])
def test_no_forged_cookie_names_anyone(cookie: str | None) -> None:
    assert sign_in(Clock()).person_of(cookie) is None


def test_a_cookie_of_another_key_names_no_one() -> None:
    clock = Clock()
    assert sign_in(clock, bytes(range(32))).person_of(sign_in(clock).session(ALICE)) is None


@pytest.mark.parametrize(("path", "ok"), [
    ("/connect/abc", True), ("/approvals/1?x=2", True), ("//evil.test/x", False),
    ("https://evil.test/", False), ("/\\evil.test", False), ("connect", False), ("/a\nb", False)])
def test_a_flow_returns_only_to_this_site(path: str, ok: bool) -> None:
    assert local_path(path) is ok


async def test_begin_asks_for_openid_with_pkce_and_a_nonce_and_refuses_other_sites() -> None:
    from urllib.parse import parse_qs, urlsplit

    signed = sign_in(Clock())
    url = await signed.begin("/connect/abc", "https://gw.test/connect/callback", "browser-1")
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert url.startswith(f"{ISSUER}/authorize?")
    assert {k: query[k] for k in ("response_type", "client_id", "redirect_uri", "scope",
                                  "code_challenge_method")} == {
        "response_type": "code", "client_id": "gw", "redirect_uri": "https://gw.test/connect/callback",
        "scope": "openid", "code_challenge_method": "S256"}
    assert len(query["nonce"]) >= 43 and len(query["state"]) >= 43
    with pytest.raises(FlowError) as elsewhere:
        await signed.begin("https://evil.test/", "https://gw.test/connect/callback", "browser-1")
    assert (elsewhere.value.status, str(elsewhere.value)) == (
        400, "A sign-in returns only to a page of this gateway.")


@pytest.mark.parametrize(("change", "message"), [
    ({"state": "made-up"}, "Unknown, used or expired sign-in: start again."),
    ({"binding": "browser-2"}, "This sign-in was started in another browser."),
    ({"iss": "https://evil.test"}, "The answer came from another issuer."),
    ({"code": None}, "The sign-in did not complete."),
])
async def test_a_bad_sign_in_answer_is_refused_400_before_any_code_is_redeemed(
        change: dict[str, str | None], message: str) -> None:
    from urllib.parse import parse_qs, urlsplit

    server = AuthServer()
    signed = sign_in(Clock(), server=server)
    url = await signed.begin("/connect/abc", "https://gw.test/connect/callback", "browser-1")
    answer: dict[str, str | None] = {"state": parse_qs(urlsplit(url).query)["state"][0], "code": "c"}
    binding = str(change.pop("binding", "browser-1"))
    answer.update(change)
    with pytest.raises(FlowError) as refused:
        await signed.finish({k: v for k, v in answer.items() if v is not None}, binding)
    assert (refused.value.status, str(refused.value)) == (400, message)
    assert server.requests == []


async def test_the_gateways_sign_ins_under_way_are_bounded_at_10000(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39.11: every visitor's sign-in kept a 600 s record without bound. The gateway's
    sign-in store (cli/_pages.py) keeps at most MAX_FLOWS, the oldest out first; each lives
    FLOW_SECONDS. (Redis alike: tests/integration/test_credentials_redis_bounds.py.)"""
    from urllib.parse import parse_qs, urlsplit

    from mcp_preconditions.cli._credentials import Wired
    from mcp_preconditions.cli._pages import _sign_in
    from mcp_preconditions.credentials.pkce import digest
    from mcp_preconditions.credentials.signin import FLOW_SECONDS, MAX_FLOWS
    from mcp_preconditions.policy.load import parse_policy

    monkeypatch.setenv("GW_TEST_ID", "gw")
    monkeypatch.setenv("GW_TEST_SECRET", "gw-secret")
    source = parse_policy(f'[auth]\nissuer = "{ISSUER}"\naudience = "a"\njwks_uri = "{ISSUER}/jwks"\n'
                          '[auth.sign_in]\nclient_id = "env:GW_TEST_ID"\n'
                          'client_secret = "env:GW_TEST_SECRET"\n'.encode(), "p.toml")
    signed, _ = _sign_in(Wired(), source)
    assert signed is not None and (MAX_FLOWS, FLOW_SECONDS) == (10_000, 600.0)
    signed.discovery._found = Endpoints(f"{ISSUER}/authorize", f"{ISSUER}/token", f"{ISSUER}/jwks")
    states = []
    for _ in range(MAX_FLOWS + 1):
        url = await signed.begin("/connections", "https://gw.test/connect/callback", "browser-1")
        states.append(parse_qs(urlsplit(url).query)["state"][0])
    assert len(signed.tickets) == MAX_FLOWS  # type: ignore[arg-type]
    with pytest.raises(FlowError, match="Unknown, used or expired sign-in"):
        await signed.finish({"state": states[0], "code": "c"}, "browser-1")
    assert await signed.tickets.get("signin:" + digest(states[-1])) is not None
