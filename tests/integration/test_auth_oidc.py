"""JWT access tokens against a real OIDC provider (npm oidc-provider on 127.0.0.1): RS256 and ES256
tokens it issues, the shipped mission-control-oidc policy end to end, key rotation by restarting it,
and every way a token or the JWKS can be bad. Each case asserts the outcome and the reason.

The bad tokens and the failing JWKS run in-process: an issuer that is only a name, its keys served
as a JWKS by a small HTTP server of this process (`jwks_served`), the tokens signed here. Interop,
each marked, with why: the real provider's own tokens and keys (issued RS256 and ES256 tokens, the
shipped policy, a bearer header, key rotation by restarting it, OIDC discovery of its metadata).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from mcp_preconditions import Credentials, Guard, Identity, Principal, Status, parse_policy
from mcp_preconditions.auth import build_authenticator, credentials_from_authorization_header
from mcp_preconditions.policy.load import PolicySource
from tests.fixtures.oidc import (
    AUDIENCE,
    ES256,
    RS256,
    OidcServer,
    SigningKey,
    access_claims,
    policy_with,
)
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration
SHIPPED = Path(__file__).resolve().parents[2] / "policies" / "mission-control-oidc.toml"
FORGER = SigningKey("RSA", "test-forger")  # a key the policy trusts statically, for forged claims
PROMPT = 5.0  # generous bound on a fail-closed answer whose own timeout is far shorter
ISSUER = "https://issuer.test"  # the in-process tests' issuer: only a name
SERVED = SigningKey("RSA", "served-rsa")  # the in-process tests' issuer's key, in its JWKS


def shipped_policy(server: OidcServer) -> PolicySource:
    """policies/mission-control-oidc.toml pointed at the test server instead of auth.example.com."""
    text = SHIPPED.read_text().replace("https://auth.example.com", server.issuer)
    return parse_policy(text.encode(), str(SHIPPED), SHIPPED.parent)


def auth_settings(server: OidcServer, **overrides: Any) -> dict[str, Any]:
    return {"issuer": server.issuer, "audience": AUDIENCE, "jwks_uri": server.jwks_uri,
            "require_typ": "at+jwt", **overrides}


def local_settings(jwks_uri: str | None, **overrides: Any) -> dict[str, Any]:
    """`auth_settings` for `ISSUER`, as the shipped policy has them (RS256 and ES256)."""
    return {"issuer": ISSUER, "audience": AUDIENCE, "jwks_uri": jwks_uri, "require_typ": "at+jwt",
            "algorithms": ["RS256", "ES256"], **overrides}


@contextmanager
def jwks_served(*keys: SigningKey) -> Iterator[str]:
    """`keys`' public JWKS served on 127.0.0.1 until the block ends: its URI."""
    document = json.dumps({"keys": [k.public_jwk() for k in keys]}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks"
    finally:
        server.shutdown()
        server.server_close()


async def identify(source: PolicySource, token: str) -> Identity:
    return await asyncio.wait_for(build_authenticator(source).authenticate(Credentials(token=token)),
                                  PROMPT)


async def refused(source: PolicySource, token: str) -> str:
    identity = await identify(source, token)
    assert identity.principal is None and identity.error is False
    assert identity.failure is not None and token not in identity.failure
    return identity.failure


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.interop
# -- tokens the server issues ---------------------------------------------------------------------
@pytest.mark.parametrize("resource", [RS256, ES256], ids=["RS256", "ES256"])
async def test_issued_tokens_satisfy_oauth2_claims_and_scopes(oidc_server: OidcServer,
                                                              resource: str) -> None:
    reqs = ["auth:oauth2", "auth:claim:role:mission_control", "auth:claim:roles:engineer",
            "auth:claim:tenant:acme", "auth:claim:realm_roles:engineer", "auth:scope:mission:write",
            "auth:scope:mission:read"]
    token = oidc_server.token(resource=resource)
    assert jwt.get_unverified_header(token)["alg"] == resource.rsplit("/", 1)[1].upper()
    guard = Guard(shipped_policy(oidc_server), {"t": reqs}, entry_points=False)
    decision = await guard.check("t", Credentials(token=token))
    assert decision.allowed is True
    assert [o.reason for o in decision.outcomes] == [
        "access token verified (jwt)", "claim 'role' has 'mission_control'",
        "claim 'roles' has 'engineer'", "claim 'tenant' has 'acme'",
        "claim 'realm_roles (alias of realm_access.roles)' has 'engineer'",
        "token has scope 'mission:write'", "token has scope 'mission:read'"]
    assert decision.subject == "mission-control"


@pytest.mark.interop
async def test_the_shipped_policy_end_to_end(oidc_server: OidcServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    guard = Guard(shipped_policy(oidc_server), entry_points=False)
    controller = Credentials(token=oidc_server.token())
    observer = Credentials(token=oidc_server.token("observer", scope="mission:read"))
    assert (await guard.check("launch_rocket", controller)).allowed is True
    assert (await guard.check("abort_launch", controller)).allowed is True
    denied = await guard.check("launch_rocket", observer)
    assert denied.allowed is False
    assert denied.unmet == ("auth:claim:role:mission_control", "capability:rocket.launch")
    assert denied.outcomes[1].reason == "claim 'role' does not have 'mission_control'"
    assert (await guard.check("read_telemetry", observer)).allowed is True
    lacking = await guard.check("abort_launch", observer)
    assert [(o.requirement, o.reason) for o in lacking.outcomes if not o.ok][-1] == (
        "auth:scope:mission:write", "token lacks scope 'mission:write'")


@pytest.mark.interop
async def test_a_bearer_header_and_an_sdk_verified_principal(oidc_server: OidcServer) -> None:
    guard = Guard(shipped_policy(oidc_server), {"t": ["auth:oauth2", "auth:claim:tenant:acme"]},
                  entry_points=False)
    header = credentials_from_authorization_header(f"Bearer {oidc_server.token()}")
    assert (await guard.check("t", header)).allowed is True
    # An SDK-verified principal is taken as is: even with an unreachable JWKS nothing is fetched.
    offline = Guard(policy_with(auth_settings(oidc_server, jwks_uri=f"http://127.0.0.1:{free_port()}/j")),
                    {"t": ["auth:oauth2", "auth:claim:tenant:acme"]}, entry_points=False)
    sdk = Principal.from_claims({"sub": "alice", "tenant": "acme"}, kind="sdk")
    decision = await offline.check("t", Credentials(principal=sdk))
    assert decision.allowed is True
    assert decision.outcomes[0].reason == "access token verified (sdk)"


# -- bad tokens -----------------------------------------------------------------------------------
async def test_wrong_audience() -> None:
    with jwks_served(SERVED) as uri:
        token = SERVED.sign(access_claims(ISSUER, aud="urn:mcp:other-server"))
        assert await refused(policy_with(local_settings(uri)), token) == (
            "audience 'urn:mcp:other-server' is not 'urn:mcp:mission-server'")


async def test_wrong_issuer() -> None:
    with jwks_served(SERVED) as uri:
        source = policy_with(local_settings(uri, issuer=f"{ISSUER}/tenant-b"))
        assert await refused(source, SERVED.sign(access_claims(ISSUER))) == (
            f"issuer '{ISSUER}' is not '{ISSUER}/tenant-b'")


async def test_expired_not_yet_valid_and_without_exp() -> None:
    source = policy_with(local_settings(None, keys=[FORGER.public_jwk()]))
    now = int(time.time())
    expired = await refused(source, FORGER.sign(access_claims(ISSUER, exp=now - 3600)))
    match = re.fullmatch(r"token expired (\d+) s ago", expired)
    assert match is not None and 3600 <= int(match.group(1)) <= 3600 + int(PROMPT)
    early = await refused(source, FORGER.sign(access_claims(ISSUER, nbf=now + 600)))
    match = re.fullmatch(r"token is not valid until (\S+) \(nbf in (\d+) s\)", early)
    assert match is not None and 600 - PROMPT <= int(match.group(2)) <= 600
    assert match.group(1) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 600))
    no_exp = FORGER.sign(access_claims(ISSUER, exp=None))
    assert await refused(source, no_exp) == "token has no 'exp' claim"
    assert (await identify(source, FORGER.sign(access_claims(ISSUER)))).principal is not None


