"""The stores of `stores.py` in Redis (the `redis` extra; the policy's `[state.redis]` connection),
so that replicas share connected accounts and flows: a link opened on one replica, or a callback
arriving at another, finds its ticket. Single use is atomic (GETDEL); tokens are one hash per owner.

Every redis failure is a CredentialBackendError (the call is `error`, never allowed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from ..errors import BackendError, CredentialBackendError
from ..resolvers.state_redis import RedisStateSource

DEFAULT_PREFIX = "mcp-preconditions:credentials:"


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
    """Tickets as keys with a time to live; `take` is GETDEL, so one reader wins."""

    def __init__(self, source: RedisStateSource, prefix: str = DEFAULT_PREFIX + "ticket:") -> None:
        super().__init__(source, prefix)

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        name, ms = self.prefix + key, max(1, int(ttl * 1000))
        await self._call("SET", lambda r: r.set(name, value, px=ms))

    async def get(self, key: str) -> bytes | None:
        name = self.prefix + key
        return _bytes(await self._call("GET", lambda r: r.get(name)))

    async def take(self, key: str) -> bytes | None:
        name = self.prefix + key
        return _bytes(await self._call("GETDEL", lambda r: r.getdel(name)))

    async def delete(self, key: str) -> None:
        name = self.prefix + key
        await self._call("DEL", lambda r: r.delete(name))


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


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    raise CredentialBackendError(f"redis answered a {type(value).__name__}, not bytes")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
