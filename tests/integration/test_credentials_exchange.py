"""Token exchange against the real oidc-provider (its RFC 8693 grant, tests/oidc/server.mjs) and real
MCP servers that verify their own tokens with the SDK's auth (tests/fixtures/token_servers.py):
each caller reaches a server as themselves, with a token of that server's audience; one exchange
per caller across many and concurrent calls; an invalid or expired subject token is refused
(`unsatisfied`), an authorization server that is down or hangs is `error`; a credential the server
refuses (401 with WWW-Authenticate) is renewed once. No token or secret in any log line.

Interop, each marked, with why: the real provider's token exchange grant and the servers verifying
its tokens are the components under test (its answers, refusals and client authentication). An
authorization server that is down or hangs needs neither: that test runs in-process, the caller
known by claims alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.auth.build import build_authenticator
from mcp_preconditions.credentials import Client as OAuthClient
from mcp_preconditions.credentials import (
    Credential,
    CredentialResolver,
    ExchangeCache,
    TokenExchange,
    TokenExchangeSettings,
)
from mcp_preconditions.principal import Credentials, Identity, Principal
from tests.fixtures.oidc import (
    AUDIENCE,
    CRM_AUDIENCE,
    SHORT,
    WIKI,
    WIKI_AUDIENCE,
    OidcServer,
    SigningKey,
    access_claims,
    policy_with,
)
from tests.fixtures.token_servers import TokenServer, token_server

pytestmark = pytest.mark.integration
REQ = "credential:crm"


@pytest.fixture(scope="module")
def crm(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path_factory.mktemp("crm")) as server:
        yield server


def exchange(oidc: OidcServer | None, *, cache: ExchangeCache | None = None, **overrides: Any
             ) -> CredentialResolver:
    """The exchange at `oidc`'s token endpoint (None: `token_endpoint` is given)."""
    assert oidc is not None or "token_endpoint" in overrides
    values: dict[str, Any] = {"token_endpoint": f"{oidc.issuer}/token" if oidc else None,
                              "client": OAuthClient("gateway", "gateway-secret"),
                              "audience": CRM_AUDIENCE, "scope": ("crm:read",)}
    values.update(overrides)
    source = TokenExchange("crm", TokenExchangeSettings(**values),
                           cache if cache is not None else ExchangeCache())
    return CredentialResolver({"crm": source})


async def verified(oidc: OidcServer, token: str) -> Identity:
    """The caller as the gateway knows them: their token verified by the policy's [auth]."""
    authenticator = build_authenticator(policy_with(
        {"issuer": oidc.issuer, "audience": AUDIENCE, "jwks_uri": oidc.jwks_uri}))
    identity = await authenticator.authenticate(Credentials(token=token))
    assert identity.principal is not None, identity.failure
    return identity


async def whoami(url: str, credential: Credential | None) -> str:
    headers = credential.headers() if credential is not None else {}
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
            headers=headers, timeout=10))) as client:
        result = await client.call_tool("whoami", {})
    assert not result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


def refused_by(url: str, credential: Credential | None) -> httpx2.Response:
    """What the server answers a request carrying `credential` (401 when it refuses the token)."""
    headers = {"Accept": "application/json, text/event-stream",
               **(credential.headers() if credential is not None else {})}
    return httpx2.post(url, headers=headers, timeout=10, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}})


