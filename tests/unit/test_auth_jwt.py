"""JWT access-token checks (RFC 9068) over static policy keys: every rule has a case that asserts the
exact reason a user sees, and no reason ever contains the token. The real-server cases are in
tests/integration/test_auth_oidc.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest

from mcp_preconditions import Credentials, Guard, Identity, Principal
from mcp_preconditions.auth import (
    JwtVerifier,
    KeySet,
    MalformedCredentials,
    TokenAuthenticator,
    build_authenticator,
)
from mcp_preconditions.auth.build import static_keys
from mcp_preconditions.auth.jwt_verifier import base64url_decode
from mcp_preconditions.auth.verifier import NO_INTROSPECTION, NO_JWT_KEYS
from tests.fixtures.oidc import AUDIENCE, SigningKey, access_claims, policy_with

ISSUER = "https://issuer.test"
NOW = 1_800_000_000.0
RSA = SigningKey("RSA", "test-rsa")
EC = SigningKey("EC", "test-ec")
STRANGER = SigningKey("RSA", "test-rsa")  # same kid as RSA, different key
BASE: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE, "keys": [RSA.public_jwk(), EC.public_jwk()],
                        "require_typ": "at+jwt", "leeway_seconds": 30}


def authenticator(**settings: Any) -> TokenAuthenticator:
    """A verifier over the policy's static keys with a fixed clock (NOW), cache off."""
    source = policy_with({**BASE, **settings})
    problems: list[str] = []
    keys = KeySet(static_keys(source, problems))
    assert problems == []
    verifier = JwtVerifier(source.policy.auth, keys, clock=lambda: NOW)
    return TokenAuthenticator(jwt_verifier=verifier, max_token_bytes=source.policy.auth.max_token_bytes)


def claims(**overrides: Any) -> dict[str, Any]:
    return access_claims(ISSUER, **{"iat": int(NOW), "exp": int(NOW) + 600, **overrides})


async def verify(token: str, **settings: Any) -> Identity:
    return await authenticator(**settings).authenticate(Credentials(token=token))


async def failure(token: str, **settings: Any) -> str | None:
    identity = await verify(token, **settings)
    assert identity.principal is None
    assert identity.error is False
    assert identity.failure is not None and token not in identity.failure
    return identity.failure


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(signature)}"


# -- valid tokens -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [RSA, EC], ids=["RS256", "ES256"])
async def test_a_valid_token_yields_its_principal(key: SigningKey) -> None:
    identity = await verify(key.sign(claims()))
    assert identity.failure is None
    assert identity.principal is not None
    assert identity.principal.kind == "jwt"
    assert identity.principal.claims["role"] == "mission_control"
    assert identity.principal.scopes == frozenset({"mission:read", "mission:write"})
    assert identity.principal.expires_at == NOW + 600
    assert identity.subject == "mission-control"


async def test_leeway_accepts_a_token_just_expired_and_one_not_yet_valid() -> None:
    assert (await verify(RSA.sign(claims(exp=int(NOW) - 29)))).principal is not None
    assert (await verify(RSA.sign(claims(nbf=int(NOW) + 29, iat=int(NOW) + 29)))).principal is not None


async def test_audience_may_be_an_array_and_the_policy_may_accept_several() -> None:
    token = RSA.sign(claims(aud=["urn:other", AUDIENCE]))
    assert (await verify(token)).principal is not None
    token = RSA.sign(claims(aud="urn:second"))
    assert (await verify(token, audience=[AUDIENCE, "urn:second"])).principal is not None


async def test_typ_accepts_the_media_type_form() -> None:
    assert (await verify(RSA.sign(claims(), typ="application/AT+JWT"))).principal is not None
    assert (await verify(RSA.sign(claims(), typ="JWT"), require_typ=None)).principal is not None


async def test_a_token_without_kid_is_tried_against_every_fitting_key() -> None:
    assert (await verify(EC.sign(claims(), kid=None))).principal is not None


# -- claims -------------------------------------------------------------------------------------
async def test_expired() -> None:
    assert await failure(RSA.sign(claims(exp=int(NOW) - 312))) == "token expired 312 s ago"


async def test_not_yet_valid() -> None:
    token = RSA.sign(claims(nbf=int(NOW) + 70))
    assert await failure(token) == "token is not valid until 2027-01-15T08:01:10Z (nbf in 70 s)"


async def test_issued_in_the_future() -> None:
    assert await failure(RSA.sign(claims(iat=int(NOW) + 100))) == (
        "token was issued in the future (iat in 100 s)")


