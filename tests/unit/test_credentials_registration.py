"""A connected account with nothing configured but a key (SPEC §17), with a double of the server and
its authorization server: the gateway registers itself (pre-registration, else a Client ID Metadata
Document it serves, else RFC 7591 dynamic registration, kept sealed per server and issuer, bounded),
asks for the scopes the server asked for (plus `offline_access` where listed) and the resource its
metadata publishes, checks the callback's `iss` against that issuer exactly (required where
advertised, RFC 9207), and steps up once when the server wants more scope.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import pytest

from mcp_preconditions.credentials import (
    Caller,
    Client,
    ConnectedAccounts,
    ConnectFlow,
    MemoryTickets,
    MemoryVault,
    OAuthSettings,
)
from mcp_preconditions.credentials.authorization import Found
from mcp_preconditions.credentials.grant import scope_for
from mcp_preconditions.credentials.listing import ListingAccount
from mcp_preconditions.credentials.metadata import ServerMetadata
from mcp_preconditions.credentials.registration import MAX_CLIENTS, Registration, client_metadata
from mcp_preconditions.credentials.resolver import CredentialResolver
from mcp_preconditions.credentials.sealing import Sealer
from mcp_preconditions.errors import CredentialBackendError, FlowError
from mcp_preconditions.outcomes import Status
from tests.unit.credentials_doubles import Clock, Site, caller
from tests.unit.test_credentials_discovery import AS, AS_METADATA, MCP, PRM, as_metadata, site

KEY = bytes(range(32))
BASE = "https://gw.test"
CALLBACK = BASE + "/oauth/callback"
REQ = "credential:s"
ALICE = Caller("https://idp.test", "alice")
TOKENS = {"access_token": "mcp-token", "token_type": "Bearer", "expires_in": 3600}
STEP_UP = 'Bearer error="insufficient_scope", scope="mcp:write", resource_metadata="' + PRM + '"'


class Setup:
    """The server's double, one `oauth` server `s` with nothing configured but its key, and the
    gateway's flow at BASE."""

    def __init__(self, where: Site | None = None, base: str = BASE, client: Client | None = None,
                 **settings: Any) -> None:
        self.site = where or site()
        self.site.answer("POST", f"{AS}/register", 201, {"client_id": "registered",
                                                         "client_secret": "registered-secret",
                                                         "token_endpoint_auth_method": "client_secret_post"})
        self.site.answer("POST", f"{AS}/token", 200, TOKENS)
        self.clock = Clock()
        self.tickets = MemoryTickets(clock=self.clock)
        self.accounts = ConnectedAccounts("s", OAuthSettings(client, KEY, server_url=MCP, **settings),
                                          MemoryVault(), clock=self.clock,
                                          transport=self.site.transport())
        self.flow = ConnectFlow({"s": self.accounts}, self.tickets, base, clock=self.clock)
        self.resolver = CredentialResolver({"s": self.accounts}, self.flow)

    async def authorize(self, who: Caller = ALICE) -> dict[str, str]:
        link = await self.flow.use((await self.flow.link(who, "s")).rsplit("/", 1)[1])
        url = await self.flow.authorize(link, "browser")
        assert url.startswith(f"{AS}/authorize?")
        return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}

    async def connect(self, who: Caller = ALICE, **answer: str) -> dict[str, str]:
        query = await self.authorize(who)
        await self.flow.callback({"state": query["state"], "code": "the-code", "iss": AS, **answer},
                                 "browser", who)
        return query

    def sent(self, url: str) -> list[dict[str, Any]]:
        """The bodies POSTed to `url` (forms as dicts, JSON as it was)."""
        found = []
        for request in self.site.requests:
            if request.method == "POST" and str(request.url) == url:
                body = request.content.decode()
                found.append(json.loads(body) if body.startswith("{") else dict(parse_qsl(body)))
        return found


