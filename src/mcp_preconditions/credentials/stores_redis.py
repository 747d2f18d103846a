"""The stores of `stores.py` in Redis (the `redis` extra; the policy's `[state.redis]` connection),
so that replicas share connected accounts and flows: a link opened on one replica, or a callback
arriving at another, finds its ticket. Single use is atomic (GETDEL); tokens are one hash per owner.

Bounds hold in Redis as in memory (SPEC §14): an owner's tickets (`put_for`) and, when a store is
given a `limit` (the sign-in flows: 10,000), all of its tickets are indexed in a sorted set by
deadline; one Lua script puts a ticket and deletes the oldest beyond the limit, on Redis's clock.

Every redis failure is a CredentialBackendError (the call is `error`, never allowed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from ..errors import BackendError, CredentialBackendError
from ..resolvers.state_redis import RedisStateSource

DEFAULT_PREFIX = "mcp-preconditions:credentials:"

# KEYS: the ticket, the index it joins (a sorted set: ticket key -> deadline in ms, strictly
# increasing in the order tickets are put: two put within one millisecond would tie, and the limit
# must push out the older, not the one that sorts first by name). ARGV: the
# value, its time to live (ms), the index's limit, "1" to forget first the members whose ticket is
# gone (a small index: an owner's; a store's own index forgets a ticket as it is taken). Returns how
# many tickets were pushed out.
PUT = b"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
local score = now + ttl
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and top[1] ~= KEYS[1] and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end
redis.call('ZADD', KEYS[2], score, KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[4] == '1' then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if redis.call('EXISTS', member) == 0 then redis.call('ZREM', KEYS[2], member) end
  end
end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
else
  over = 0
end
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
return over
"""
PUT_SHA = hashlib.sha1(PUT).hexdigest()  # Redis names a script by its SHA-1


class _OnRedis:
    def __init__(self, source: RedisStateSource, prefix: str) -> None:
        self._source = source
        self.prefix = prefix

    async def _call(self, what: str, op: Callable[[Redis], Awaitable[Any]]) -> Any:
        try:
            return await self._source.call(what, op)
        except BackendError as exc:
            raise CredentialBackendError(str(exc)) from None


class RedisTickets(_OnRedis):
    """Tickets as keys with a time to live; `take` is GETDEL, so one reader wins. With `limit`,
    the store keeps at most that many (the oldest beyond it are deleted as a new one is put)."""

    def __init__(self, source: RedisStateSource, prefix: str = DEFAULT_PREFIX + "ticket:",
                 limit: int | None = None) -> None:
        super().__init__(source, prefix)
        self.limit = limit
        self._index = prefix + "index" if limit is not None else None

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        name, ms = self.prefix + key, _ms(ttl)
        if self._index is None or self.limit is None:
            await self._call("SET", lambda r: r.set(name, value, px=ms))
            return
        index, limit = self._index, self.limit
        await self._call("EVALSHA", lambda r: _put(r, name, index, value, ms, limit, False))

    async def put_for(self, owner: str, key: str, value: bytes, ttl: float, limit: int) -> None:
        name, index = self.prefix + key, self.prefix + "owner:" + owner
        await self._call("EVALSHA", lambda r: _put(r, name, index, value, _ms(ttl), limit, True))

    async def get(self, key: str) -> bytes | None:
        name = self.prefix + key
        return _bytes(await self._call("GET", lambda r: r.get(name)))

    async def take(self, key: str) -> bytes | None:
        name, index = self.prefix + key, self._index
        if index is None:
            return _bytes(await self._call("GETDEL", lambda r: r.getdel(name)))
        return _bytes(await self._call("GETDEL", lambda r: _forgetting(r, name, index, True)))

    async def delete(self, key: str) -> None:
        name, index = self.prefix + key, self._index
        if index is None:
            await self._call("DEL", lambda r: r.delete(name))
        else:
            await self._call("DEL", lambda r: _forgetting(r, name, index, False))


class RedisVault(_OnRedis):
    """One hash per owner: field = server key, value = the sealed connection."""

    def __init__(self, source: RedisStateSource, prefix: str = DEFAULT_PREFIX + "tokens:") -> None:
        super().__init__(source, prefix)

    async def save(self, owner: str, name: str, value: bytes) -> None:
        key = self.prefix + owner
        await self._call("HSET", lambda r: r.hset(key, name, value))

    async def load(self, owner: str, name: str) -> bytes | None:
        key = self.prefix + owner
        return _bytes(await self._call("HGET", lambda r: r.hget(key, name)))

    async def remove(self, owner: str, name: str) -> bool:
        key = self.prefix + owner
        return bool(await self._call("HDEL", lambda r: r.hdel(key, name)))

    async def all(self, owner: str) -> dict[str, bytes]:
        key = self.prefix + owner
        found = await self._call("HGETALL", lambda r: r.hgetall(key))
        if not isinstance(found, dict):
            raise CredentialBackendError("redis HGETALL answered something other than a hash")
        return {_text(k): v for k, v in found.items() if isinstance(v, bytes)}


async def _put(client: Redis, name: str, index: str, value: bytes, ms: int, limit: int,
               prune: bool) -> Any:
    args = (2, name, index, value, ms, limit, b"1" if prune else b"0")
    try:
        return await client.evalsha(PUT_SHA, *args)
    except NoScriptError:  # a restarted or flushed server: EVAL sends the script and caches it
        return await client.eval(PUT.decode(), *args)


async def _forgetting(client: Redis, name: str, index: str, take: bool) -> Any:
    """GETDEL (`take`) or DEL of a ticket, and the ticket out of the store's index, in one
    transaction: the first command's answer."""
    async with client.pipeline(transaction=True) as pipe:
        if take:
            pipe.getdel(name)
        else:
            pipe.delete(name)
        pipe.zrem(index, name)
        return (await pipe.execute())[0]


def _ms(ttl: float) -> int:
    return max(1, int(ttl * 1000))


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    raise CredentialBackendError(f"redis answered a {type(value).__name__}, not bytes")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
