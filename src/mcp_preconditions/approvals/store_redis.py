"""Approval requests in Redis, shared by every replica. Each operation is one optimistic transaction
(WATCH, read, apply the lifecycle function, MULTI/EXEC; retried when another replica changed the
request meanwhile), on Redis's own clock: two replicas racing to use one approval use it once.

The connection is the policy's `[state.redis]` (RedisStateSource: explicit timeouts, every redis
error mapped to BackendError). Keys hold a request ID or a SHA-256, never a subject or an argument.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from ..errors import BackendError
from ..policy.model import Redis as RedisSettings
from ..resolvers.state_redis import RedisStateSource
from . import lifecycle
from .lifecycle import ApprovalRequest, Binding, Decision, Event, Party, Refusal, State
from .store import KEEP_SECONDS, Changed, Cursor, Transition, crowded, dropped, new_id, pending

PREFIX = "mcp-preconditions:approval:"
# Optimistic transactions retried this many times when other replicas keep changing the same keys;
# then the operation fails (BackendError: the call is denied, never allowed).
ATTEMPTS = 16
BACKOFF_SECONDS = 0.001
T = TypeVar("T")


class RedisApprovalStore:
    """Requests as JSON under `PREFIX request:ID`, an approver's latest request of a binding under
    `PREFIX binding:KEY`, each caller's requests in a sorted set by creation (`PREFIX caller:HASH`:
    the per-caller bounds, store.py's `crowded`), and approvers' requests waiting in a sorted set by
    deadline (`PREFIX waiting`: the approval pages). `clock` (seconds) replaces Redis's TIME, for
    tests only."""

    name = "redis"

    def __init__(self, connection: RedisStateSource, prefix: str = PREFIX, *,
                 clock: Callable[[], float] | None = None, keep_seconds: float = KEEP_SECONDS) -> None:
        self.connection = connection
        self.prefix = prefix
        self._clock = clock
        self._keep = keep_seconds
        # One caller's requests are made one at a time in this process: each watches the caller's
        # set, and many at once would mostly collide (other replicas still may: then retried).
        self._turns = Turns()

    @classmethod
    def from_policy(cls, settings: RedisSettings) -> RedisApprovalStore:
        """The store on `[state.redis]`'s connection (shared with state lookups and quotas)."""
        return cls(RedisStateSource.from_policy(settings))

    def __repr__(self) -> str:
        return f"RedisApprovalStore(prefix={self.prefix!r})"

    # -- keys --------------------------------------------------------------------------------------
    def _request_key(self, request_id: str) -> str:
        return f"{self.prefix}request:{request_id}"

    def _binding_key(self, binding: Binding) -> str:
        return f"{self.prefix}binding:{binding.key}"

    def _caller_key(self, caller: Party | None) -> str:
        who = json.dumps(caller.to_dict() if caller else None, sort_keys=True)
        return f"{self.prefix}caller:{hashlib.sha256(who.encode()).hexdigest()[:32]}"

    # -- operations --------------------------------------------------------------------------------
    async def open(self, binding: Binding, wait: float, lifetime: float) -> Changed:
        async with self._turns.turn(self._caller_key(binding.caller)):
            return await self._open(binding, wait, lifetime)

    async def _open(self, binding: Binding, wait: float, lifetime: float) -> Changed:
        async def attempt(pipe: Pipeline) -> Changed:
            bkey = self._binding_key(binding)
            await pipe.watch(bkey)
            now = await self._now(pipe)
            made: tuple[State, ...] = ()
            found_id = await pipe.get(bkey)
            found = None
            if found_id is not None:
                await pipe.watch(self._request_key(_text(found_id)))
                found = await self._read(pipe, _text(found_id))
            if found is not None:
                found, made = lifecycle.aged(found, now)
                if found.blocks:
                    return Changed(found, made)
            fresh = lifecycle.requested(new_id(), binding, False, now, wait, lifetime)
            dropped = await self._admit(pipe, fresh, now, [found] if made and found else [])
            return Changed(fresh, (*made, State.REQUESTED), dropped)
        return await self._transaction("open", attempt)

    async def ask(self, request_id: str, binding: Binding, wait: float, lifetime: float
                  ) -> Changed | Refusal:
        async with self._turns.turn(self._caller_key(binding.caller)):
            return await self._ask(request_id, binding, wait, lifetime)

    async def _ask(self, request_id: str, binding: Binding, wait: float, lifetime: float
                   ) -> Changed | Refusal:
        async def attempt(pipe: Pipeline) -> Changed | Refusal:
            await pipe.watch(self._request_key(request_id))
            now = await self._now(pipe)
            found = await self._read(pipe, request_id)
            if found is None:
                fresh = lifecycle.requested(request_id, binding, True, now, wait, lifetime)
                return Changed(fresh, (State.REQUESTED,), await self._admit(pipe, fresh, now, []))
            if not found.self_approval or found.binding != binding:
                return "unbound"
            found, made = lifecycle.aged(found, now)
            if made:  # counted once: kept as it now stands
                pipe.multi()  # type: ignore[no-untyped-call]
                self._write(pipe, found, now)
                await pipe.execute()
            return Changed(found, made)
        return await self._transaction("ask", attempt)

    async def _admit(self, pipe: Pipeline, fresh: ApprovalRequest, now: float,
                     also: list[ApprovalRequest]) -> tuple[Event, ...]:
        """Write `fresh` (and `also`) in the transaction `pipe` watches, dropping what its caller
        keeps beyond the bounds (`crowded`); the results the drops count."""
        ckey = self._caller_key(fresh.binding.caller)
        await pipe.watch(ckey)
        ids = [_text(i) for i in await pipe.zrange(ckey, 0, -1)]
        mine, gone = await self._read_many(pipe, ids, watch=True)
        drop = crowded(mine, now)
        unbind = []
        for old in drop:
            if not old.self_approval:
                bkey = self._binding_key(old.binding)
                await pipe.watch(bkey)
                if _text(await pipe.get(bkey) or "") == old.id:
                    unbind.append(bkey)
        pipe.multi()  # type: ignore[no-untyped-call]
        for request in also:
            self._write(pipe, request, now)
        if drop or unbind:
            pipe.delete(*(self._request_key(r.id) for r in drop), *unbind)
        if drop or gone:
            pipe.zrem(ckey, *gone, *(r.id for r in drop))
        if drop:
            pipe.zrem(self.prefix + "waiting", *(r.id for r in drop))
        self._write(pipe, fresh, now)
        if not fresh.self_approval:
            pipe.set(self._binding_key(fresh.binding), fresh.id, px=self._ttl_ms(fresh, now))
            pipe.zadd(self.prefix + "waiting", {fresh.id: fresh.expires_at})
        pipe.zadd(ckey, {fresh.id: fresh.created_at})
        kept = [r for r in mine if r not in drop] + [fresh]
        pipe.pexpire(ckey, max(self._ceiling_ms(r, now) for r in kept))
        pipe.zremrangebyscore(self.prefix + "waiting", "-inf", now)  # outlived: no longer listed
        await pipe.execute()
        return tuple(event for old in drop for event in dropped(old, now))

    async def decide(self, request_id: str, decision: Decision, approver: Party | None
                     ) -> Changed | Refusal:
        return await self._apply("decide", request_id,
                                 lambda r, now: lifecycle.decide(r, decision, approver, now))

    async def use(self, request_id: str, binding: Binding) -> Changed | Refusal:
        return await self._apply("use", request_id, lambda r, now: lifecycle.use(r, binding, now))

    async def release(self, request_id: str) -> Changed | Refusal:
        return await self._apply("release", request_id, lifecycle.release)

    async def expire(self, request_id: str) -> Changed | Refusal:
        return await self._apply("expire", request_id, lifecycle.expire)

    async def _apply(self, what: str, request_id: str, transition: Transition) -> Changed | Refusal:
        async def attempt(pipe: Pipeline) -> Changed | Refusal:
            await pipe.watch(self._request_key(request_id))
            now = await self._now(pipe)
            request = await self._read(pipe, request_id)
            if request is None:
                return "unknown"
            stepped = transition(request, now)
            if isinstance(stepped, str):
                return stepped
            changed = Changed(*stepped)
            if changed.request != request:
                bkey = self._binding_key(request.binding)
                await pipe.watch(bkey)
                current = await pipe.get(bkey)
                pipe.multi()  # type: ignore[no-untyped-call]
                self._write(pipe, changed.request, now)
                if current is not None and _text(current) == request_id:  # an approval outlives
                    pipe.pexpire(bkey, self._ttl_ms(changed.request, now))  # its request's wait
                if changed.request.state is not State.REQUESTED:  # no longer waiting
                    pipe.zrem(self.prefix + "waiting", request_id)
                await pipe.execute()
            return changed
        return await self._transaction(what, attempt)

    async def get(self, request_id: str) -> ApprovalRequest | None:
        async def read(client: Redis) -> ApprovalRequest | None:
            now = await self._now(client)
            request = await self._read(client, request_id)
            return None if request is None else lifecycle.aged(request, now)[0]
        answer: ApprovalRequest | None = await self.connection.call("approval get", read)
        return answer

    async def waiting(self, limit: int = 100, after: Cursor | None = None) -> list[ApprovalRequest]:
        async def read(client: Redis) -> list[ApprovalRequest]:
            now = await self._now(client)
            low = f"({now}" if after is None or after[0] < now else repr(after[0])
            found: list[ApprovalRequest] = []
            offset = 0
            while len(found) < limit:
                batch: list[Any] = await client.zrangebyscore(
                    self.prefix + "waiting", low, "+inf", offset, limit, withscores=True)
                if not batch:
                    break
                offset += len(batch)
                ids = [_text(member) for member, score in batch
                       if after is None or (float(score), _text(member)) > after]
                mine, _ = await self._read_many(client, ids)
                found += [r for r in mine if pending(r, now)]
            return found[:limit]
        answer: list[ApprovalRequest] = await self.connection.call("approval waiting", read)
        return answer

    async def pending_of(self, caller: Party) -> list[ApprovalRequest]:
        async def read(client: Redis) -> list[ApprovalRequest]:
            now = await self._now(client)
            ids = [_text(i) for i in await client.zrange(self._caller_key(caller), 0, -1)]
            mine, _ = await self._read_many(client, ids)
            return sorted((r for r in mine if not r.self_approval and pending(r, now)),
                          key=lambda r: (r.expires_at, r.id))
        answer: list[ApprovalRequest] = await self.connection.call("approval pending", read)
        return answer

    # -- plumbing ----------------------------------------------------------------------------------
    async def _transaction(self, what: str, attempt: Callable[[Pipeline], Awaitable[T]]) -> T:
        async def run(client: Redis) -> T:
            for tried in range(ATTEMPTS):
                async with client.pipeline(transaction=True) as pipe:
                    try:
                        return await attempt(pipe)
                    except WatchError:
                        pass  # another call or replica changed a watched key: read again
                # after a random pause: calls of one caller that collide (its set of requests)
                # spread out instead of colliding again at once
                await asyncio.sleep(random.uniform(0, BACKOFF_SECONDS * 2 ** min(tried, 4)))
            raise BackendError(f"redis approval {what}: still contended after {ATTEMPTS} attempts")
        answer: T = await self.connection.call(f"approval {what}", run)
        return answer

    async def _now(self, pipe: Pipeline | Redis) -> float:
        if self._clock is not None:
            return self._clock()
        seconds, micros = await pipe.time()
        return int(seconds) + int(micros) / 1e6

    async def _read(self, pipe: Pipeline | Redis, request_id: str) -> ApprovalRequest | None:
        raw = await pipe.get(self._request_key(request_id))
        return None if raw is None else _parsed(request_id, raw)

    async def _read_many(self, pipe: Pipeline | Redis, ids: list[str], watch: bool = False
                         ) -> tuple[list[ApprovalRequest], list[str]]:
        """The requests of `ids` (in one MGET; watched first in a transaction), and the IDs whose
        requests are gone (Redis forgot them)."""
        if not ids:
            return [], []
        keys = [self._request_key(i) for i in ids]
        if watch:
            assert isinstance(pipe, Pipeline)
            await pipe.watch(*keys)
        raws = await pipe.mget(keys)
        found = [_parsed(i, raw) for i, raw in zip(ids, raws, strict=True) if raw is not None]
        return found, [i for i, raw in zip(ids, raws, strict=True) if raw is None]

    def _write(self, pipe: Pipeline, request: ApprovalRequest, now: float) -> None:
        pipe.set(self._request_key(request.id), json.dumps(request.to_dict()),
                 px=self._ttl_ms(request, now))

    def _ttl_ms(self, request: ApprovalRequest, now: float) -> int:
        """A request is kept `keep_seconds` after its state ends, then Redis forgets it."""
        return max(1, math.ceil((request.expires_at - now + self._keep) * 1000))

    def _ceiling_ms(self, request: ApprovalRequest, now: float) -> int:
        """The longest a request can be kept, whatever becomes of it (an approval given at the
        last moment holds `lifetime` more): its caller's set lives that long."""
        later = request.lifetime if request.state is State.REQUESTED else 0.0
        return max(1, math.ceil((request.expires_at + later - now + self._keep) * 1000))


class Turns:
    """One holder at a time per key, in this process; a key nobody holds or waits for is not kept."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._locks[key][1] - 1
            if users:
                self._locks[key] = (lock, users)
            else:
                del self._locks[key]


def _parsed(request_id: str, raw: Any) -> ApprovalRequest:
    try:
        return ApprovalRequest.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:  # garbage under our key: never trusted
        raise BackendError(f"redis approval request {request_id[:8]}… is not readable: "
                           f"{type(exc).__name__}") from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
