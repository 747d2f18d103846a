"""Connect links and the `state` of the authorization-code flow with doubles: a link is made for
the caller who was denied, single use, valid 600 s (reused while it has 300 s left); the
authorization URL carries PKCE S256; a callback with a state that is unknown, used, expired,
another browser's or another caller's is refused 400 and its code never redeemed.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from mcp_preconditions.credentials import Caller, ConnectedAccounts, ConnectFlow, MemoryTickets, MemoryVault
from mcp_preconditions.credentials.resolver import CredentialResolver
from mcp_preconditions.errors import FlowError
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock, caller
from tests.unit.test_credentials_accounts import oauth_settings

BASE = "https://gw.test"
ALICE, BOB = Caller(ISSUER, "alice"), Caller(ISSUER, "bob")
TOKENS = {"access_token": "connected-token", "token_type": "Bearer", "expires_in": 3600,
          "refresh_token": "connected-refresh"}


class Flow:
    def __init__(self, **settings: Any) -> None:
        self.server = AuthServer(lambda form: (200, TOKENS))
        self.clock = Clock()
        self.tickets = MemoryTickets(clock=self.clock)
        self.accounts = ConnectedAccounts("gh", oauth_settings(**settings), MemoryVault(),
                                          clock=self.clock, transport=self.server.transport())
        self.flow = ConnectFlow({"gh": self.accounts}, self.tickets, BASE + "/", clock=self.clock)
        self.resolver = CredentialResolver({"gh": self.accounts}, self.flow)

    async def started(self, who: Caller = ALICE, binding: str = "browser-1") -> dict[str, str]:
        """A link opened and the flow begun: the authorization URL's query."""
        url = await self.flow.link(who, "gh")
        link = await self.flow.use(url.rsplit("/", 1)[1])
        query = parse_qs(urlsplit(await self.flow.authorize(link, binding)).query)
        return {k: v[0] for k, v in query.items()}


def link_id(url: str) -> str:
    assert url.startswith(BASE + "/connect/")
    return url.rsplit("/", 1)[1]


# -- links --------------------------------------------------------------------------------------------
async def test_a_link_is_made_for_the_denied_caller_and_used_once() -> None:
    flow = Flow()
    url = await flow.resolver.connect_url("credential:gh", caller("alice"))
    assert url is not None
    assert (await flow.flow.peek(link_id(url))).caller == ALICE
    assert (await flow.flow.peek(link_id(url))).caller == ALICE  # looking does not use it
    link = await flow.flow.use(link_id(url))
    assert (link.caller, link.server) == (ALICE, "gh")
    for attempt in (flow.flow.use, flow.flow.peek):
        with pytest.raises(FlowError) as gone:
            await attempt(link_id(url))
        assert (gone.value.status, str(gone.value)) == (
            410, "This connect link was used already, or has expired. Call the tool again for a new one.")


async def test_a_link_expires_after_600_s_and_an_unknown_one_is_gone_too() -> None:
    flow = Flow()
    url = await flow.flow.link(ALICE, "gh")
    flow.clock.now += 600
    for unknown in (link_id(url), "nope", ""):
        with pytest.raises(FlowError) as gone:
            await flow.flow.peek(unknown)
        assert gone.value.status == 410


async def test_a_denied_caller_gets_their_live_link_again_then_a_new_one() -> None:
    flow = Flow()
    first = await flow.flow.link(ALICE, "gh")
    flow.clock.now += 299
    assert await flow.flow.link(ALICE, "gh") == first  # 301 s left
    assert await flow.flow.link(BOB, "gh") != first
    flow.clock.now += 2
    second = await flow.flow.link(ALICE, "gh")
    assert second != first
    with pytest.raises(FlowError):  # the old one was replaced
        await flow.flow.peek(link_id(first))
    assert (await flow.flow.peek(link_id(second))).caller == ALICE


async def test_links_are_bounded_by_callers_not_by_denials() -> None:
    flow = Flow()
    for _ in range(50):
        await flow.flow.link(ALICE, "gh")
    assert len(flow.tickets) == 2  # the link and its index


async def test_no_link_for_an_unknown_caller_or_a_kind_without_one() -> None:
    from mcp_preconditions.principal import ANONYMOUS_IDENTITY

    flow = Flow()
    assert await flow.resolver.connect_url("credential:gh", ANONYMOUS_IDENTITY) is None
    assert await CredentialResolver({"gh": flow.accounts}).connect_url("credential:gh", caller()) is None


async def test_tickets_keep_no_usable_link_or_state() -> None:
    flow = Flow()
    url = await flow.flow.link(ALICE, "gh")
    query = await flow.started(BOB)
    stored = repr(flow.tickets._entries)
    for secret in (link_id(url), query["state"]):
        assert secret not in stored


# -- the authorization-code flow ----------------------------------------------------------------------
async def test_the_authorization_url_asks_for_a_code_with_pkce_s256() -> None:
    flow = Flow(resource="https://api.gh.test")
    query = await flow.started()
    assert {k: v for k, v in query.items() if k not in ("state", "code_challenge")} == {
        "response_type": "code", "client_id": "gh-client", "redirect_uri": BASE + "/oauth/callback",
        "code_challenge_method": "S256", "scope": "repo", "resource": "https://api.gh.test"}
    assert len(query["state"]) >= 43 and len(query["code_challenge"]) == 43


