"""`/connections` for scripts (SPEC §14): a caller's bearer token lists their connected accounts (the
server and the times, never a token) and removes them; another caller lists none of them and removes
nothing; a request without a valid token is 401 with `WWW-Authenticate`.

In-process: the gateway's credential pages (CredentialPages, wired as tests/fixtures/credential_pages.py
wires them) called through the streaming bridge, callers' tokens signed here
(tests/fixtures/local_issuer.py), alice's connection kept in the vault as a connect flow keeps it.
Connecting through the real oidc-provider, in Chromium and over plain HTTP, is
test_credentials_pages.py's (interop).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from mcp_preconditions.auth.build import build_authenticator
from mcp_preconditions.credentials import (
    Client,
    ConnectedAccounts,
    ConnectFlow,
    MemoryTickets,
    MemoryVault,
    OAuthSettings,
    SignIn,
    SignInSettings,
    caller_of,
)
from mcp_preconditions.credentials.accounts import Connection
from mcp_preconditions.credentials.caller import Caller
from mcp_preconditions.pages.credentials import CredentialPages
from mcp_preconditions.principal import Credentials
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.local_issuer import ISSUER_KEY
from tests.fixtures.oidc import AUDIENCE, WIKI, policy_with

BASE = "http://127.0.0.1:8000"
AUTH = policy_with({"issuer": ISSUER_KEY.issuer, "audience": AUDIENCE, "algorithms": ["RS256"],
                    "public_keys_pem": ISSUER_KEY.key.public_pem()})


@asynccontextmanager
async def connections_api() -> AsyncIterator[tuple[httpx.AsyncClient, ConnectedAccounts]]:
    """The credential pages of a gateway with one `oauth` server, `wiki`, whose callers' tokens
    are ISSUER_KEY's; an httpx client on them, and the server's accounts."""
    key = os.urandom(32)
    vault, tickets = MemoryVault(), MemoryTickets()
    accounts = ConnectedAccounts("wiki", OAuthSettings(Client("connector", "connector-secret"), key,
                                                       issuer=ISSUER_KEY.issuer, scope=("wiki:read",),
                                                       resource=WIKI), vault)
    flow = ConnectFlow({"wiki": accounts}, tickets, BASE)
    signing = SignIn(SignInSettings(ISSUER_KEY.issuer, Client("gateway", "gateway-secret")), tickets,
                     key)
    pages = CredentialPages(flow, build_authenticator(AUTH), signing).app()
    async with AsgiBridge(pages, base_url=BASE, lifespan=False) as bridge, bridge.httpx() as http:
        yield http, accounts


async def caller_for(token: str) -> Caller:
    """The caller the pages see for `token`."""
    identity = await build_authenticator(AUTH).authenticate(Credentials(token=token))
    caller = caller_of(identity.principal)
    assert caller is not None, identity.failure
    return caller


async def connect(accounts: ConnectedAccounts, token: str) -> None:
    """What a redeemed code leaves: the caller's connection, sealed in the vault."""
    now = time.time()
    await accounts.save(await caller_for(token),
                        Connection("wiki-access-token", "wiki-refresh", now, now + 3600))


async def test_a_caller_lists_and_removes_only_their_own_connections() -> None:
    alice, bob = ISSUER_KEY.token("alice"), ISSUER_KEY.token("bob")
    async with connections_api() as (http, accounts):
        await connect(accounts, alice)
        listed = (await http.get("/connections", headers={"Authorization": f"Bearer {alice}"})).json()
        assert [c["server"] for c in listed["connections"]] == ["wiki"]
        entry = listed["connections"][0]
        assert entry["connected_at"] <= time.time() < entry["expires_at"] and set(entry) == {
            "server", "connected_at", "expires_at"}
        as_bob = {"Authorization": f"Bearer {bob}"}
        assert (await http.get("/connections", headers=as_bob)).json() == {"connections": []}
        assert (await http.delete("/connections/wiki", headers=as_bob)).status_code == 404
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            refused = await http.get("/connections", headers=headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
        as_alice = {"Authorization": f"Bearer {alice}"}
        removed = await http.delete("/connections/wiki", headers=as_alice)
        assert (removed.status_code, removed.json()) == (200, {"removed": "wiki"})
        assert (await http.delete("/connections/wiki", headers=as_alice)).status_code == 404
        assert (await http.delete("/connections/nope", headers=as_alice)).status_code == 404
        assert (await http.get("/connections", headers=as_alice)).json() == {"connections": []}
        assert await accounts.load(await caller_for(alice)) is None  # gone from the vault too
