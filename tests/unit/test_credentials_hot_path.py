"""What a call with a cached credential reuses instead of building (issue 32's CPU goal), and that
reusing it weakens no rule: the token's key is hashed once per verified principal, but a remembered
key serves only that principal object and that token (another token of the same principal is
exchanged for itself); the `Obtained` at hand and the header block are one object per credential;
what a call holds, and whom it is sent as, is remembered only for the principal it was made for;
an expired credential is never given, remembered or not; the cache's bound evicts the least
recently used.
"""

from __future__ import annotations

import pytest

import mcp_preconditions.credentials.exchange as cache_module
from mcp_preconditions.auth.cache import token_key
from mcp_preconditions.credentials import (
    CredentialResolver,
    ExchangeCache,
    HeldCredential,
    TokenExchange,
)
from mcp_preconditions.credentials.caller import Caller
from mcp_preconditions.credentials.credential import Credential
from mcp_preconditions.credentials.exchange import TokenKeys
from mcp_preconditions.late import LateCall, Sidecar
from mcp_preconditions.principal import Identity
from tests.unit.credentials_doubles import ISSUER, AuthServer, Clock, caller, exchanged
from tests.unit.test_credentials_exchange import settings

REQ = "credential:crm"
TOKEN, OTHER = "caller-token-xyz", "caller-token-abc"


def setup() -> tuple[AuthServer, Clock, ExchangeCache, CredentialResolver]:
    server = AuthServer(lambda form: (200, exchanged(f"for-{form['subject_token']}")))
    clock = Clock()
    cache = ExchangeCache(clock=clock)
    source = TokenExchange("crm", settings(), cache, clock=clock, transport=server.transport())
    return server, clock, cache, CredentialResolver({"crm": source})


def counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hashed: list[str] = []

    def counted(token: str) -> bytes:
        hashed.append(token)
        return token_key(token)
    monkeypatch.setattr(cache_module, "token_key", counted)
    return hashed


