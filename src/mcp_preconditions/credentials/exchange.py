"""`kind = "token-exchange"`: the caller's verified bearer token exchanged (RFC 8693) at the
configured token endpoint for a token issued for the server (its `audience` / `resource`), cached
until the earlier of both tokens' expiry, less 30 s.

The caller's own token goes nowhere else: only here, as `subject_token`, to that endpoint. An answer
without `access_token`, an `issued_token_type` of an access token or JWT, `token_type` Bearer and a
positive `expires_in` is garbage (`error`), never a credential.

The cache (`ExchangeCache`, one per gateway, shared by its servers): exchanged credentials, kept
per (hash of the subject token, server) until a deadline, at most `max_entries` (least recently
used first out), and obtained once for concurrent calls of one caller (single flight): a burst of
calls with one token costs one exchange. The key holds the token's sha256, never the token.
Failures are never kept: the next call asks again.
A read (every call of a caller with a credential) takes no lock: one OrderedDict lookup and one
move to the end, each atomic under the GIL; writes, drops and evictions hold the lock. The token's
sha256 is computed once per verified caller (`TokenKeys`), not on every call.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from ..auth.cache import token_key
from ..errors import CredentialBackendError, NoCredentialError
from ..principal import Identity, Principal
from .caller import known_caller
from .credential import Credential
from .endpoint import TokenEndpoint, bearer_of
from .flight import Flights
from .settings import TOKEN_EXCHANGE, TokenExchangeSettings

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ISSUED_TYPES = frozenset({ACCESS_TOKEN_TYPE, JWT_TYPE})
MARGIN_SECONDS = 30.0  # a cached token is given up this long before either token expires


class TokenExchange:
    """Obtains one server's credentials by token exchange, through a cache shared by servers."""

    kind = TOKEN_EXCHANGE

    def __init__(self, server: str, settings: TokenExchangeSettings, cache: ExchangeCache, *,
                 clock: Callable[[], float] = time.time,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server = server
        self.settings = settings
        self.cache = cache
        self._clock = clock
        self._endpoint = TokenEndpoint(settings.token_endpoint, settings.client,
                                       settings.timeout_seconds, transport=transport)

    async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
        """This caller's credential and whether it came from the cache (no request made for this
        call); NoCredentialError when there is none to be had, CredentialBackendError when the
        authorization server fails."""
        token, expires_at = _subject(principal, token)
        assert principal is not None  # (`_subject`)
        key = (self.cache.keys.key(principal, token), self.server)
        found = self.cache.get(key)
        if found is not None:
            return found, True
        credential, led = await self.cache.once(key, lambda: self._exchange(token, expires_at))
        return credential, not led

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """The caller's credential when the cache holds it (within both tokens' expiry), at once;
        None when `obtain` must be awaited (an exchange to make, or none to be had: it says why)."""
        return self.cache.current(self.server, identity, token)

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                    challenge: str | None = None) -> tuple[Credential, bool]:
        """After the server refused `stale` (401/403): forget it and exchange once more."""
        subject, _ = _subject(principal, token)
        assert principal is not None  # (`_subject`)
        self.cache.drop((self.cache.keys.key(principal, subject), self.server), stale)
        return await self.obtain(principal, token)

    def form(self, token: str) -> dict[str, str]:
        """The RFC 8693 §2.1 request."""
        settings = self.settings
        form = {"grant_type": GRANT_TYPE, "subject_token": token,
                "subject_token_type": ACCESS_TOKEN_TYPE, "requested_token_type": ACCESS_TOKEN_TYPE}
        if settings.audience is not None:
            form["audience"] = settings.audience
        if settings.resource is not None:
            form["resource"] = settings.resource
        if settings.scope:
            form["scope"] = " ".join(settings.scope)
        return form

    async def _exchange(self, token: str, subject_expires_at: float | None
                        ) -> tuple[Credential, float]:
        # A refusal or a failure raises: the resolver logs it with its reason (resolver._settle).
        answer = await self._endpoint.request(self.form(token))
        access_token, expires_in = issued(answer, self._endpoint.url)
        now = self._clock()
        expires_at = now + expires_in
        deadline = min(expires_at, subject_expires_at or expires_at) - MARGIN_SECONDS
        return Credential.bearer(access_token, self.kind, expires_at), deadline


def _subject(principal: Principal | None, token: str | None) -> tuple[str, float | None]:
    """The token to exchange and when it expires: only a verified caller's own bearer token, of a
    token that names its subject (SPEC §14: no `sub`, no subject, no credential)."""
    if principal is None:
        raise NoCredentialError("the caller is not verified (no valid access token)")
    known_caller(principal)
    if token is None:
        raise NoCredentialError("the caller presented no access token to exchange")
    return token, principal.expires_at


def issued(answer: dict[str, Any], where: str) -> tuple[str, int]:
    """The access token and its lifetime from an RFC 8693 §2.2.1 answer; garbage raises."""
    if answer.get("issued_token_type") not in ISSUED_TYPES:
        raise CredentialBackendError(f"token endpoint {where} answered without an issued_token_type "
                                     "of an access token or a JWT")
    access_token, expires_in = bearer_of(answer, where, expiry_required=True)
    assert expires_in is not None
    return access_token, expires_in


