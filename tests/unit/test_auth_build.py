"""`build_authenticator`: which authenticator a policy's `[auth]` asks for, and the exact start-up
errors for settings that cannot verify anything (listed by key path, like every policy problem).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import Credentials, PolicyError, load_policy, parse_policy
from mcp_preconditions.auth import PassThroughAuthenticator, TokenAuthenticator, build_authenticator
from mcp_preconditions.policy.load import PolicySource
from tests.fixtures.oidc import AUDIENCE, SigningKey, access_claims, policy_with

RSA = SigningKey("RSA", "r")
EC = SigningKey("EC", "e")
ISSUER = "https://issuer.test"


def problems(auth: dict[str, Any], source: PolicySource | None = None) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        build_authenticator(source or policy_with(auth))
    assert str(caught.value).startswith("test-policy.toml: invalid policy")
    return caught.value.problems


def test_claim_rules_alone_need_no_verifier() -> None:
    source = parse_policy(b'[auth]\nclaim_aliases = { r = ["realm_access", "roles"] }\n', "p.toml")
    assert isinstance(build_authenticator(source), PassThroughAuthenticator)
    assert isinstance(build_authenticator(parse_policy(b"", "p.toml")), PassThroughAuthenticator)


@pytest.mark.parametrize("auth", [
    {"issuer": ISSUER, "audience": AUDIENCE, "jwks_uri": "https://issuer.test/jwks"},
    {"issuer": ISSUER, "audience": AUDIENCE, "discovery": True},
    {"issuer": ISSUER, "audience": AUDIENCE, "keys": [RSA.public_jwk()]},
    {"audience": AUDIENCE, "introspection": {"endpoint": "https://issuer.test/introspect",
                                             "client_id_env": "A", "client_secret_env": "B"}},
])
def test_verification_settings_give_a_token_authenticator(auth: dict[str, Any]) -> None:
    assert isinstance(build_authenticator(policy_with(auth)), TokenAuthenticator)


def test_jwt_verification_needs_issuer_and_audience() -> None:
    assert problems({"jwks_uri": "https://issuer.test/jwks"}) == [
        "auth.issuer: required to verify JWT access tokens (their 'iss' must match)",
        "auth.audience: required to verify JWT access tokens (their 'aud' must name this server)"]


def test_an_issuer_alone_verifies_nothing() -> None:
    assert problems({"issuer": ISSUER, "audience": AUDIENCE}) == [
        "auth: issuer is set but nothing verifies tokens: set jwks_uri, discovery = true, keys or "
        "public_keys_pem, or [auth.introspection]"]


def test_inconsistent_key_sources_and_urls() -> None:
    assert problems({"issuer": "auth.example.com", "audience": AUDIENCE, "discovery": True,
                     "jwks_uri": "ftp://issuer.test/jwks"}) == [
        "auth.discovery: set either jwks_uri or discovery = true, not both",
        "auth.jwks_uri: must be an http(s) URL, not 'ftp://issuer.test/jwks'",
        "auth.issuer: must be an http(s) URL, not 'auth.example.com'"]


def test_hmac_algorithms_are_refused() -> None:
    assert problems({"issuer": ISSUER, "audience": AUDIENCE, "jwks_uri": "https://i.test/jwks",
                     "algorithms": ["HS256"]}) == [
        "auth.algorithms: HS256 need(s) a shared secret, which a policy file must not hold; use "
        "asymmetric algorithms"]


def test_static_keys_must_be_public_usable_and_fit_an_allowed_algorithm() -> None:
    private = {**RSA.public_jwk(), "d": "AQAB"}
    assert problems({"issuer": ISSUER, "audience": AUDIENCE, "algorithms": ["RS256"], "keys": [
        {"kty": "oct", "k": "c2VjcmV0"}, private, {"kty": "RSA", "n": "x"}, EC.public_jwk(),
        RSA.public_jwk()]}) == [
        "auth.keys[0]: a secret or private key must not sit in a policy file; give the public key",
        "auth.keys[1]: a secret or private key must not sit in a policy file; give the public key",
        "auth.keys[2]: unusable JWK: Not a public or private key",
        "auth.keys[3]: this EC key cannot verify any allowed algorithm (RS256)"]


def test_pem_keys_inline_or_from_a_file_next_to_the_policy(tmp_path: Path) -> None:
    (tmp_path / "issuer.pem").write_text(EC.public_pem())
    (tmp_path / "garbage.pem").write_text("not a key\n")
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n'
                      'public_keys_pem = ["issuer.pem", "missing.pem", "-----BEGIN PUBLIC KEY-----\\nx", '
                      '"garbage.pem"]\n')
    source = load_policy(policy)
    with pytest.raises(PolicyError) as caught:
        build_authenticator(source)
    found = caught.value.problems
    assert found[0] == (
        f"auth.public_keys_pem[1]: 'missing.pem' ({tmp_path / 'missing.pem'}) is neither PEM text "
        f"('-----BEGIN PUBLIC KEY-----') nor a readable file (cannot read: No such file or directory)")
    assert found[1].startswith("auth.public_keys_pem[2]: not a PEM public key (")
    assert found[2].startswith(f"auth.public_keys_pem[3]: 'garbage.pem' ({tmp_path / 'garbage.pem'}): "
                               f"not a PEM public key (")
    assert len(found) == 3


async def test_one_pem_path_relative_to_the_policy_verifies_tokens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`public_keys_pem = "pub.pem"` (docs/auth.md: PEM text, or a path): one string, a file next
    to the policy, read whatever the working directory."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "pub.pem").write_text(EC.public_pem())
    policy = tmp_path / "conf" / "policy.toml"
    policy.write_text(f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\nalgorithms = ["ES256"]\n'
                      'public_keys_pem = "pub.pem"\n')
    monkeypatch.chdir(tmp_path)
    authenticator = build_authenticator(load_policy(policy))
    token = EC.sign(access_claims(ISSUER, sub="alice"))
    identity = await authenticator.authenticate(Credentials(token=token))
    assert identity.subject == "alice", identity.failure
    forged = await authenticator.authenticate(Credentials(token=RSA.sign(access_claims(ISSUER))))
    assert forged.principal is None


def test_one_unreadable_pem_path_is_a_load_error_naming_the_key(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n'
                      'public_keys_pem = "pub.pem"\n')
    with pytest.raises(PolicyError) as caught:
        build_authenticator(load_policy(policy))
    assert caught.value.problems == [
        f"auth.public_keys_pem: 'pub.pem' ({tmp_path / 'pub.pem'}) is neither PEM text "
        f"('-----BEGIN PUBLIC KEY-----') nor a readable file (cannot read: No such file or directory)"]


async def test_missing_introspection_credentials_warn_at_start_and_fail_closed_on_use(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_INTROSPECT_ID", raising=False)
    monkeypatch.delenv("TEST_INTROSPECT_SECRET", raising=False)
    auth = {"audience": AUDIENCE, "introspection": {"endpoint": "http://127.0.0.1:9/introspect",
                              "client_id_env": "TEST_INTROSPECT_ID",
                              "client_secret_env": "TEST_INTROSPECT_SECRET"}}
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions.auth"):
        authenticator = build_authenticator(policy_with(auth))
    assert caplog.messages == [
        "test-policy.toml: auth.introspection: environment variable(s) TEST_INTROSPECT_ID, "
        "TEST_INTROSPECT_SECRET not set; opaque tokens will be refused"]
    identity = await authenticator.authenticate(Credentials(token="opaque"))
    assert identity.error is True
    assert identity.failure == (
        "token introspection is not configured: environment variable(s) TEST_INTROSPECT_ID, "
        "TEST_INTROSPECT_SECRET not set (auth.introspection)")