# -- registration ---------------------------------------------------------------------------------------
async def test_with_nothing_configured_the_gateway_registers_and_asks_for_what_the_server_asked() -> None:
    setup = Setup()
    query = await setup.authorize()
    assert {k: v for k, v in query.items() if k not in ("state", "code_challenge")} == {
        "response_type": "code", "client_id": "registered", "redirect_uri": CALLBACK,
        "code_challenge_method": "S256", "scope": "mcp:basic", "resource": MCP}
    (registered,) = setup.sent(f"{AS}/register")
    assert registered == {"client_name": "mcp-preconditions gateway", "client_uri": BASE,
                          "redirect_uris": [CALLBACK], "grant_types": ["authorization_code",
                                                                        "refresh_token"],
                          "response_types": ["code"], "application_type": "web",
                          "token_endpoint_auth_method": "client_secret_basic"}  # (nothing listed)
    await setup.flow.callback({"state": query["state"], "code": "c", "iss": AS}, "browser", ALICE)
    (form,) = setup.sent(f"{AS}/token")
    assert (form["client_id"], form["client_secret"], form["resource"]) == (
        "registered", "registered-secret", MCP)  # as the registration answered: client_secret_post
    obtained = await setup.resolver.obtain(REQ, caller("alice"), None)
    assert obtained.credential is not None and obtained.credential.headers() == {
        "Authorization": "Bearer mcp-token"}


@pytest.mark.parametrize(("methods", "registered_with"), [
    (["none"], "none"), (["client_secret_post", "none"], "client_secret_post"),
    (["private_key_jwt", "client_secret_basic"], "client_secret_basic"),
])
async def test_the_registration_asks_for_an_authentication_the_server_takes(
        methods: list[str], registered_with: str) -> None:
    setup = Setup(site(metadata=as_metadata(token_endpoint_auth_methods_supported=methods)))
    await setup.authorize()
    assert setup.sent(f"{AS}/register")[0]["token_endpoint_auth_method"] == registered_with


async def test_a_registered_client_is_kept_sealed_per_server_and_issuer() -> None:
    setup = Setup()
    await setup.authorize()
    await setup.authorize()
    assert len(setup.sent(f"{AS}/register")) == 1
    raw = b"".join(v for v, _ in setup.tickets._entries.values())
    assert b"registered-secret" not in raw and b"registered" not in raw
    other = ServerMetadata("https://as2.test", "https://as2.test/a", "https://as2.test/t",
                           "https://as2.test/register")
    setup.site.answer("POST", "https://as2.test/register", 201, {"client_id": "two",
                                                                  "token_endpoint_auth_method": "none"})
    client = await setup.flow.registrations["s"].client(Found(other))
    assert client == Client("two", "", "none")  # never the first issuer's client (SEP-2352)


async def test_registered_clients_are_bounded_per_server() -> None:
    setup = Setup()
    registration = setup.flow.registrations["s"]
    for n in range(MAX_CLIENTS + 2):
        issuer = f"https://as{n}.test"
        setup.site.answer("POST", f"{issuer}/register", 201, {"client_id": f"c{n}",
                                                               "token_endpoint_auth_method": "none"})
        await registration.client(Found(ServerMetadata(issuer, f"{issuer}/a", f"{issuer}/t",
                                                       f"{issuer}/register")))
    assert len(setup.tickets) == MAX_CLIENTS


async def test_a_client_id_metadata_document_where_taken_and_the_gateway_is_https() -> None:
    setup = Setup(site(metadata=as_metadata(client_id_metadata_document_supported=True)))
    assert (await setup.authorize())["client_id"] == BASE + "/client-metadata.json"
    assert setup.sent(f"{AS}/register") == []
    assert client_metadata(BASE)["client_id"] == BASE + "/client-metadata.json"
    plain = Setup(site(metadata=as_metadata(client_id_metadata_document_supported=True)),
                  base="http://127.0.0.1:9")  # a URL client_id must be https: registered instead
    assert (await plain.authorize())["client_id"] == "registered"


async def test_a_pre_registered_client_comes_first() -> None:
    setup = Setup(site(metadata=as_metadata(client_id_metadata_document_supported=True)),
                  client=Client("pre", "pre-secret"))
    assert (await setup.authorize())["client_id"] == "pre"
    assert setup.sent(f"{AS}/register") == []


