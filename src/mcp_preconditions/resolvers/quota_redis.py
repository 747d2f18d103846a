"""Quota buckets in Redis, shared by every replica: one Lua script checks and takes every bucket of
a call in one round trip (EVALSHA), atomically, on Redis's own clock.

The connection is the policy's `[state.redis]` (RedisStateSource: explicit timeouts, no retry
backoff, errors mapped to BackendError). Keys hold a hash of the caller, never a subject or a token,
and expire when their bucket is full again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from ..errors import BackendError
from ..policy.model import Redis as RedisSettings
from .quota_store import Bucket, Waits
from .state_redis import RedisStateSource

# KEYS: the buckets. ARGV: "1" to take (else only look), now in µs ("" = Redis's TIME), then per
# bucket its interval and tolerance in µs. Returns per bucket the µs until it has a unit (0: now).
# A TAT is kept as an integer string; a key that holds anything else is an error, never "full".
SCRIPT = b"""
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local waits, tats, room = {}, {}, true
for i, key in ipairs(KEYS) do
  local interval, tolerance = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  local tat = now
  local stored = redis.call('GET', key)
  if stored then
    tat = tonumber(stored)
    if not tat then return redis.error_reply('a quota bucket holds no number') end
    if tat < now then tat = now end
  end
  local wait = tat - now - tolerance
  if wait > 0 then room = false else wait = 0 end
  waits[i] = wait
  tats[i] = tat + interval
end
if room and ARGV[1] == '1' then
  for i, key in ipairs(KEYS) do
    local tat = string.format('%.0f', tats[i])
    if ARGV[2] == '' then
      redis.call('SET', key, tat, 'PX', math.ceil((tats[i] - now) / 1000))
    else
      redis.call('SET', key, tat)
    end
  end
end
return waits
"""
SHA = hashlib.sha1(SCRIPT).hexdigest()  # Redis names a script by its SHA-1
US = 1000  # ns per µs


class RedisQuotaStore:
    """Buckets in Redis. One per snapshot serves every `store = "redis"` quota, so a tool's redis
    quotas are taken in one script run. `clock` (ns) replaces Redis's TIME, for tests only: without
    it every replica reads one clock, the server's."""

    name = "redis"

    def __init__(self, connection: RedisStateSource, prefix: str = "mcp-preconditions:quota:", *,
                 clock: Callable[[], int] | None = None) -> None:
        self.connection = connection
        self.prefix = prefix
        self._clock = clock

    @classmethod
    def from_policy(cls, settings: RedisSettings) -> RedisQuotaStore:
        """The store on `[state.redis]`'s connection (shared with state lookups)."""
        return cls(RedisStateSource.from_policy(settings), settings.quota_prefix)

    def __repr__(self) -> str:
        return f"RedisQuotaStore(prefix={self.prefix!r})"

    async def take(self, buckets: Sequence[Bucket]) -> Waits:
        return await self._run(buckets, b"1")

    async def peek(self, buckets: Sequence[Bucket]) -> Waits:
        return await self._run(buckets, b"0")

    def key(self, bucket: Bucket) -> str:
        """`PREFIX NAME ":" caller`, the caller a SHA-256 of who it is (never a raw subject)."""
        key = bucket[0]
        if len(key) == 2:  # "global" or "unidentified"
            return f"{self.prefix}{key[0]}:{key[1]}"
        digest = hashlib.sha256(json.dumps(key[1:]).encode()).hexdigest()[:32]
        return f"{self.prefix}{key[0]}:{digest}"

    async def _run(self, buckets: Sequence[Bucket], take: bytes) -> Waits:
        keys = [self.key(b) for b in buckets]
        args: list[Any] = [take, b"" if self._clock is None else self._clock() // US]
        for _, rate in buckets:
            interval = math.ceil(rate.interval_ns / US)
            args += [interval, (rate.calls - 1) * interval]
        answer = await self.connection.call("EVALSHA", lambda r: _run_script(r, keys, args))
        if not isinstance(answer, list) or len(answer) != len(keys) or not all(
                isinstance(w, int) and w >= 0 for w in answer):
            raise BackendError("redis quota script answered something else than one wait per bucket")
        return [wait * US for wait in answer]

    def refund(self, buckets: Sequence[Bucket]) -> None:
        """Never called: an awaited store is taken last, after every store that can refund."""
        raise BackendError("the Redis quota store is taken last and never refunded")


async def _run_script(client: Redis, keys: list[str], args: list[Any]) -> Any:
    try:
        return await client.evalsha(SHA, len(keys), *keys, *args)
    except NoScriptError:  # a restarted or flushed server: EVAL sends the script and caches it
        return await client.eval(SCRIPT.decode(), len(keys), *keys, *args)
