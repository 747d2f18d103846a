"""Exchanged credentials, kept per (hash of the subject token, server) until a deadline, at most
`max_entries` (least recently used first out), and obtained once for concurrent calls of one caller
(single flight): a burst of calls with one token costs one exchange.

The key holds the token's sha256, never the token. Failures are never kept: the next call asks again.
A read (every call of a caller with a credential) takes no lock: one OrderedDict lookup and one
move to the end, each atomic under the GIL; writes, drops and evictions hold the lock. The token's
sha256 is computed once per verified caller (`TokenKeys`), not on every call.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from ..auth.cache import token_key
from ..principal import Identity, Principal
from .credential import Credential
from .flight import Flights

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