@pytest.mark.parametrize(("metadata", "answer", "reason"), [
    (as_metadata(registration_endpoint=None), None,
     "server 's': its authorization server offers neither dynamic client registration nor Client "
     "ID Metadata Documents (to an https gateway): register the gateway there and set client_id"),
    (as_metadata(registration_endpoint="http://as.test/register"), None,
     "registration endpoint 'http://as.test/register': http where https is required (only a "
     "loopback host may use http)"),
    (as_metadata(token_endpoint_auth_methods_supported=["private_key_jwt"]), None,
     f"the authorization server of {AS}/register takes none of the client authentications the "
     "gateway has (client_secret_basic, client_secret_post, none)"),
    (as_metadata(), (400, {"error": "invalid_redirect_uri"}),
     f"registration at {AS}/register answered HTTP 400 (invalid_redirect_uri)"),
    (as_metadata(), (201, {"client_secret": "s"}),
     f"registration at {AS}/register answered without a usable client_id"),
    (as_metadata(), (201, {"client_id": "c", "token_endpoint_auth_method": "client_secret_basic"}),
     f"registration at {AS}/register answered client_secret_basic without a usable client_secret"),
    (as_metadata(), (201, {"client_id": "c", "token_endpoint_auth_method": "tls_client_auth"}),
     f"registration at {AS}/register answered an authentication the gateway has not"),
])
async def test_a_registration_that_cannot_be_made_says_why(
        metadata: dict[str, Any], answer: tuple[int, Any] | None, reason: str) -> None:
    setup = Setup(site(metadata={k: v for k, v in metadata.items() if v is not None}))
    if answer is not None:
        setup.site.answer("POST", f"{AS}/register", *answer)
    link = await setup.flow.use((await setup.flow.link(ALICE, "s")).rsplit("/", 1)[1])
    with pytest.raises(CredentialBackendError) as failed:
        await setup.flow.authorize(link, "browser")
    assert str(failed.value) == reason


# -- scopes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("configured", "asked", "listed", "wanted", "scope"), [
    ((), ("mcp:basic",), (), (), ("mcp:basic",)),
    (("repo",), ("mcp:basic",), (), (), ("repo",)),  # the operator's word first
    ((), (), (), (), ()),  # nothing asked, nothing listed: none (the authorization server chooses)
    ((), ("a",), ("a", "offline_access"), (), ("a", "offline_access")),  # SEP-2207
    ((), (), ("offline_access",), (), ()),  # never offline_access alone
    ((), ("a",), (), ("a", "b"), ("a", "b")),  # a step-up: the union (SEP-2350)
])
def test_the_scopes_asked_for(configured: tuple[str, ...], asked: tuple[str, ...],
                              listed: tuple[str, ...], wanted: tuple[str, ...],
                              scope: tuple[str, ...]) -> None:
    found = Found(ServerMetadata(AS, "a", "t", scopes_supported=listed), asked)
    assert scope_for(configured, found, wanted) == scope


# -- the callback's iss (RFC 9207) ---------------------------------------------------------------------
@pytest.mark.parametrize(("advertised", "iss", "message"), [
    (True, AS, None),
    (False, None, None),
    (True, None, "The authorization server always names itself in its answers (RFC 9207), and this "
                 "one does not: refused."),
    (True, "https://evil.test", "The answer came from another authorization server."),
    (False, "https://evil.test", "The answer came from another authorization server."),
    (True, AS + "/", "The answer came from another authorization server."),  # compared as strings
])
async def test_the_answers_iss_is_the_issuer_exactly(advertised: bool, iss: str | None,
                                                      message: str | None) -> None:
    metadata = as_metadata(authorization_response_iss_parameter_supported=advertised)
    setup = Setup(site(metadata=metadata))
    query = await setup.authorize()
    answer = {"state": query["state"], "code": "c", **({"iss": iss} if iss is not None else {})}
    if message is None:
        await setup.flow.callback(answer, "browser", ALICE)
        assert len(setup.sent(f"{AS}/token")) == 1
        return
    with pytest.raises(FlowError) as refused:
        await setup.flow.callback(answer, "browser", ALICE)
    assert (refused.value.status, str(refused.value)) == (400, message)
    assert setup.sent(f"{AS}/token") == []  # the code never redeemed