@pytest.mark.parametrize("name", ["exp", "iss", "aud"])
async def test_required_claims(name: str) -> None:
    assert await failure(RSA.sign(claims(**{name: None}))) == f"token has no '{name}' claim"


async def test_a_claim_that_is_not_a_number() -> None:
    assert await failure(RSA.sign(claims(exp="tomorrow"))) == "token claim 'exp' is not a number"
    assert await failure(RSA.sign(claims(nbf=True))) == "token claim 'nbf' is not a number"


async def test_wrong_issuer() -> None:
    assert await failure(RSA.sign(claims(iss="https://evil.test"))) == (
        "issuer 'https://evil.test' is not 'https://issuer.test'")


async def test_wrong_audience() -> None:
    assert await failure(RSA.sign(claims(aud="x"))) == f"audience 'x' is not '{AUDIENCE}'"
    assert await failure(RSA.sign(claims(aud=["x", "y"])), audience=["a", "b"]) == (
        "audience ['x', 'y'] is not one of 'a', 'b'")
    assert await failure(RSA.sign(claims(aud=7))) == (
        "token claim 'aud' is not a string or an array of strings")


# -- header and signature -----------------------------------------------------------------------
@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_alg_none_is_never_accepted(alg: str) -> None:
    assert await failure(forged({"alg": alg, "typ": "at+jwt"}, claims())) == (
        "algorithm 'none' is never accepted (unsigned token)")


async def test_hs256_signed_with_the_rsa_public_key_is_refused() -> None:
    header = {"alg": "HS256", "typ": "at+jwt", "kid": "test-rsa"}
    unsigned = forged(header, claims()).rsplit(".", 1)[0]
    secret = RSA.public_pem().encode()
    mac = hmac.new(secret, unsigned.encode(), hashlib.sha256).digest()
    assert await failure(f"{unsigned}.{b64(mac)}") == (
        "algorithm 'HS256' is not allowed (allowed: RS256, ES256)")


async def test_a_key_of_another_family_never_verifies() -> None:
    token = EC.sign(claims(), kid="test-rsa")
    assert await failure(token) == "signing key 'test-rsa' is declared for algorithm 'RS256', not 'ES256'"
    undeclared = {k: v for k, v in RSA.public_jwk().items() if k != "alg"}
    assert await failure(token, keys=[undeclared]) == (
        "signing key 'test-rsa' is an RSA key, not usable with algorithm 'ES256'")


async def test_algorithm_outside_the_allow_list() -> None:
    assert await failure(EC.sign(claims()), algorithms=["RS256"], keys=[RSA.public_jwk()]) == (
        "algorithm 'ES256' is not allowed (allowed: RS256)")


async def test_a_tampered_payload_fails_the_signature() -> None:
    header, _, signature = RSA.sign(claims()).split(".")
    payload = b64(json.dumps(claims(role="admin")).encode())
    assert await failure(f"{header}.{payload}.{signature}") == "signature verification failed"


async def test_a_token_signed_by_another_key_with_a_known_kid() -> None:
    assert await failure(STRANGER.sign(claims())) == "signature verification failed"


async def test_an_unknown_kid() -> None:
    assert await failure(RSA.sign(claims(), kid="k1")) == "signing key 'k1' not found in the policy's keys"


async def test_typ_is_checked_when_required() -> None:
    assert await failure(RSA.sign(claims(), typ="JWT")) == "token type (typ) is 'JWT', expected 'at+jwt'"
    assert await failure(RSA.sign(claims(), typ="")) == "token type (typ) is missing, expected 'at+jwt'"


async def test_odd_headers() -> None:
    assert await failure(RSA.sign(claims(), crit=["exp"])) == (
        "token header marks extension(s) 'exp' critical; none are supported")
    assert await failure(forged({"typ": "at+jwt"}, claims())) == "token header has no 'alg'"
    numeric_kid = forged({"alg": "RS256", "typ": "at+jwt", "kid": 3}, claims(), b"sig")
    assert await failure(numeric_kid) == "token header 'kid' is not a string"