# -- the cache, shared by a gateway's exchanges ---------------------------------------------------
Key = tuple[bytes, str]  # (sha256 of the subject token, server key)
DEFAULT_MAX_ENTRIES = 10_000


class TokenKeys:
    """`auth.cache.token_key(token)` (a sha256), remembered per verified principal object: the
    authenticator's cache gives one Principal per token, so a caller's every call after the first
    reads the key instead of hashing the token again. A remembered key is used only for the very
    principal it was made for (compared by identity; the entry holds it, so its id is never reused)
    and a token of the same length and Python hash; anything else is hashed afresh. No token is
    kept. Bounded (oldest out first); thread safe (reads are one dict lookup)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._max_entries = max(max_entries, 1)
        # id(principal) -> (principal, len(token), hash(token), key); read inline by
        # `ExchangeCache.current`.
        self.known: OrderedDict[int, tuple[Principal, int, int, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, principal: Principal, token: str) -> bytes:
        known = self.known.get(id(principal))
        if known is not None and known[0] is principal and known[1] == len(token) \
                and known[2] == hash(token):
            return known[3]
        key = token_key(token)
        with self._lock:
            self.known[id(principal)] = (principal, len(token), hash(token), key)
            while len(self.known) > self._max_entries:
                self.known.popitem(last=False)
        return key

    def __len__(self) -> int:
        return len(self.known)


class ExchangeCache:
    """Credentials by key, each until its own deadline (wall clock, like `exp`). Thread safe."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, *,
                 clock: Callable[[], float] = time.time) -> None:
        if max_entries < 1:
            raise ValueError("an exchange cache keeps at least one entry")
        self._max_entries = max_entries
        # Least recently used first. Entries are immutable tuples, replaced whole.
        self._entries: OrderedDict[Key, tuple[Credential, float]] = OrderedDict()
        self.keys = TokenKeys(max_entries)  # each caller's token hashed once, not per call
        self._flights: Flights[Credential] = Flights()
        self._lock = threading.Lock()
        self._clock = clock

    def current(self, server: str, identity: Identity, token: str | None
                ) -> Credential | None:
        """`get((keys.key(principal, token), server))` in one step (None without a principal or
        a token): the hot path of every call with a cached credential. The token's key is the
        identity's own when the authenticator verified it from this token (`token_key`), else a
        remembered one; a live entry is read inline; anything else (a key to hash, an entry
        expired or gone) goes the long way, which decides it."""
        principal = identity.principal
        if principal is None or token is None:
            return None
        token_key = identity.token_key
        if token_key is None:
            known = self.keys.known.get(id(principal))
            if known is None or known[0] is not principal or known[1] != len(token) \
                    or known[2] != hash(token):
                return self.get((self.keys.key(principal, token), server))
            token_key = known[3]
        key = (token_key, server)
        entries = self._entries
        entry = entries.get(key)
        if entry is None or entry[1] <= self._clock():
            return self.get(key)  # (none, or expired: `get` drops it)
        try:  # noqa: SIM105 - (as in `get`)
            entries.move_to_end(key)
        except KeyError:
            pass
        return entry[0]

    def get(self, key: Key) -> Credential | None:
        """The credential kept for `key` while its deadline is ahead, else None (an expired one
        is dropped: never given)."""
        entries = self._entries
        entry = entries.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            with self._lock:
                if entries.get(key) is entry:  # not replaced meanwhile by a fresh one
                    del entries[key]
            return None
        try:  # noqa: SIM105 - a with-statement costs more than the lookup, on every call
            entries.move_to_end(key)  # recently used: the last evicted
        except KeyError:  # dropped meanwhile by another thread: it was current when read
            pass
        return entry[0]

    def put(self, key: Key, credential: Credential, deadline: float) -> None:
        """Keep `credential` until `deadline`; one already past it is not kept."""
        if deadline <= self._clock():
            return
        with self._lock:
            entries = self._entries
            entries[key] = (credential, deadline)
            entries.move_to_end(key)
            while len(entries) > self._max_entries:
                entries.popitem(last=False)

    def drop(self, key: Key, stale: Credential) -> None:
        """Forget the entry if it still holds `stale` (a server refused it); a newer one stays."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0].same(stale):
                del self._entries[key]

    async def once(self, key: Key, obtain: Callable[[], Awaitable[tuple[Credential, float]]]
                   ) -> tuple[Credential, bool]:
        """The credential `obtain` gets (and keeps until the deadline it gives), run once for
        concurrent callers of one key: (credential, True) for the call that ran it, (credential,
        False) for those that joined it."""
        async def fly() -> Credential:
            credential, deadline = await obtain()
            self.put(key, credential, deadline)
            return credential

        return await self._flights.once(key, fly)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def max_entries(self) -> int:
        return self._max_entries
