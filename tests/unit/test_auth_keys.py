"""The key set: JWKS parsing, the refetch rate limit on unknown kids, rotation, coalesced fetches,
failures that fail closed, stale-key refresh, discovery URLs. The JWKS fetch is an in-memory double
here; tests/integration/test_auth_oidc.py fetches from the real server.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from mcp_preconditions.auth import KeySet, fetch
from mcp_preconditions.auth import keys as keys_module
from mcp_preconditions.auth.fetch import discover_jwks_uri, metadata_urls
from mcp_preconditions.auth.keys import JWKS_MAX_AGE_SECONDS, keys_from_jwks, quote
from mcp_preconditions.errors import AuthBackendError, NoDocumentError
from tests.fixtures.oidc import SigningKey

URI = "https://issuer.test/jwks"
A = SigningKey("EC", "a")
B = SigningKey("EC", "b")


class Timer:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeIssuer:
    """Serves JWKS documents in order (the last one forever), or raises; counts fetches."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *documents: Any) -> None:
        self.documents = list(documents)
        self.fetches = 0
        self.gate: asyncio.Event | None = None
        monkeypatch.setattr(keys_module, "get_json", self.get_json)

    async def get_json(self, url: str, timeout: float) -> Any:
        assert url == URI
        self.fetches += 1
        if self.gate is not None:
            await self.gate.wait()
        doc = self.documents[0] if len(self.documents) == 1 else self.documents.pop(0)
        if isinstance(doc, Exception):
            raise doc
        return doc


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [k.public_jwk() for k in keys]}


def keyset(timer: Timer, interval: float = 10.0) -> KeySet:
    return KeySet(jwks_uri=URI, refetch_interval=interval, timer=timer)


async def test_an_unknown_kid_refetches_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = FakeIssuer(monkeypatch, jwks(A))
    timer = Timer()
    ks = keyset(timer)
    assert [k.kid for k in await ks.keys_for("a")] == ["a"]
    assert issuer.fetches == 1
    timer.now = 10.0
    assert await ks.keys_for("random-1") == []
    assert issuer.fetches == 2
    for n in range(50):  # random kids inside the interval never reach the issuer
        timer.now = 10.0 + n * 0.1
        assert await ks.keys_for(f"random-{n}") == []
    assert issuer.fetches == 2
    timer.now = 20.0
    await ks.keys_for("random-x")
    assert issuer.fetches == 3