async def test_a_malformed_signature_or_payload() -> None:
    header, payload, _ = RSA.sign(claims()).split(".")
    assert await failure(f"{header}.{payload}.!!!") == (
        "token is not a well-formed JWT (a part is not base64url)")
    not_object = jwt.PyJWS().encode(b"[1, 2]", RSA.private, algorithm="RS256",
                                    headers={"kid": "test-rsa", "typ": "at+jwt"})
    assert await failure(not_object) == "token payload is not a JSON object"
    deep = jwt.PyJWS().encode(b"[" * 5000 + b"]" * 5000, RSA.private, algorithm="RS256",
                              headers={"kid": "test-rsa", "typ": "at+jwt"})
    assert await failure(deep) == "token payload is not JSON"
    nested = b'{"a":' * 1500 + b"1" + b"}" * 1500
    deep_header = f"{b64(nested)}.{b64(b'{}')}.{b64(b'sig')}"
    assert await failure(deep_header) == NO_INTROSPECTION  # not a JWT header: an opaque token


@pytest.mark.parametrize("part", [0, 1, 2], ids=["header", "payload", "signature"])
@pytest.mark.parametrize("padding", ["=", "==", "==="])
async def test_padding_anywhere_is_not_another_spelling_of_a_valid_token(part: int, padding: str) -> None:
    token = RSA.sign(claims())
    assert (await verify(token)).principal is not None
    parts = token.split(".")
    parts[part] += padding
    expected = NO_INTROSPECTION if part == 0 else "token is not a well-formed JWT (a part is not base64url)"
    assert await failure(".".join(parts)) == expected  # a padded header is no JWT header at all


@pytest.mark.parametrize(("segment", "problem"), [
    ("YQ", None), ("YWI", None), ("YQ==", "padding"), ("YWI=", "padding"), ("Y=Q", "padding"),
    ("YR", "canonical"), ("Y+Q", "canonical"), ("Y/Q", "base64"), ("YQ\n", "base64")])
def test_base64url_decode_is_strict(segment: str, problem: str | None) -> None:
    if problem is None:
        assert base64url_decode(segment) in (b"a", b"ab")
        return
    with pytest.raises(ValueError, match=problem):
        base64url_decode(segment)


async def test_a_public_key_given_as_pem() -> None:
    pem_only = {"keys": [], "public_keys_pem": [EC.public_pem()]}
    assert (await verify(EC.sign(claims()), **pem_only)).principal is not None
    assert (await verify(EC.sign(claims(), kid=None), **pem_only)).principal is not None
    assert await failure(RSA.sign(claims()), **pem_only) == (
        "signing key 'test-rsa' is an EC key, not usable with algorithm 'RS256'")


# -- size, shape and credentials ------------------------------------------------------------------
async def test_an_oversized_token_is_refused_before_parsing() -> None:
    assert await failure(RSA.sign(claims()), max_token_bytes=100) == "token is larger than 100 bytes"


async def test_a_token_that_is_not_a_jwt_needs_introspection() -> None:
    assert await failure("abc.def.ghi") == NO_INTROSPECTION
    assert await failure("opaque-token-value") == NO_INTROSPECTION


async def test_a_jwt_when_only_introspection_is_configured() -> None:
    auth = TokenAuthenticator()
    identity = await auth.authenticate(Credentials(token=RSA.sign(claims())))
    assert identity == Identity(failure=NO_JWT_KEYS)


async def test_verified_principals_malformed_headers_and_anonymous_calls() -> None:
    auth = authenticator()
    principal = Principal.from_claims({"sub": "sdk-user"}, kind="sdk")
    assert await auth.authenticate(Credentials(principal=principal)) == Identity(principal=principal)
    assert (await auth.authenticate(MalformedCredentials())).failure == (
        "malformed Authorization header (expected 'Bearer <token>')")
    assert await auth.authenticate(Credentials()) == Identity(failure="no access token")


# -- through the guard ----------------------------------------------------------------------------
async def test_the_guard_denies_with_the_reason() -> None:
    guard = Guard(policy_with(BASE), {"t": ["auth:oauth2", "auth:claim:role:mission_control"]},
                  authenticator=authenticator(leeway_seconds=0), entry_points=False)
    ok = await guard.check("t", Credentials(token=RSA.sign(claims())))
    assert ok.allowed is True
    denied = await guard.check("t", Credentials(token=RSA.sign(claims(exp=int(NOW) - 3600))))
    assert denied.allowed is False
    assert [(o.requirement, o.reason) for o in denied.outcomes if not o.ok] == [
        ("auth:oauth2", "token expired 3600 s ago"),
        ("auth:claim:role:mission_control", "token expired 3600 s ago")]


def test_build_authenticator_returns_the_token_verifier() -> None:
    assert isinstance(build_authenticator(policy_with(BASE)), TokenAuthenticator)