# -- what a call gets ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("metadata", "why"), [
    (as_metadata("https://attacker.test"),
     f"authorization server metadata at {AS_METADATA} names issuer 'https://attacker.test', not "
     "'https://as.test'"),
    (as_metadata(token_endpoint="http://as.test/token"),
     f"authorization server metadata at {AS_METADATA}: token_endpoint 'http://as.test/token': "
     "http where https is required (only a loopback host may use http)"),
    ({k: v for k, v in as_metadata().items() if k != "authorization_endpoint"},
     f"authorization server metadata at {AS_METADATA} has no 'authorization_endpoint'"),
], ids=["another issuer", "http off loopback", "a missing endpoint"])
async def test_bad_metadata_is_error_with_a_warning_naming_why(
        caplog: pytest.LogCaptureFixture, metadata: dict[str, Any], why: str) -> None:
    caplog.set_level(logging.WARNING, "mcp_preconditions.credentials")
    setup = Setup(site(metadata=metadata))
    obtained = await setup.resolver.obtain(REQ, caller("alice"), "the-callers-token")
    assert (obtained.outcome.status, obtained.outcome.reason, obtained.credential) == (
        Status.ERROR, why, None)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"credential for server s (oauth) failed for caller 'alice': {why}")]
    assert setup.sent(f"{AS}/register") == [] and setup.sent(f"{AS}/token") == []  # never used
    with pytest.raises(CredentialBackendError) as failed:  # nor is a person sent there
        await setup.flow.authorize(await setup.flow.use(
            (await setup.flow.link(ALICE, "s")).rsplit("/", 1)[1]), "browser")
    assert str(failed.value) == why


async def test_with_good_metadata_and_no_account_it_is_unsatisfied() -> None:
    refused = await Setup().resolver.obtain(REQ, caller("alice"), None)
    assert (refused.outcome.status, refused.outcome.reason) == (
        Status.UNSATISFIED, "no account connected for server 's'")


async def test_one_step_up_for_the_union_of_scopes_then_no_more() -> None:
    setup = Setup()
    await setup.connect()
    stale = (await setup.resolver.obtain(REQ, caller("alice"), None)).credential
    assert stale is not None
    stepped = await setup.resolver.renew(REQ, caller("alice"), None, stale, STEP_UP)
    assert (stepped.outcome.status, stepped.outcome.reason) == (
        Status.UNSATISFIED, "server 's' asks for more scope (mcp:write): connect the account again "
                            "to grant it")
    assert (await setup.resolver.obtain(REQ, caller("alice"), None)).credential is not None  # kept
    query = await setup.connect()
    assert query["scope"] == "mcp:basic mcp:write"  # what it had, and what the server asked for
    again = (await setup.resolver.obtain(REQ, caller("alice"), None)).credential
    assert again is not None
    last = await setup.resolver.renew(REQ, caller("alice"), None, again, STEP_UP)
    assert (last.outcome.status, last.outcome.reason) == (
        Status.UNSATISFIED, "server 's' refuses the connected account for want of scope (mcp:write) "
                            "after one step-up")
    assert len(setup.sent(f"{AS}/token")) == 2  # no refresh attempted for a step-up


async def test_a_refused_token_without_refresh_ends_the_connection_and_looks_again() -> None:
    """SEP-2352: the server moved to another authorization server; the next connection is made
    there, with a client registered there."""
    setup = Setup()
    await setup.connect()
    stale = (await setup.resolver.obtain(REQ, caller("alice"), None)).credential
    assert stale is not None
    moved = "https://as2.test"
    setup.site.answer("GET", PRM, 200, {"resource": MCP, "authorization_servers": [moved]})
    setup.site.answer("GET", "https://as2.test/.well-known/oauth-authorization-server", 200,
                      as_metadata(moved))
    setup.site.answer("POST", f"{moved}/register", 201, {"client_id": "two",
                                                         "token_endpoint_auth_method": "none"})
    ended = await setup.resolver.renew(REQ, caller("alice"), None, stale,
                                       f'Bearer resource_metadata="{PRM}"')
    assert ended.result == "refused"
    link = await setup.flow.use((await setup.flow.link(ALICE, "s")).rsplit("/", 1)[1])
    url = await setup.flow.authorize(link, "browser")
    assert url.startswith(f"{moved}/authorize?") and "client_id=two" in url


