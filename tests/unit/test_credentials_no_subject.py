"""A token without `sub` names no subject (SPEC §14, issue 39.8): for every kind of credential it is
`unsatisfied`, never named by its `client_id` (or anything else). Before, a client registered as
`alice` (client credentials, no `sub`) was sent alice's per-subject secret; an exchange or a
connected account would have been obtained for it too. The real provider's tokens without `sub`
(opaque client-credentials tokens, introspected) are in
tests/integration/test_credentials_no_subject.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_preconditions.credentials import (
    Caller,
    Client,
    ConnectedAccounts,
    ExchangeCache,
    MemoryVault,
    PerSubjectSettings,
    SubjectSecrets,
    TokenExchangeSettings,
)
from mcp_preconditions.credentials.accounts import Connection
from mcp_preconditions.credentials.exchange import TokenExchange
from mcp_preconditions.credentials.resolver import CredentialResolver, CredentialSource
from mcp_preconditions.principal import Identity, Principal
from tests.unit.credentials_doubles import ISSUER, TOKEN_ENDPOINT, AuthServer, Clock, exchanged
from tests.unit.test_credentials_accounts import oauth_settings

NO_SUBJECT = ("the caller's token names no subject (no 'sub' claim): a credential is kept per "
              "known caller")


def client_token(client_id: str = "alice", **claims: Any) -> Identity:
    """A client-credentials token of a client registered as `client_id`: no `sub`."""
    return Identity(Principal.from_claims({"iss": ISSUER, "client_id": client_id, "exp": 2e9, **claims},
                                          kind="opaque"))


def sources(tmp_path: Path, server: AuthServer) -> dict[str, CredentialSource]:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(f'{{"{ISSUER} alice": "Bearer alices-own-secret"}}', encoding="utf-8")
    vault = MemoryVault()
    accounts = ConnectedAccounts("gh", oauth_settings(), vault, clock=Clock())
    exchange = TokenExchange("crm", TokenExchangeSettings(TOKEN_ENDPOINT, Client("gw", "s"),
                                                          audience="https://crm.test"),
                             ExchangeCache(clock=Clock()), clock=Clock(), transport=server.transport())
    return {"legacy": SubjectSecrets("legacy", PerSubjectSettings(str(secrets))), "gh": accounts,
            "crm": exchange}


@pytest.mark.parametrize("claims", [{}, {"sub": ""}, {"sub": 7}, {"azp": "alice"}])
async def test_a_token_without_a_subject_gets_no_credential_of_any_kind(
        tmp_path: Path, claims: dict[str, Any]) -> None:
    server = AuthServer(lambda form: (200, exchanged()))
    found = sources(tmp_path, server)
    accounts = found["gh"]
    assert isinstance(accounts, ConnectedAccounts)
    await accounts.save(Caller(ISSUER, "alice"), Connection("alices-connected-token", None, 1.0, None))
    resolver = CredentialResolver(found)
    identity = client_token(**claims)
    assert identity.subject is None
    for server_key in ("legacy", "gh", "crm"):
        requirement = f"credential:{server_key}"
        assert resolver.obtain_now(requirement, identity, "the-client-token") is None
        obtained = await resolver.obtain(requirement, identity, "the-client-token")
        assert (obtained.result, obtained.outcome.reason) == ("refused", NO_SUBJECT), server_key
        assert obtained.credential is None
    assert server.requests == []  # nothing was exchanged for it


async def test_the_person_named_alice_still_gets_her_own(tmp_path: Path) -> None:
    resolver = CredentialResolver(sources(tmp_path, AuthServer()))
    alice = Identity(Principal.from_claims({"iss": ISSUER, "sub": "alice", "client_id": "app"}))
    obtained = await resolver.obtain("credential:legacy", alice, None)
    assert obtained.credential is not None
    assert obtained.credential.headers() == {"Authorization": "Bearer alices-own-secret"}