async def test_a_callers_token_is_hashed_once_and_read_after(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    hashed = counting(monkeypatch)
    server, _, _, resolver = setup()
    alice = caller()
    await resolver.obtain(REQ, alice, TOKEN)
    for _ in range(5):
        found = resolver.obtain_now(REQ, alice, TOKEN)
        assert found is not None and found.cached
    assert hashed == [TOKEN] and len(server.requests) == 1


async def test_an_identity_verified_from_the_token_gives_its_key_and_no_hash_is_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The authenticator's identity for a token carries the token's sha256 (`token_key`): the
    cache reads it, for any principal object, and hashes nothing; an identity without it (a
    host-verified principal) is keyed by hashing its token, as before."""
    hashed = counting(monkeypatch)
    server, _, _, resolver = setup()
    first = await resolver.obtain(REQ, caller(), TOKEN)
    assert hashed == [TOKEN]
    for _ in range(3):  # a new principal object each time: read by the identity's key alone
        principal = caller().principal
        keyed = Identity(principal=principal, token_key=token_key(TOKEN))
        found = resolver.obtain_now(REQ, keyed, TOKEN)
        assert found is not None and found.credential is first.credential
    other = Identity(principal=caller().principal, token_key=token_key(OTHER))
    assert resolver.obtain_now(REQ, other, OTHER) is None  # its own token's key: not exchanged yet
    assert hashed == [TOKEN] and len(server.requests) == 1
    assert resolver.obtain_now(REQ, caller(), TOKEN) is not None and hashed == [TOKEN, TOKEN]


async def test_a_remembered_key_serves_only_its_principal_and_its_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = counting(monkeypatch)
    server, _, _, resolver = setup()
    alice = caller()
    first = await resolver.obtain(REQ, alice, TOKEN)
    # The same principal object with another token: not the first token's credential.
    assert resolver.obtain_now(REQ, alice, OTHER) is None
    other = await resolver.obtain(REQ, alice, OTHER)
    assert other.credential is not None and first.credential is not None
    assert other.credential.headers() == {"Authorization": f"Bearer for-{OTHER}"}
    assert first.credential.headers() == {"Authorization": f"Bearer for-{TOKEN}"}
    # The same token verified again (a new principal object): keyed by the token, hashed afresh.
    again = resolver.obtain_now(REQ, caller(), TOKEN)
    assert again is not None and again.credential is first.credential
    assert len(server.requests) == 2 and hashed.count(TOKEN) == 2


def test_the_remembered_keys_are_bounded_and_equal_the_tokens_hash() -> None:
    keys = TokenKeys(2)
    principals = [caller(f"c{n}").principal for n in range(3)]
    for n, principal in enumerate(principals):
        assert principal is not None
        assert keys.key(principal, f"token-{n}") == token_key(f"token-{n}")
    assert len(keys) == 2


async def test_an_expired_credential_is_never_given_though_its_key_is_remembered() -> None:
    server, clock, _, resolver = setup()
    alice = caller(expires_at=clock.now + 300)
    await resolver.obtain(REQ, alice, TOKEN)
    assert resolver.obtain_now(REQ, alice, TOKEN) is not None
    clock.now += 270  # 30 s before the caller's token expires: no longer given
    assert resolver.obtain_now(REQ, alice, TOKEN) is None
    assert not (await resolver.obtain(REQ, alice, TOKEN)).cached and len(server.requests) == 2


async def test_what_a_cached_call_carries_is_built_once_per_credential() -> None:
    _, _, _, resolver = setup()
    alice = caller()
    obtained = await resolver.obtain(REQ, alice, TOKEN)
    first, second = resolver.obtain_now(REQ, alice, TOKEN), resolver.obtain_now(REQ, alice, TOKEN)
    assert first is not None and first is second and first.credential is obtained.credential
    assert first.outcome is resolver.hit(REQ) and first.result == "cached"
    credential = first.credential
    assert credential is not None and credential.headers() is credential.headers()
    renewed = await resolver.renew(REQ, alice, TOKEN, credential)
    at_hand = resolver.obtain_now(REQ, alice, TOKEN)
    assert at_hand is not None and at_hand is not first
    assert at_hand.credential is renewed.credential is not credential


async def test_what_a_call_holds_and_whom_it_is_sent_as_are_built_once_per_principal() -> None:
    _, _, _, resolver = setup()
    alice, bob = caller("alice"), caller("bob")
    obtained = await resolver.obtain(REQ, alice, TOKEN)
    stage = resolver.stage([REQ])

    def held(identity: Identity, token: str = TOKEN) -> HeldCredential:
        sidecar = Sidecar()
        sidecar.token = token
        assert stage.decide(LateCall("read", identity, None, "r", sidecar)) == (resolver.hit(REQ),)
        found = sidecar.held[REQ]
        assert isinstance(found, HeldCredential)
        return found
    first = held(alice)
    sent = first.outbound
    assert sent is not None and (sent.owner, sent.headers()) == (
        Caller(ISSUER, "alice"), obtained.credential.headers())  # type: ignore[union-attr]
    assert held(alice) is first and first.outbound is sent  # remembered for alice's principal
    # Kept while the credential is cached, it keeps no token of the caller's: a renewal is given
    # the call's own.
    assert all(getattr(first, name) != TOKEN for name in HeldCredential.__slots__)
    # Another principal object (bob's, or alice's token verified again) holds its own, sent as
    # itself, never as another; the credential then remembers the latest principal's.
    other = held(bob)
    assert other is not first and getattr(other.outbound, "owner", None) == Caller(ISSUER, "bob")
    again = held(caller("alice"))
    assert again is not first and getattr(again.outbound, "owner", None) == Caller(ISSUER, "alice")
    anonymous = HeldCredential(resolver, REQ, Identity(), TOKEN, obtained)
    sent = anonymous.outbound
    assert sent is not None and sent.owner[0] == "token"  # type: ignore[index]


def test_a_read_keeps_an_entry_among_the_recently_used() -> None:
    clock = Clock()
    cache = ExchangeCache(2, clock=clock)
    keys = [(bytes([n]), "crm") for n in range(3)]
    credentials = [Credential.bearer(f"t{n}", "token-exchange") for n in range(3)]
    cache.put(keys[0], credentials[0], clock.now + 60)
    cache.put(keys[1], credentials[1], clock.now + 60)
    assert cache.get(keys[0]) is credentials[0]  # now the most recently used
    cache.put(keys[2], credentials[2], clock.now + 60)
    assert (cache.get(keys[0]), cache.get(keys[1]), cache.get(keys[2])) == (
        credentials[0], None, credentials[2])
    clock.now += 60  # at the deadline: dropped, never given
    assert cache.get(keys[0]) is None and len(cache) == 1
    with pytest.raises(ValueError, match="at least one entry"):
        ExchangeCache(0)