async def test_alg_none() -> None:
    with jwks_served(SERVED) as uri:
        payload = SERVED.sign(access_claims(ISSUER)).split(".")[1]
        unsigned = f"{b64(json.dumps({'alg': 'none', 'typ': 'at+jwt'}).encode())}.{payload}."
        assert await refused(policy_with(local_settings(uri)), unsigned) == (
            "algorithm 'none' is never accepted (unsigned token)")


async def test_hs256_signed_with_the_servers_rsa_public_key() -> None:
    with jwks_served(SERVED) as uri:
        rsa_jwk = SERVED.public_jwk()
        public = jwt.PyJWK(rsa_jwk).key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        head = b64(json.dumps({"alg": "HS256", "typ": "at+jwt", "kid": rsa_jwk["kid"]}).encode())
        body = b64(json.dumps(access_claims(ISSUER)).encode())
        mac = hmac.new(public, f"{head}.{body}".encode(), hashlib.sha256).digest()
        assert await refused(policy_with(local_settings(uri)), f"{head}.{body}.{b64(mac)}") == (
            "algorithm 'HS256' is not allowed (allowed: RS256, ES256)")


async def test_a_tampered_payload() -> None:
    with jwks_served(SERVED) as uri:
        observer = access_claims(ISSUER, sub="observer", role="observer", roles=["observer"])
        header, payload, signature = SERVED.sign(observer).split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["role"] = "mission_control"
        tampered = f"{header}.{b64(json.dumps(claims).encode())}.{signature}"
        assert await refused(policy_with(local_settings(uri)), tampered) == (
            "signature verification failed")