@pytest.mark.interop
async def test_each_caller_reaches_the_server_as_themselves(oidc_server: OidcServer, crm: TokenServer,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    resolver = exchange(oidc_server)
    tokens = {who: oidc_server.user_token(who) for who in ("alice", "bob")}
    before = len(crm.calls())
    shown = []
    for who, token in tokens.items():
        obtained = await resolver.obtain(REQ, await verified(oidc_server, token), token)
        assert obtained.result == "obtained" and obtained.credential is not None
        header = obtained.credential.headers()["Authorization"]
        assert header != f"Bearer {token}"  # never the caller's own token
        claims = jwt.decode(header.removeprefix("Bearer "), options={"verify_signature": False})
        assert (claims["sub"], claims["aud"], claims["client_id"], claims["scope"]) == (
            who, CRM_AUDIENCE, "gateway", "crm:read")
        assert await whoami(crm.url, obtained.credential) == who
        shown += [header, token]
    assert [(c["subject"], c["audience"], c["client_id"]) for c in crm.calls()[before:]] == [
        ("alice", CRM_AUDIENCE, "gateway"), ("bob", CRM_AUDIENCE, "gateway")]
    assert all(secret.split()[-1] not in caplog.text for secret in shown)


@pytest.mark.interop
async def test_a_server_accepts_only_tokens_of_its_own_audience(oidc_server: OidcServer, crm: TokenServer,
                                                                wiki: TokenServer) -> None:
    token = oidc_server.user_token("alice")
    refused = refused_by(crm.url, Credential.bearer(token, "test"))  # the caller's own token
    assert refused.status_code == 401 and "www-authenticate" in refused.headers
    obtained = await exchange(oidc_server).obtain(REQ, await verified(oidc_server, token), token)
    assert refused_by(wiki.url, obtained.credential).status_code == 401  # crm's token at the wiki
    assert refused_by(crm.url, obtained.credential).status_code == 200


@pytest.mark.interop
async def test_one_exchange_per_caller_across_many_and_concurrent_calls(oidc_server: OidcServer) -> None:
    resolver = exchange(oidc_server)
    callers = {}
    for who in ("alice", "bob"):
        token = oidc_server.user_token(who)
        callers[who] = (await verified(oidc_server, token), token)
    burst = await asyncio.gather(*(resolver.obtain(REQ, identity, token)
                                   for identity, token in list(callers.values()) * 25))
    later = [await resolver.obtain(REQ, identity, token) for identity, token in callers.values()]
    results = [o.result for o in burst + later]
    assert results.count("obtained") == 2 and results.count("cached") == 50
    assert len({id(o.credential) for o in burst + later}) == 2


@pytest.mark.interop
async def test_client_secret_post_and_a_resource_indicator(oidc_server: OidcServer, wiki: TokenServer
                                                           ) -> None:
    token = oidc_server.user_token("carol")
    resolver = exchange(oidc_server, client=OAuthClient("gateway-post", "gateway-post-secret",
                                                        "client_secret_post"),
                        audience=None, resource=WIKI, scope=())
    obtained = await resolver.obtain(REQ, await verified(oidc_server, token), token)
    assert await whoami(wiki.url, obtained.credential) == "carol"


@pytest.mark.interop
async def test_an_invalid_subject_token_is_unsatisfied(oidc_server: OidcServer) -> None:
    forged = SigningKey().sign(access_claims(oidc_server.issuer, sub="mallory"))  # not the issuer's key
    identity = Identity(Principal.from_claims(access_claims(oidc_server.issuer, sub="mallory")))
    obtained = await exchange(oidc_server).obtain(REQ, identity, forged)
    assert (obtained.result, obtained.outcome.reason) == (
        "refused", "the authorization server refused: invalid_grant")


@pytest.mark.interop
async def test_an_expired_subject_token_is_unsatisfied(oidc_server: OidcServer) -> None:
    token = oidc_server.user_token("alice", resource=SHORT)
    claims = jwt.decode(token, options={"verify_signature": False})
    while time.time() < claims["exp"] + 1:  # it lives one second
        await asyncio.sleep(0.2)  # not an event: the real provider's clock passes the expiry
    obtained = await exchange(oidc_server).obtain(REQ, Identity(Principal.from_claims(claims)), token)
    assert (obtained.result, obtained.outcome.reason) == (
        "refused", "the authorization server refused: invalid_grant")


@pytest.mark.interop
async def test_an_unknown_target_is_unsatisfied(oidc_server: OidcServer) -> None:
    token = oidc_server.user_token("alice")
    obtained = await exchange(oidc_server, audience="urn:mcp:nowhere").obtain(
        REQ, await verified(oidc_server, token), token)
    assert (obtained.result, obtained.outcome.reason) == (
        "refused", "the authorization server refused: invalid_target")


@pytest.mark.interop
async def test_a_wrong_client_secret_is_an_error_not_the_callers_fault(oidc_server: OidcServer) -> None:
    token = oidc_server.user_token("alice")
    obtained = await exchange(oidc_server, client=OAuthClient("gateway", "wrong")).obtain(
        REQ, await verified(oidc_server, token), token)
    assert (obtained.result, obtained.outcome.reason) == (
        "error", f"token endpoint {oidc_server.issuer}/token answered HTTP 401 (invalid_client)")


async def test_an_authorization_server_that_is_down_or_hangs_is_an_error(silent_port: int) -> None:
    from tests.fixtures.ports import free_port

    claims = access_claims("https://issuer.test", sub="alice")
    token, identity = SigningKey().sign(claims), Identity(Principal.from_claims(claims))
    down = f"http://127.0.0.1:{free_port()}/token"
    obtained = await exchange(None, token_endpoint=down).obtain(REQ, identity, token)
    assert obtained.result == "error" and obtained.outcome.reason.startswith(f"cannot reach {down}")
    hung = f"http://127.0.0.1:{silent_port}/token"
    obtained = await exchange(None, token_endpoint=hung, timeout_seconds=0.5).obtain(
        REQ, identity, token)
    assert (obtained.result, obtained.outcome.reason) == ("error", f"{hung} did not answer within 0.5 s")


@pytest.mark.interop
async def test_a_refused_credential_is_renewed_once(oidc_server: OidcServer, crm: TokenServer) -> None:
    from mcp_preconditions.auth.cache import token_key

    token = oidc_server.user_token("alice")
    identity = await verified(oidc_server, token)
    wrong = await exchange(oidc_server, audience=WIKI_AUDIENCE).obtain(REQ, identity, token)
    assert wrong.credential is not None
    cache = ExchangeCache()  # a cached credential the server no longer accepts
    cache.put((token_key(token), "crm"), wrong.credential, time.time() + 300)
    resolver = exchange(oidc_server, cache=cache)
    stale = (await resolver.obtain(REQ, identity, token)).credential
    assert stale is wrong.credential
    refused = refused_by(crm.url, stale)
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    renewed = await resolver.renew(REQ, identity, token, stale)
    assert renewed.result == "obtained" and await whoami(crm.url, renewed.credential) == "alice"
    assert (await resolver.obtain(REQ, identity, token)).credential is renewed.credential