def test_the_gateways_own_session_goes_as_one_connected_account() -> None:
    from mcp_preconditions.credentials.credential import Credential

    changes: list[dict[str, str]] = []
    listing = ListingAccount({"X-Static": "s"})
    listing.on_change = lambda: changes.append(dict(listing))
    bob = Caller("https://idp.test", "bob")
    listing.offer(ALICE, Credential.bearer("a1", "oauth"))
    listing.offer(bob, Credential.bearer("b1", "oauth"))  # alice's is held: bob's waits
    listing.offer(ALICE, Credential.bearer("a1", "oauth"))  # the same: nothing changes
    listing.offer(ALICE, Credential.bearer("a2", "oauth"))  # refreshed
    listing.release(bob)
    listing.release(ALICE)
    listing.offer(bob, Credential.bearer("b1", "oauth"))
    assert changes == [{"X-Static": "s", "Authorization": "Bearer a1"},
                       {"X-Static": "s", "Authorization": "Bearer a2"}, {"X-Static": "s"},
                       {"X-Static": "s", "Authorization": "Bearer b1"}]
    assert "b1" not in repr(listing) and repr(listing) == "ListingAccount(['Authorization', 'X-Static'])"


async def test_a_connection_offers_itself_to_the_listing_and_gives_its_place_up() -> None:
    setup = Setup()
    listing = setup.accounts.listing = ListingAccount({})
    await setup.connect()
    assert dict(listing) == {"Authorization": "Bearer mcp-token"} and listing.holder == ALICE
    await setup.accounts.remove(ALICE)
    assert dict(listing) == {} and listing.holder is None


def test_registration_is_sealed_with_the_servers_key() -> None:
    registration = Registration("s", OAuthSettings(None, KEY, server_url=MCP), Sealer(KEY),
                                MemoryTickets(), BASE)
    assert registration.settings.client is None
    assert base64.b64encode(KEY).decode() not in repr(registration.settings)


async def _lent(refresh: bool) -> tuple[Setup, ListingAccount, list[dict[str, str]]]:
    """Alice connected (with a refresh token or without), her account lent to the gateway's own
    session; what the session's headers became, each time they changed."""
    setup = Setup()
    issued = iter(range(100))

    def token(request: Any) -> tuple[int, Any, dict[str, str]]:
        n = next(issued)
        return 200, {**TOKENS, "access_token": f"t{n}",
                     **({"refresh_token": f"r{n}"} if refresh else {})}, {}
    setup.site.routes[("POST", f"{AS}/token")] = token
    listing = ListingAccount({})
    changes: list[dict[str, str]] = []
    listing.on_change = lambda: changes.append(dict(listing))
    setup.accounts.lend(listing)
    await setup.connect()
    return setup, listing, changes


async def _refused(setup: Setup, listing: ListingAccount, challenge: str) -> None:
    listing.refused(challenge)
    for task in list(setup.accounts._renewing):
        await task


async def test_the_lent_account_refused_is_renewed_once_then_given_up(
        caplog: pytest.LogCaptureFixture) -> None:
    setup, listing, changes = await _lent(refresh=True)
    await _refused(setup, listing, 'Bearer error="invalid_token"')
    assert changes == [{"Authorization": "Bearer t0"}, {"Authorization": "Bearer t1"}]
    assert setup.sent(f"{AS}/token")[-1]["grant_type"] == "refresh_token"
    await _refused(setup, listing, 'Bearer error="invalid_token"')  # the renewed one, refused too
    assert changes[-1] == {} and listing.holder is None
    assert "even renewed" in caplog.text and len(setup.sent(f"{AS}/token")) == 2  # no more asked
    await setup.accounts.load(ALICE)  # the same token again is not held again
    assert listing.holder is None
    assert (await setup.resolver.obtain(REQ, caller("alice"), None)).credential is not None  # hers


async def test_the_lent_account_without_a_refresh_token_ends_and_the_server_is_looked_up_again() -> None:
    setup, listing, changes = await _lent(refresh=False)
    looked = len(setup.site.requests)
    await _refused(setup, listing, f'Bearer resource_metadata="{PRM}"')
    assert changes == [{"Authorization": "Bearer t0"}, {}] and listing.holder is None
    assert await setup.accounts.load(ALICE) is None  # the connection ended (SEP-2352: moved?)
    await setup.accounts.discovery.found()
    assert len(setup.site.requests) > looked  # looked up again


async def test_the_lent_account_lacking_scope_is_not_renewed(caplog: pytest.LogCaptureFixture) -> None:
    setup, listing, changes = await _lent(refresh=True)
    await _refused(setup, listing, STEP_UP)
    assert changes == [{"Authorization": "Bearer t0"}] and listing.holder == ALICE
    assert "wants more scope (mcp:write) for the gateway's own session" in caplog.text