async def test_a_rotated_key_is_found_by_refetching(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = FakeIssuer(monkeypatch, jwks(A), jwks(B))
    ks = keyset(Timer(), interval=0)
    assert [k.kid for k in await ks.keys_for("a")] == ["a"]
    assert [k.kid for k in await ks.keys_for("b")] == ["b"]
    assert await ks.keys_for("a") == []  # the old key is gone after the next refetch
    assert issuer.fetches == 3


async def test_concurrent_refetches_share_one_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = FakeIssuer(monkeypatch, jwks(A, B))
    issuer.gate = asyncio.Event()
    ks = keyset(Timer())
    waiting = [asyncio.create_task(ks.keys_for("b")) for _ in range(20)]
    await asyncio.sleep(0)
    issuer.gate.set()
    found = await asyncio.gather(*waiting)
    assert issuer.fetches == 1
    assert all([k.kid for k in keys] == ["b"] for keys in found)


async def test_an_unreachable_jwks_fails_closed_and_retries_after_the_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    down = AuthBackendError(f"cannot fetch {URI}: connection failed")
    issuer = FakeIssuer(monkeypatch, down, down, jwks(A))
    timer = Timer()
    ks = keyset(timer)
    reason = f"signing keys unavailable: cannot fetch {URI}: connection failed"
    for _ in range(3):
        with pytest.raises(AuthBackendError) as caught:
            await ks.keys_for("a")
        assert str(caught.value) == reason
    assert issuer.fetches == 1
    timer.now = 10.0
    with pytest.raises(AuthBackendError):
        await ks.keys_for("a")
    timer.now = 20.0
    assert [k.kid for k in await ks.keys_for("a")] == ["a"]
    assert issuer.fetches == 3


async def test_an_unknown_kid_while_the_issuer_is_down_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeIssuer(monkeypatch, jwks(A), AuthBackendError(f"{URI} did not answer within 2 s"))
    ks = keyset(Timer(), interval=0)
    await ks.keys_for("a")
    with pytest.raises(AuthBackendError) as caught:
        await ks.keys_for("new")
    assert str(caught.value) == ("signing key 'new' is not in the cached JWKS, and refetching it failed: "
                                 f"signing keys unavailable: {URI} did not answer within 2 s")
    assert [k.kid for k in await ks.keys_for("a")] == ["a"]  # known keys keep working


async def test_a_stale_jwks_is_refreshed_and_kept_if_the_refresh_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = FakeIssuer(monkeypatch, jwks(A), AuthBackendError("down"))
    timer = Timer()
    ks = keyset(timer)
    await ks.keys_for("a")
    timer.now = JWKS_MAX_AGE_SECONDS + 1
    assert [k.kid for k in await ks.keys_for("a")] == ["a"]
    assert issuer.fetches == 2


def test_a_jwks_document_is_checked_and_unusable_keys_are_skipped() -> None:
    with pytest.raises(AuthBackendError) as caught:
        keys_from_jwks({"kty": "RSA"}, URI)
    assert str(caught.value) == f"JWKS at {URI} is malformed: no 'keys' list"
    doc = {"keys": [A.public_jwk(), {**B.public_jwk(), "use": "enc"}, {"kty": "oct", "k": "c2VjcmV0"},
                    {"kty": "RSA", "kid": "broken"}, "not-a-key", {"kty": "XYZ"}]}
    assert [k.kid for k in keys_from_jwks(doc, URI)] == ["a"]


def test_metadata_urls_follow_oidc_discovery_and_rfc_8414() -> None:
    assert metadata_urls("https://auth.example.com") == [
        "https://auth.example.com/.well-known/openid-configuration",
        "https://auth.example.com/.well-known/oauth-authorization-server"]
    assert metadata_urls("https://auth.example.com/tenant/1/") == [
        "https://auth.example.com/tenant/1/.well-known/openid-configuration",
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant/1"]


def test_untrusted_values_are_quoted_escaped_and_bounded() -> None:
    assert quote("k1") == "'k1'"
    assert quote("a'b\nc") == "'a\\'b\\nc'"
    assert quote("x" * 100) == "'" + "x" * 64 + "...'"
    assert quote(3) == "'3'"


async def test_discovery_falls_back_to_rfc_8414_only_when_the_server_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def answers(url: str, timeout: float) -> Any:
        asked.append(url)
        if "openid-configuration" in url:
            raise NoDocumentError(f"{url} answered HTTP 404")
        return {"issuer": "https://issuer.test", "jwks_uri": URI}

    monkeypatch.setattr(fetch, "get_json", answers)
    assert await discover_jwks_uri("https://issuer.test", 1.0) == URI
    assert asked == metadata_urls("https://issuer.test")

    async def down(url: str, timeout: float) -> Any:
        asked.append(url)
        raise AuthBackendError(f"{url} did not answer within 1 s")

    asked.clear()
    monkeypatch.setattr(fetch, "get_json", down)
    with pytest.raises(AuthBackendError) as caught:
        await discover_jwks_uri("https://issuer.test", 1.0)
    assert str(caught.value) == (
        "https://issuer.test/.well-known/openid-configuration did not answer within 1 s")
    assert len(asked) == 1  # an unreachable issuer is not asked twice


async def test_discovery_needs_a_jwks_uri_for_exactly_this_issuer(monkeypatch: pytest.MonkeyPatch) -> None:
    async def metadata(url: str, timeout: float) -> Any:
        return {"issuer": "https://issuer.test"}

    monkeypatch.setattr(fetch, "get_json", metadata)
    with pytest.raises(AuthBackendError) as caught:
        await discover_jwks_uri("https://issuer.test", 1.0)
    assert str(caught.value) == (
        "metadata at https://issuer.test/.well-known/openid-configuration has no 'jwks_uri'")


def test_event_loops_in_two_threads_both_get_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    started = threading.Barrier(2)
    fetching = threading.Barrier(2, timeout=10)  # (the safety net: a fetch that never comes)

    async def slow_jwks(url: str, timeout: float) -> Any:
        await asyncio.to_thread(fetching.wait)  # both threads are inside a fetch at once
        return jwks(A)

    monkeypatch.setattr(keys_module, "get_json", slow_jwks)
    ks = keyset(Timer(), interval=3600)
    found: list[list[str | None]] = []

    def worker() -> None:
        started.wait()
        found.append([k.kid for k in asyncio.run(ks.keys_for("a"))])

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [["a"], ["a"]]
