"""The verified-principal cache: bounded, keyed by the token's sha256, never outliving `exp`, shared
safely by threads; and the authenticator around it: only successes cached, concurrent first
introspections of one token coalesced.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

from mcp_preconditions import Credentials, Guard, Identity, Principal, parse_policy
from mcp_preconditions.auth import IdentityCache, Introspector, TokenAuthenticator
from mcp_preconditions.auth.cache import token_key
from mcp_preconditions.errors import TokenError
from mcp_preconditions.policy.model import Introspection


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def who(name: str, exp: float | None = None) -> Identity:
    claims: dict[str, object] = {"sub": name}
    if exp is not None:
        claims["exp"] = exp
    return Identity(principal=Principal.from_claims(claims, kind="jwt"))


def test_the_key_is_the_tokens_sha256_never_the_token() -> None:
    assert token_key("secret-token") == hashlib.sha256(b"secret-token").digest()
    cache = IdentityCache(10, 60)
    cache.put(token_key("secret-token"), who("a"), None)
    assert list(cache._entries) == [hashlib.sha256(b"secret-token").digest()]


def test_an_entry_never_outlives_the_tokens_exp() -> None:
    clock = Clock()
    cache = IdentityCache(10, 3600, clock=clock)
    identity = who("a", exp=1010)
    cache.put(b"k", identity, 1010)
    assert cache.get(b"k") is identity
    clock.now = 1010
    assert cache.get(b"k") is None
    assert len(cache) == 0


def test_an_entry_expires_after_the_ttl() -> None:
    clock = Clock()
    cache = IdentityCache(10, 5, clock=clock)
    cache.put(b"k", who("a"), 99999)
    clock.now += 4.9
    assert cache.get(b"k") is not None
    clock.now += 0.2
    assert cache.get(b"k") is None


def test_expired_tokens_and_failures_are_not_stored() -> None:
    clock = Clock()
    cache = IdentityCache(10, 60, clock=clock)
    cache.put(b"old", who("a"), 999)
    cache.put(b"bad", Identity(failure="token expired 3 s ago"), None)
    assert len(cache) == 0


def test_the_cache_is_bounded_and_may_be_disabled() -> None:
    cache = IdentityCache(3, 60)
    for n in range(10):
        cache.put(bytes([n]), who(str(n)), None)
        assert cache.get(bytes([0])) is not None  # a token in use stays; the least recent go
    assert len(cache) == 3
    assert cache.get(bytes([9])) is not None and cache.get(bytes([1])) is None
    off = IdentityCache(0, 60)
    off.put(b"k", who("a"), None)
    assert off.enabled is False and off.get(b"k") is None
    assert IdentityCache(10, 0).enabled is False


def test_threads_share_the_cache_safely() -> None:
    cache = IdentityCache(50, 60)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for n in range(3000):
                key = bytes([(seed * 7 + n) % 120])
                cache.put(key, who(str(n)), None)
                found = cache.get(key)
                assert found is None or found.principal is not None
        except BaseException as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 50


class CountingIntrospector(Introspector):
    """An in-memory double: answers after `release` is set, counting the questions."""

    def __init__(self, active: bool = True) -> None:
        super().__init__(Introspection(endpoint="http://127.0.0.1:1/introspect", client_id_env="X",
                                       client_secret_env="Y"), environ={"X": "x", "Y": "y"})
        self.calls = 0
        self.active = active
        self.release = asyncio.Event()

    async def introspect(self, token: str) -> Principal:
        self.calls += 1
        await self.release.wait()
        if not self.active:
            raise TokenError("token is not active")
        return Principal.from_claims({"sub": "svc", "active": True}, kind="opaque")


async def test_concurrent_first_sightings_of_one_token_introspect_once() -> None:
    double = CountingIntrospector()
    auth = TokenAuthenticator(introspector=double, cache=IdentityCache(10, 60))
    calls = [asyncio.create_task(auth.authenticate(Credentials(token="opaque-1"))) for _ in range(10)]
    await asyncio.sleep(0)
    double.release.set()
    identities = await asyncio.gather(*calls)
    assert double.calls == 1
    assert all(i is identities[0] and i.subject == "svc" for i in identities)
    assert await auth.authenticate(Credentials(token="opaque-1")) is identities[0]
    assert double.calls == 1


async def test_one_cancelled_caller_does_not_cancel_the_others() -> None:
    double = CountingIntrospector()
    auth = TokenAuthenticator(introspector=double, cache=IdentityCache(10, 60))
    first = asyncio.create_task(auth.authenticate(Credentials(token="opaque-2")))
    second = asyncio.create_task(auth.authenticate(Credentials(token="opaque-2")))
    await asyncio.sleep(0)
    first.cancel()
    double.release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).subject == "svc"
    assert double.calls == 1


async def test_failures_are_not_cached() -> None:
    double = CountingIntrospector(active=False)
    double.release.set()
    cache = IdentityCache(10, 60)
    auth = TokenAuthenticator(introspector=double, cache=cache)
    for _ in range(2):
        assert await auth.authenticate(Credentials(token="revoked")) == Identity(
            failure="token is not active")
    assert double.calls == 2
    assert len(cache) == 0


async def test_an_introspection_only_policy_introspects_jwt_shaped_tokens_too() -> None:
    double = CountingIntrospector()
    double.release.set()
    auth = TokenAuthenticator(introspector=double)
    jwt_shaped = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
    assert (await auth.authenticate(Credentials(token=jwt_shaped))).subject == "svc"
    assert double.calls == 1


async def test_authenticate_now_answers_only_what_needs_no_verification() -> None:
    double = CountingIntrospector()
    double.release.set()
    auth = TokenAuthenticator(introspector=double, cache=IdentityCache(10, 60), max_token_bytes=64)
    host = Principal.from_claims({"sub": "host-verified"})
    assert auth.authenticate_now(Credentials(principal=host)) == Identity(principal=host)
    assert auth.authenticate_now(Credentials()) == Identity(failure="no access token")
    assert auth.authenticate_now(Credentials(token="x" * 65)) == Identity(
        failure="token is larger than 64 bytes")
    assert auth.authenticate_now(Credentials(token="opaque-3")) is None  # needs introspection
    assert double.calls == 0
    verified = await auth.authenticate(Credentials(token="opaque-3"))
    assert auth.authenticate_now(Credentials(token="opaque-3")) is verified  # now cached
    assert double.calls == 1
    # A verified identity carries its token's key (what an exchanged credential is cached by),
    # not the token, and never shows it; a host-verified one carries none.
    assert verified.token_key == token_key("opaque-3") and "opaque-3" not in repr(verified)
    assert token_key("opaque-3").hex() not in repr(verified)
    assert auth.authenticate_now(Credentials(principal=host)).token_key is None  # type: ignore[union-attr]


async def test_the_guard_uses_a_cached_identity_without_verifying_again() -> None:
    double = CountingIntrospector()
    double.release.set()
    auth = TokenAuthenticator(introspector=double, cache=IdentityCache(10, 60))
    guard = Guard(parse_policy(b"", "p.toml"), {"t": ["auth:claim:sub:svc"]}, authenticator=auth,
                  entry_points=False)
    first = await guard.check("t", Credentials(token="opaque-4"))
    second = await guard.check("t", Credentials(token="opaque-4"))
    assert first.allowed and second.allowed and second.subject == "svc"
    assert double.calls == 1
