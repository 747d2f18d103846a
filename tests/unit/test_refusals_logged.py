"""Why a token, an exchange, a refresh, a connection or a per-subject secret was refused is logged at
WARNING with its reason, never the token or a secret (SPEC §15, issue 40.6). Before, every refused
token was logged at DEBUG (a backend failure at INFO) and exchange and refresh refusals at INFO,
below the gateway's level: the operator saw only "unmet: credential:crm" or a bare 401. A real
gateway's stderr (and `--log-level`) is tests/integration/test_gateway_refusals_logged.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions import Credentials
from mcp_preconditions.auth import Introspector, PassThroughAuthenticator, TokenAuthenticator
from mcp_preconditions.auth.header import credentials_from_authorization_header
from mcp_preconditions.credentials import Caller, MemoryVault, PerSubjectSettings, SubjectSecrets
from mcp_preconditions.credentials.accounts import ConnectedAccounts, Connection
from mcp_preconditions.credentials.resolver import CredentialResolver
from mcp_preconditions.policy.model import Introspection
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock, caller
from tests.unit.test_auth_jwt import EC, RSA, STRANGER, authenticator, claims
from tests.unit.test_credentials_accounts import oauth_settings
from tests.unit.test_credentials_exchange import resolver as exchange_resolver

REQ = "credential:crm"


def warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.name, r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(("token", "reason"), [
    (STRANGER.sign(claims()), "signature verification failed"),
    (RSA.sign(claims(exp=1_700_000_000)), "token expired 100000000 s ago"),
    (EC.sign(claims(aud="urn:elsewhere")), "audience 'urn:elsewhere' is not 'urn:mcp:mission-server'"),
    (RSA.sign(claims(iss="https://evil.test")), "issuer 'https://evil.test' is not 'https://issuer.test'"),
    ("x" * 20_000, "token is larger than 16384 bytes"),
    ("an-opaque-token", "token is not a JWT, and the policy configures no introspection endpoint "
                        "(auth.introspection)"),
])
async def test_a_refused_token_is_a_warning_with_its_reason(
        caplog: pytest.LogCaptureFixture, token: str, reason: str) -> None:
    identity = await authenticator().authenticate(Credentials(token=token))
    assert identity.failure == reason
    assert warnings(caplog) == [("mcp_preconditions.auth", f"bearer token refused: {reason}")]
    assert token not in caplog.text


async def test_a_malformed_header_and_an_unverifiable_token_are_warnings_too(
        caplog: pytest.LogCaptureFixture) -> None:
    await authenticator().authenticate(credentials_from_authorization_header("Basic c2VjcmV0"))
    await PassThroughAuthenticator().authenticate(Credentials(token="some-token"))
    assert warnings(caplog) == [
        ("mcp_preconditions.auth", "bearer token refused: malformed Authorization header (expected "
                                   "'Bearer <token>')"),
        ("mcp_preconditions.auth", "bearer token refused: a bearer token was presented but the policy "
                                   "configures no token verification ([auth] issuer and keys)")]
    assert "c2VjcmV0" not in caplog.text and "some-token" not in caplog.text


class Inactive(Introspector):
    """The authorization server's answer for a revoked token, or for one it cannot introspect."""

    def __init__(self, answer: Any) -> None:
        super().__init__(Introspection(endpoint="https://issuer.test/introspect",
                                       client_id_env="I", client_secret_env="S"),
                         environ={"I": "i", "S": "s"})
        self.answer = answer

    async def _ask(self, token: str, client_id: str, client_secret: str) -> Any:
        return self.answer


@pytest.mark.parametrize(("answer", "line"), [
    ({"active": False}, "bearer token refused: token is not active"),
    ("garbage", "bearer token not verified (a backend failed): introspection endpoint "
                "https://issuer.test/introspect did not return an object"),
])
async def test_introspection_refusals_are_warnings(caplog: pytest.LogCaptureFixture, answer: Any,
                                                   line: str) -> None:
    verifier = TokenAuthenticator(introspector=Inactive(answer))
    assert (await verifier.authenticate(Credentials(token="opaque-secret-token"))).principal is None
    assert warnings(caplog) == [("mcp_preconditions.auth", line)]
    assert "opaque-secret-token" not in caplog.text


async def test_a_valid_token_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert (await authenticator().authenticate(Credentials(token=RSA.sign(claims())))).principal
    assert warnings(caplog) == []


# -- credentials ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "body", "line"), [
    (400, {"error": "invalid_grant"}, "credential for server crm (token-exchange) refused for caller "
                                      "'alice': the authorization server refused: invalid_grant"),
    (503, {}, "credential for server crm (token-exchange) failed for caller 'alice': token endpoint "
              "https://idp.test/token answered HTTP 503"),
])
async def test_a_refused_or_failed_exchange_is_a_warning(caplog: pytest.LogCaptureFixture,
                                                         status: int, body: Any, line: str) -> None:
    server = AuthServer(lambda form: (status, body))
    obtained = await exchange_resolver(server, Clock()).obtain(REQ, caller(), "callers-own-token")
    assert obtained.credential is None
    assert warnings(caplog) == [("mcp_preconditions.credentials", line)]
    assert "callers-own-token" not in caplog.text and "gw-secret-value" not in caplog.text


async def test_a_refused_refresh_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    server = AuthServer(lambda form: (400, {"error": "invalid_grant"}))
    accounts = ConnectedAccounts("gh", oauth_settings(), MemoryVault(), clock=clock,
                                 transport=server.transport())
    await accounts.save(Caller(ISSUER, "alice"), Connection("old-token", "the-refresh-token", 0.0,
                                                            clock.now + 10))
    obtained = await CredentialResolver({"gh": accounts}).obtain("credential:gh", caller(), None)
    assert obtained.result == "refused"
    assert warnings(caplog) == [("mcp_preconditions.credentials", (
        "credential for server gh (oauth) refused for caller 'alice': the authorization server of "
        "server 'gh' refused to refresh the connected account (the connection was removed): "
        "connect again"))]
    assert "the-refresh-token" not in caplog.text and "old-token" not in caplog.text


async def test_a_per_subject_secret_refused_by_its_server_is_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(f'{{"{ISSUER} alice": "Bearer alices-secret"}}', encoding="utf-8")
    resolver = CredentialResolver({"legacy": SubjectSecrets("legacy", PerSubjectSettings(str(secrets)))})
    stale = (await resolver.obtain("credential:legacy", caller(), None)).credential
    assert stale is not None and warnings(caplog) == []
    renewed = await resolver.renew("credential:legacy", caller(), None, stale)
    unknown = await resolver.obtain("credential:legacy", caller("bob"), None)
    assert (renewed.result, unknown.result) == ("refused", "refused")
    assert warnings(caplog) == [
        ("mcp_preconditions.credentials", "credential for server legacy (per-subject) refused for "
                                          "caller 'alice': server 'legacy' refused this caller's secret"),
        ("mcp_preconditions.credentials", "credential for server legacy (per-subject) refused for "
                                          "caller 'bob': no secret for this caller on server 'legacy'")]
    assert "alices-secret" not in caplog.text


def test_a_bad_log_level_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_gateway_config import errors

    (tmp_path / "policy.toml").write_text("", encoding="utf-8")
    assert errors(capsys, "gateway", "--policy", str(tmp_path / "policy.toml"), "--log-level", "LOUD",
                  "--", "true") == [
        "--log-level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD'"]