async def test_an_unknown_key() -> None:
    stranger = SigningKey("RSA", "unknown-kid")
    with jwks_served(SERVED) as uri:
        token = stranger.sign(access_claims(ISSUER))
        assert await refused(policy_with(local_settings(uri)), token) == (
            f"signing key 'unknown-kid' not found at {uri}")


@pytest.mark.interop
async def test_a_key_rotated_by_restarting_the_server(rotating_oidc_server: OidcServer) -> None:
    server = rotating_oidc_server
    eager = build_authenticator(policy_with(auth_settings(
        server, jwks_refetch_interval_seconds=0, cache_max_entries=0)))
    limited = build_authenticator(policy_with(auth_settings(server, jwks_refetch_interval_seconds=3600)))
    old = server.token()
    for authenticator in (eager, limited):
        assert (await authenticator.authenticate(Credentials(token=old))).principal is not None
    old_kid = jwt.get_unverified_header(old)["kid"]
    server.restart()
    new = server.token()
    new_kid = jwt.get_unverified_header(new)["kid"]
    assert new_kid != old_kid
    # The rate limit holds: a JWKS fetched less than an hour ago is not refetched for a new kid.
    assert (await limited.authenticate(Credentials(token=new))).failure == (
        f"signing key '{new_kid}' not found at {server.jwks_uri}")
    assert (await eager.authenticate(Credentials(token=new))).principal is not None
    assert (await eager.authenticate(Credentials(token=old))).failure == (
        f"signing key '{old_kid}' not found at {server.jwks_uri}")


# -- the JWKS backend fails -----------------------------------------------------------------------
async def test_an_unreachable_jwks_fails_closed_promptly() -> None:
    uri = f"http://127.0.0.1:{free_port()}/jwks"
    source = policy_with(local_settings(uri))
    guard = Guard(source, {"t": ["auth:oauth2"]}, entry_points=False)
    token = SERVED.sign(access_claims(ISSUER))
    decision = await asyncio.wait_for(guard.check("t", Credentials(token=token)), PROMPT)
    assert decision.allowed is False
    assert decision.outcomes[0].status is Status.ERROR
    assert decision.outcomes[0].reason == (
        f"signing keys unavailable: cannot fetch {uri}: connection failed (All connection attempts failed)")


async def test_a_hung_jwks_fails_closed_at_the_fetch_timeout(silent_port: int) -> None:
    uri = f"http://127.0.0.1:{silent_port}/jwks"
    source = policy_with(local_settings(uri, fetch_timeout_seconds=0.3))
    identity = await identify(source, SERVED.sign(access_claims(ISSUER)))
    assert identity.error is True and identity.principal is None
    assert identity.failure == f"signing keys unavailable: {uri} did not answer within 0.3 s"


@pytest.mark.interop
async def test_discovery_checks_the_issuer_it_finds(oidc_server: OidcServer) -> None:
    found = policy_with(auth_settings(oidc_server, jwks_uri=None, discovery=True))
    assert (await identify(found, oidc_server.token())).principal is not None
    slash = f"{oidc_server.issuer}/"
    wrong = policy_with(auth_settings(oidc_server, jwks_uri=None, discovery=True, issuer=slash))
    identity = await identify(wrong, oidc_server.token())
    assert identity.error is True
    assert identity.failure == (
        f"signing keys unavailable: metadata at {oidc_server.issuer}/.well-known/openid-configuration "
        f"names issuer '{oidc_server.issuer}', not '{slash}'")