async def test_a_callback_redeems_the_code_with_the_verifier_and_keeps_the_tokens() -> None:
    flow = Flow()
    query = await flow.started()
    server, connection = await flow.flow.callback({"state": query["state"], "code": "the-code"},
                                                  "browser-1", ALICE)
    assert server == "gh" and connection.expires_at == flow.clock.now + 3600
    form = flow.server.forms[0]
    verifier = form.pop("code_verifier")
    assert form == {"grant_type": "authorization_code", "code": "the-code",
                    "redirect_uri": BASE + "/oauth/callback"}
    digest = hashlib.sha256(verifier.encode()).digest()
    assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == query["code_challenge"]
    obtained = await flow.resolver.obtain("credential:gh", caller("alice"), None)
    assert obtained.credential is not None
    assert obtained.credential.headers() == {"Authorization": "Bearer connected-token"}


UNKNOWN = "Unknown, used or expired state: start again from the connect link."


@pytest.mark.parametrize(("case", "message"), [
    ("unknown", UNKNOWN),
    ("missing", UNKNOWN),
    ("used", UNKNOWN),
    ("expired", UNKNOWN),
    ("another browser", "This state was issued to another browser."),
    ("no browser binding", "This state was issued to another browser."),
    ("another caller", "This state was issued to another caller."),
    ("nobody signed in", "This state was issued to another caller."),
    ("another issuer", "The answer came from another authorization server."),
])
async def test_a_bad_state_is_refused_400_and_its_code_never_redeemed(case: str, message: str) -> None:
    flow = Flow(authorization_endpoint=None, token_endpoint=None, issuer=ISSUER)
    from mcp_preconditions.credentials.authorization import Found
    from mcp_preconditions.credentials.metadata import ServerMetadata

    flow.accounts.discovery._found = Found(ServerMetadata(ISSUER, f"{ISSUER}/authorize",
                                                          f"{ISSUER}/token"))
    query = await flow.started()
    answer = {"state": query["state"], "code": "the-code"}
    binding, person = "browser-1", ALICE
    if case == "unknown":
        answer["state"] = "made-up"
    elif case == "missing":
        del answer["state"]
    elif case == "used":
        await flow.flow.callback(dict(answer), binding, person)
        flow.server.requests.clear()
    elif case == "expired":
        flow.clock.now += 600
    elif case == "another browser":
        binding = "browser-2"
    elif case == "no browser binding":
        binding = None  # type: ignore[assignment]
    elif case == "another caller":
        person = BOB
    elif case == "nobody signed in":
        person = None  # type: ignore[assignment]
    elif case == "another issuer":
        answer["iss"] = "https://evil.test"
    with pytest.raises(FlowError) as refused:
        await flow.flow.callback(answer, binding, person)
    assert (refused.value.status, str(refused.value)) == (400, message)
    assert flow.server.requests == []  # the code was never redeemed


async def test_a_refused_state_stays_good_for_its_own_caller() -> None:
    flow = Flow()
    query = await flow.started()
    answer = {"state": query["state"], "code": "the-code"}
    with pytest.raises(FlowError):
        await flow.flow.callback(answer, "browser-2", BOB)  # a thief
    assert (await flow.flow.callback(answer, "browser-1", ALICE))[0] == "gh"


async def test_an_authorization_server_that_says_no_uses_up_the_state() -> None:
    flow = Flow()
    query = await flow.started()
    with pytest.raises(FlowError) as refused:
        await flow.flow.callback({"state": query["state"], "error": "access_denied"}, "browser-1",
                                 ALICE)
    assert (refused.value.status, str(refused.value)) == (
        400, "The authorization server did not connect the account (access_denied).")
    with pytest.raises(FlowError, match="Unknown, used or expired state"):
        await flow.flow.callback({"state": query["state"], "code": "c"}, "browser-1", ALICE)
    assert flow.server.requests == []


@pytest.mark.parametrize(("status", "body", "expected", "message"), [
    (400, {"error": "invalid_grant"}, 400,
     "The authorization server refused the code (the authorization server refused: invalid_grant)."),
    (503, {}, 502, "The authorization server could not complete the connection; try again."),
    (200, {"token_type": "Bearer"}, 502,
     "The authorization server could not complete the connection; try again."),
])
async def test_a_code_that_cannot_be_redeemed(status: int, body: Any, expected: int, message: str) -> None:
    flow = Flow()
    flow.server.answer = lambda form: (status, body)
    query = await flow.started()
    with pytest.raises(FlowError) as refused:
        await flow.flow.callback({"state": query["state"], "code": "c"}, "browser-1", ALICE)
    assert (refused.value.status, str(refused.value)) == (expected, message)
    assert await flow.accounts.load(ALICE) is None


async def test_a_caller_has_at_most_16_flows_under_way_the_oldest_dropped() -> None:
    """Issue 39.10: one caller starting flows without end filled the store for everyone (in
    Redis without any bound). Links and flows under way are MAX_PENDING per caller; the oldest
    goes first, and nobody else's is touched."""
    from mcp_preconditions.credentials.connect import MAX_PENDING

    flow = Flow()
    bobs = await flow.started(BOB)
    alices = [await flow.started(ALICE) for _ in range(MAX_PENDING + 4)]
    assert MAX_PENDING == 16 and len(flow.tickets) == MAX_PENDING + 1  # alice's 16 states, bob's 1
    link = await flow.flow.link(ALICE, "gh")  # a link counts too: it pushes out one more state
    assert (await flow.flow.peek(link_id(link))).caller == ALICE
    for dropped in alices[:5]:
        with pytest.raises(FlowError, match="Unknown, used or expired state"):
            await flow.flow.callback({"state": dropped["state"], "code": "c"}, "browser-1", ALICE)
    assert flow.server.requests == []
    assert (await flow.flow.callback({"state": alices[5]["state"], "code": "c"}, "browser-1",
                                     ALICE))[0] == "gh"
    assert (await flow.flow.callback({"state": bobs["state"], "code": "c"}, "browser-1", BOB))[0] == "gh"
