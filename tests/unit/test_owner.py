"""Whose a session is (owner.py): one type for hosted servers and the gateway. The same principal's
refreshed token is the same owner; its other clients are other owners that share its bounds."""

from __future__ import annotations

from mcp_preconditions.owner import Owner, principal_key
from mcp_preconditions.principal import Principal


def test_an_owner_is_client_issuer_and_subject_and_a_principal_is_issuer_and_subject() -> None:
    first = Owner.of(Principal.from_claims({"iss": "https://idp", "sub": "olga", "client_id": "app",
                                            "jti": "1"}))
    refreshed = Owner.of(Principal.from_claims({"iss": "https://idp", "sub": "olga",
                                                "client_id": "app", "jti": "2"}))
    other_client = Owner.of(Principal.from_claims({"iss": "https://idp", "sub": "olga", "azp": "cli"}))
    bare = Owner.of(Principal.from_claims({"client_id": "svc"}))  # no sub: no subject (SPEC §14)
    assert first == refreshed == Owner("app", "https://idp", "olga")
    assert other_client == Owner("cli", "https://idp", "olga") != first
    assert principal_key(first) == principal_key(other_client) == ("https://idp", "olga")
    assert bare == Owner("svc", None, None) and principal_key(None) is None
    # A bound is no grant: two clients without a subject are counted apart, never as one another.
    assert principal_key(bare) == (None, None, "svc")
    assert principal_key(Owner.of(Principal.from_claims({"client_id": "alice"}))) != principal_key(
        Owner.of(Principal.from_claims({"sub": "alice"})))
