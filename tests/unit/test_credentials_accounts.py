"""Connected accounts (`kind = "oauth"`) with doubles: tokens sealed with AES-GCM (round trip, a
flipped bit, a value moved to another caller or server, another key), refreshed 60 s before they
expire (once for concurrent calls), a refused refresh ending the connection, a server's 401 renewed
once, and a caller reaching only their own connection.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from typing import Any

import pytest

from mcp_preconditions.credentials import Caller, Client, ConnectedAccounts, MemoryVault, OAuthSettings
from mcp_preconditions.credentials.accounts import Connection
from mcp_preconditions.credentials.resolver import CredentialResolver
from mcp_preconditions.credentials.sealing import Sealer, key_from_text
from mcp_preconditions.errors import SealError
from mcp_preconditions.outcomes import Status
from tests.unit.credentials_doubles import ISSUER, TOKEN_ENDPOINT, AuthServer, Clock, caller

KEY = bytes(range(32))
REQ = "credential:gh"
ALICE = Caller(ISSUER, "alice")


def oauth_settings(**overrides: Any) -> OAuthSettings:
    values: dict[str, Any] = {"client": Client("gh-client", "gh-secret"), "encryption_key": KEY,
                              "authorization_endpoint": f"{ISSUER}/authorize",
                              "token_endpoint": TOKEN_ENDPOINT, "scope": ("repo",)}
    values.update(overrides)
    return OAuthSettings(**values)


def refreshed(n: int, expires_in: int | None = 3600, rotate: bool = True) -> dict[str, Any]:
    answer: dict[str, Any] = {"access_token": f"access-{n}", "token_type": "Bearer"}
    if expires_in is not None:
        answer["expires_in"] = expires_in
    if rotate:
        answer["refresh_token"] = f"refresh-{n}"
    return answer


class Setup:
    def __init__(self, server: AuthServer | None = None, vault: MemoryVault | None = None) -> None:
        self.server = server or AuthServer(lambda form: (200, refreshed(len(self.server.requests))))
        self.clock = Clock()
        self.vault = vault if vault is not None else MemoryVault()
        self.accounts = ConnectedAccounts("gh", oauth_settings(), self.vault, clock=self.clock,
                                          transport=self.server.transport())
        self.resolver = CredentialResolver({"gh": self.accounts})

    async def connect(self, who: Caller = ALICE, expires_in: float | None = 3600,
                      refresh: str | None = "refresh-0") -> None:
        expires = None if expires_in is None else self.clock.now + expires_in
        await self.accounts.save(who, Connection("access-0", refresh, self.clock.now, expires))


# -- sealing ------------------------------------------------------------------------------------------
def test_sealing_round_trips_and_detects_tampering() -> None:
    sealer = Sealer(KEY)
    sealed = sealer.seal(b"the tokens", b"owner-a")
    assert sealer.open(sealed, b"owner-a") == b"the tokens"
    assert b"the tokens" not in sealed and sealer.seal(b"the tokens", b"owner-a") != sealed  # fresh nonce
    for bad in (sealed[:-1] + bytes([sealed[-1] ^ 1]),  # a flipped bit
                sealed[:20] + bytes([sealed[20] ^ 0x80]) + sealed[21:],
                b"\x02" + sealed[1:],  # another version
                sealed[:10]):  # truncated
        with pytest.raises(SealError):
            sealer.open(bad, b"owner-a")
    with pytest.raises(SealError, match="does not open with this key for this owner"):
        sealer.open(sealed, b"owner-b")  # moved to another owner
    with pytest.raises(SealError):
        Sealer(bytes(32)).open(sealed, b"owner-a")  # another key
    assert repr(sealer) == "Sealer(<key redacted>)"


@pytest.mark.parametrize(("text", "problem"), [
    ("not base64!", "not base64"),
    (base64.b64encode(b"short").decode(), "decodes to 5 bytes, not 32 (make one with "
                                          "`openssl rand -base64 32`)"),
    (base64.b64encode(bytes(33)).decode(), "decodes to 33 bytes, not 32 (make one with "
                                           "`openssl rand -base64 32`)"),
])
def test_an_unusable_encryption_key(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        key_from_text(text)
    assert str(caught.value) == problem


def test_a_key_in_standard_or_url_safe_base64() -> None:
    raw = os.urandom(32)
    assert key_from_text(base64.b64encode(raw).decode()) == raw
    assert key_from_text(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw


async def test_tokens_are_kept_sealed_to_their_caller_and_server() -> None:
    setup = Setup()
    await setup.connect()
    sealed = await setup.vault.load(ALICE.digest(), "gh")
    assert sealed is not None and b"access-0" not in sealed and b"refresh-0" not in sealed
    bob = Caller(ISSUER, "bob")
    await setup.vault.save(bob.digest(), "gh", sealed)  # alice's sealed tokens copied to bob
    assert await setup.accounts.load(bob) is None  # they do not open for him, and are removed
    assert await setup.vault.load(bob.digest(), "gh") is None
    assert (await setup.accounts.load(ALICE)) is not None


async def test_a_tampered_connection_is_removed_and_unsatisfied(caplog: pytest.LogCaptureFixture) -> None:
    setup = Setup()
    await setup.connect()
    sealed = await setup.vault.load(ALICE.digest(), "gh")
    assert sealed is not None
    await setup.vault.save(ALICE.digest(), "gh", sealed[:-1] + bytes([sealed[-1] ^ 1]))
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.UNSATISFIED, "no account connected for server 'gh'")
    assert "does not open" in caplog.text and await setup.vault.all(ALICE.digest()) == {}


# -- use and refresh ----------------------------------------------------------------------------------
async def test_a_connected_account_is_the_callers_credential_from_the_vault() -> None:
    setup = Setup()
    assert (await setup.resolver.obtain(REQ, caller(), None)).outcome.reason == (
        "no account connected for server 'gh'")
    await setup.connect()
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert obtained.credential is not None and obtained.result == "cached"
    assert obtained.credential.headers() == {"Authorization": "Bearer access-0"}
    assert (await setup.resolver.obtain(REQ, caller("bob"), None)).result == "refused"
    from mcp_preconditions.principal import ANONYMOUS_IDENTITY
    assert (await setup.resolver.obtain(REQ, ANONYMOUS_IDENTITY, None)).result == "refused"
    assert setup.server.requests == []


async def test_a_token_is_refreshed_60_s_before_it_expires() -> None:
    setup = Setup()
    await setup.connect(expires_in=3600)
    setup.clock.now += 3539
    assert (await setup.resolver.obtain(REQ, caller(), None)).cached
    setup.clock.now += 1  # 60 s left
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert obtained.result == "obtained" and obtained.credential is not None
    assert obtained.credential.headers() == {"Authorization": "Bearer access-1"}
    assert setup.server.forms == [{"grant_type": "refresh_token", "refresh_token": "refresh-0"}]
    stored = await setup.accounts.load(ALICE)
    assert stored is not None and (stored.refresh_token, stored.connected_at) == ("refresh-1", 1_000_000.0)
    assert (await setup.resolver.obtain(REQ, caller(), None)).cached


async def test_a_refresh_without_rotation_keeps_the_refresh_token() -> None:
    setup = Setup(AuthServer(lambda form: (200, refreshed(1, rotate=False))))
    await setup.connect(expires_in=30)
    assert (await setup.resolver.obtain(REQ, caller(), None)).result == "obtained"
    stored = await setup.accounts.load(ALICE)
    assert stored is not None and stored.refresh_token == "refresh-0"


async def test_concurrent_calls_share_one_refresh() -> None:
    server = AuthServer(lambda form: (200, refreshed(1)), delay=0.05)
    setup = Setup(server)
    await setup.connect(expires_in=10)
    results = await asyncio.gather(*(setup.resolver.obtain(REQ, caller(), None) for _ in range(20)))
    assert len(server.requests) == 1 and all(r.outcome.ok for r in results)


async def test_a_refused_refresh_ends_the_connection() -> None:
    setup = Setup(AuthServer(lambda form: (400, {"error": "invalid_grant"})))
    await setup.connect(expires_in=30)
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.UNSATISFIED, "the authorization server of server 'gh' refused to refresh the "
                            "connected account (the connection was removed): connect again")
    assert await setup.accounts.load(ALICE) is None


async def test_a_refused_refresh_after_another_replica_refreshed_uses_theirs() -> None:
    setup = Setup(AuthServer(lambda form: (400, {"error": "invalid_grant"})))
    await setup.connect(expires_in=30)
    other = ConnectedAccounts("gh", oauth_settings(), setup.vault, clock=setup.clock)
    original = setup.accounts._refresh

    async def racing(who: Caller, connection: Connection, forced: bool = False) -> Connection:
        # another replica refreshes first (rotating the refresh token), so ours is refused
        await other.save(who, Connection("access-other", "refresh-other", 1.0, setup.clock.now + 3600))
        return await original(who, connection, forced)

    setattr(setup.accounts, "_refresh", racing)  # noqa: B010 - a method replaced for this test
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert obtained.credential is not None
    assert obtained.credential.headers() == {"Authorization": "Bearer access-other"}


async def test_a_refresh_that_cannot_be_made_uses_a_token_still_valid_else_errors() -> None:
    setup = Setup(AuthServer(lambda form: (503, {})))
    await setup.connect(expires_in=30)
    assert (await setup.resolver.obtain(REQ, caller(), None)).outcome.ok  # 30 s left: used
    setup.clock.now += 31
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert (obtained.outcome.status, obtained.outcome.reason) == (
        Status.ERROR, f"token endpoint {TOKEN_ENDPOINT} answered HTTP 503")
    assert await setup.accounts.load(ALICE) is not None  # kept: the next call tries again


async def test_without_a_refresh_token_a_token_is_used_until_it_expires() -> None:
    setup = Setup()
    await setup.connect(expires_in=30, refresh=None)
    assert (await setup.resolver.obtain(REQ, caller(), None)).outcome.ok
    setup.clock.now += 30
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    assert obtained.result == "refused" and "cannot be refreshed: connect again" in obtained.outcome.reason
    assert setup.server.requests == [] and await setup.accounts.load(ALICE) is None


async def test_a_token_without_expiry_is_never_refreshed() -> None:
    setup = Setup()
    await setup.connect(expires_in=None)
    setup.clock.now += 10**8
    assert (await setup.resolver.obtain(REQ, caller(), None)).cached and setup.server.requests == []


async def test_a_servers_401_refreshes_once_then_ends_without_a_refresh_token() -> None:
    setup = Setup()
    await setup.connect()
    stale = (await setup.resolver.obtain(REQ, caller(), None)).credential
    assert stale is not None
    renewed = await setup.resolver.renew(REQ, caller(), None, stale)
    assert renewed.credential is not None and renewed.credential.headers() == {
        "Authorization": "Bearer access-1"}
    assert (await setup.resolver.renew(REQ, caller(), None, stale)).cached  # a newer one stands
    await setup.connect(refresh=None)
    stale = (await setup.resolver.obtain(REQ, caller(), None)).credential
    assert stale is not None
    assert (await setup.resolver.renew(REQ, caller(), None, stale)).result == "refused"


async def test_no_token_in_logs_or_reasons(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    setup = Setup(AuthServer(lambda form: (400, {"error": "invalid_grant"})))
    await setup.connect(expires_in=30)
    obtained = await setup.resolver.obtain(REQ, caller(), None)
    stored = repr(await setup.vault.all(ALICE.digest()))
    text = caplog.text + obtained.outcome.reason + repr(obtained) + stored
    assert "access-0" not in text and "refresh-0" not in text and "gh-secret" not in text


def test_a_connection_lists_times_never_tokens() -> None:
    connection = Connection("access", "refresh", 10.0, 20.0)
    assert connection.listing("gh") == {"server": "gh", "connected_at": 10.0, "expires_at": 20.0}
    assert "access" not in repr(connection) and "refresh" not in repr(connection)
    assert json.loads(connection.to_bytes())["access_token"] == "access"
