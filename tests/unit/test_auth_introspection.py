"""Reading an RFC 7662 introspection response: `active` must be exactly true, and `exp`, `iss`, `aud`
still bind the token to this server. The HTTP exchange itself is tested against the real server in
tests/integration/test_auth_introspection.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions.approvals import Party
from mcp_preconditions.auth import Introspector
from mcp_preconditions.credentials.caller import Caller, caller_of
from mcp_preconditions.errors import AuthBackendError, TokenError
from mcp_preconditions.policy.model import Introspection
from mcp_preconditions.principal import Identity, Principal

NOW = 1_800_000_000.0
ENDPOINT = "https://issuer.test/token/introspection"


def introspector(**kw: Any) -> Introspector:
    settings = Introspection(endpoint=ENDPOINT, client_id_env="ID", client_secret_env="SECRET")
    options: dict[str, Any] = {"issuer": "https://issuer.test", "audiences": ["urn:mcp:mission-server"],
                               "leeway": 30, "clock": lambda: NOW, "environ": {"ID": "i", "SECRET": "s"}}
    return Introspector(settings, **{**options, **kw})


def active(**claims: Any) -> dict[str, Any]:
    doc = {"active": True, "client_id": "mission-control", "scope": "mission:read", "role": "ops",
           "iss": "https://issuer.test", "aud": "urn:mcp:mission-server", "exp": int(NOW) + 60}
    doc.update(claims)
    return {k: v for k, v in doc.items() if v is not None}


def reason(document: Any, **kw: Any) -> str:
    with pytest.raises(TokenError) as caught:
        introspector(**kw).principal_from(document)
    return str(caught.value)


def test_an_active_token_yields_its_principal() -> None:
    principal = introspector().principal_from(active())
    assert principal.kind == "opaque"
    assert principal.subject is None  # no `sub`: no subject, never the client_id (SPEC §14)
    assert introspector().principal_from(active(sub="olga")).subject == "olga"
    assert principal.scopes == frozenset({"mission:read"})
    assert principal.claims["role"] == "ops"
    assert "active" not in principal.claims
    assert principal.expires_at == NOW + 60


@pytest.mark.parametrize("document", [{"active": False}, {"active": "true"}, {"active": 1}, {}])
def test_anything_but_active_true_is_not_active(document: dict[str, Any]) -> None:
    assert reason(document) == "token is not active"


def test_exp_iss_and_aud_still_bind_the_token() -> None:
    assert reason(active(exp=int(NOW) - 100)) == "token expired 100 s ago"
    assert reason(active(iss="https://evil.test")) == (
        "issuer 'https://evil.test' is not 'https://issuer.test'")
    assert reason(active(aud="urn:other")) == "audience 'urn:other' is not 'urn:mcp:mission-server'"
    assert reason(active(aud=None)) == (
        "introspection response has no 'aud' claim; the policy requires an audience")


def test_without_audience_or_issuer_settings_those_claims_are_not_required() -> None:
    doc = active(aud=None, iss=None)
    assert introspector(audiences=(), issuer=None).principal_from(doc).claims["client_id"] == \
        "mission-control"


def test_an_answer_without_iss_is_the_configured_issuers_one_caller_whatever_the_token() -> None:
    """SPEC §14: one person is one caller, (issuer, subject). An opaque token whose introspection
    answer has no `iss` used to be ("", sub) while the same person's JWT was (issuer, sub): two
    callers, so she could approve her own approval request (issue 39.2)."""
    opaque = introspector().principal_from(active(iss=None, sub="alice"))
    assert opaque.claims["iss"] == "https://issuer.test"
    jwt = Principal.from_claims({"iss": "https://issuer.test", "sub": "alice"}, kind="jwt")
    assert Party.of(Identity(opaque)) == Party.of(Identity(jwt)) == Party("https://issuer.test", "alice")
    assert caller_of(opaque) == caller_of(jwt) == Caller("https://issuer.test", "alice")
    # without a configured issuer there is nothing to take: the answer stays as it came
    assert "iss" not in introspector(issuer=None).principal_from(active(iss=None)).claims


def test_a_response_that_is_not_an_object_is_a_backend_error() -> None:
    with pytest.raises(AuthBackendError) as caught:
        introspector().principal_from(["active"])
    assert str(caught.value) == f"introspection endpoint {ENDPOINT} did not return an object"


def test_missing_credentials_are_named() -> None:
    assert introspector(environ={"ID": "i"}).missing_credentials() == ["SECRET"]
    assert introspector(environ={"ID": "", "SECRET": "s"}).missing_credentials() == ["ID"]
