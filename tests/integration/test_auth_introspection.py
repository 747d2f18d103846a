"""Opaque access tokens against a real OIDC provider's RFC 7662 introspection endpoint (authlib client,
client_secret_basic): active tokens, revocation (immediate without a cache, within the cache TTL with
one), bad client credentials, and an endpoint that is down or hung failing closed.

Interop, each marked, with why: the real provider's introspection is the component under test (its
answers, its revocation, its client authentication). An endpoint that is down (a free port) or hung
(a port that accepts and never answers) needs no provider: those two run in-process, the issuer
only a name.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_preconditions import Credentials, Guard, Identity, Status
from mcp_preconditions.auth import build_authenticator
from mcp_preconditions.policy.load import PolicySource
from tests.fixtures.oidc import AUDIENCE, OPAQUE, OidcServer, policy_with
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration
PROMPT = 5.0  # generous bound on a fail-closed answer whose own timeout is far shorter
REQS = ["auth:oauth2", "auth:claim:role:mission_control", "auth:claim:roles:engineer",
        "auth:claim:tenant:acme", "auth:scope:mission:read"]


@pytest.fixture(autouse=True)
def introspection_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_INTROSPECTION_ID", "introspector")
    monkeypatch.setenv("TEST_INTROSPECTION_SECRET", "introspector-secret")


def opaque_policy(server: OidcServer | None, endpoint: str | None = None, **auth: Any
                  ) -> PolicySource:
    """Opaque tokens introspected at `server`'s endpoint (or `endpoint`); no server: the issuer is
    only a name."""
    issuer = server.issuer if server is not None else "https://issuer.test"
    endpoint = endpoint or (server.introspection_endpoint if server is not None else None)
    assert endpoint is not None
    settings: dict[str, Any] = {
        "issuer": issuer, "audience": AUDIENCE,
        "introspection": {"endpoint": endpoint,
                          "client_id_env": "TEST_INTROSPECTION_ID",
                          "client_secret_env": "TEST_INTROSPECTION_SECRET", "timeout_seconds": 0.5}}
    return policy_with({**settings, **auth})


async def identify(source: PolicySource, token: str) -> Identity:
    authenticator = build_authenticator(source)
    return await asyncio.wait_for(authenticator.authenticate(Credentials(token=token)), PROMPT)


@pytest.mark.interop
async def test_an_active_opaque_token_satisfies_oauth2_claims_and_scopes(oidc_server: OidcServer) -> None:
    token = oidc_server.token(resource=OPAQUE)
    assert token.count(".") == 0
    guard = Guard(opaque_policy(oidc_server), {"t": REQS}, entry_points=False)
    decision = await guard.check("t", Credentials(token=token))
    assert decision.allowed is True
    assert [o.reason for o in decision.outcomes] == [
        "access token verified (opaque)", "claim 'role' has 'mission_control'",
        "claim 'roles' has 'engineer'", "claim 'tenant' has 'acme'", "token has scope 'mission:read'"]
    assert decision.subject is None  # its introspection answer names no `sub`: no subject (SPEC §14)


@pytest.mark.interop
async def test_a_revoked_token_is_not_active(oidc_server: OidcServer) -> None:
    token = oidc_server.token(resource=OPAQUE)
    uncached = build_authenticator(opaque_policy(oidc_server, cache_ttl_seconds=0))
    cached = build_authenticator(opaque_policy(oidc_server, cache_ttl_seconds=300))
    for authenticator in (uncached, cached):
        assert (await authenticator.authenticate(Credentials(token=token))).principal is not None
    oidc_server.revoke(token)
    assert await uncached.authenticate(Credentials(token=token)) == Identity(failure="token is not active")
    # The documented window: a cached verification stands until cache_ttl_seconds have passed.
    assert (await cached.authenticate(Credentials(token=token))).principal is not None
    guard = Guard(opaque_policy(oidc_server), {"t": REQS}, entry_points=False)
    denied = await guard.check("t", Credentials(token=token))
    assert denied.allowed is False
    assert {(o.status, o.reason) for o in denied.outcomes} == {(Status.UNSATISFIED, "token is not active")}


@pytest.mark.interop
async def test_a_token_for_another_audience_is_refused(oidc_server: OidcServer) -> None:
    token = oidc_server.token(resource=OPAQUE)
    identity = await identify(opaque_policy(oidc_server, audience="urn:mcp:billing"), token)
    assert identity == Identity(failure="audience 'urn:mcp:mission-server' is not 'urn:mcp:billing'")


@pytest.mark.interop
async def test_wrong_client_credentials_are_a_backend_error(oidc_server: OidcServer,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_INTROSPECTION_SECRET", "wrong")
    identity = await identify(opaque_policy(oidc_server), oidc_server.token(resource=OPAQUE))
    assert identity == Identity(
        failure=f"introspection endpoint {oidc_server.introspection_endpoint} answered HTTP 401",
        error=True)


async def test_an_endpoint_that_is_down_fails_closed_promptly() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}/token/introspection"
    guard = Guard(opaque_policy(None, endpoint), {"t": ["auth:oauth2"]}, entry_points=False)
    decision = await asyncio.wait_for(guard.check("t", Credentials(token="some-opaque-token")), PROMPT)
    assert decision.allowed is False
    assert decision.outcomes[0].status is Status.ERROR
    assert decision.outcomes[0].reason == (
        f"introspection endpoint {endpoint} unreachable: connection failed (All connection attempts failed)")


async def test_a_hung_endpoint_fails_closed_at_its_timeout(silent_port: int) -> None:
    endpoint = f"http://127.0.0.1:{silent_port}/token/introspection"
    identity = await identify(opaque_policy(None, endpoint), "some-opaque-token")
    assert identity == Identity(failure=f"introspection endpoint {endpoint} did not answer within 0.5 s",
                                error=True)


@pytest.mark.interop
async def test_jwts_and_opaque_tokens_under_one_policy(oidc_server: OidcServer) -> None:
    source = opaque_policy(oidc_server, jwks_uri=oidc_server.jwks_uri)
    authenticator = build_authenticator(source)
    jwt_identity = await authenticator.authenticate(Credentials(token=oidc_server.token()))
    opaque = await authenticator.authenticate(Credentials(token=oidc_server.token(resource=OPAQUE)))
    assert jwt_identity.principal is not None and jwt_identity.principal.kind == "jwt"
    assert opaque.principal is not None and opaque.principal.kind == "opaque"
