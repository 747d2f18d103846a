"""Approval requests in Redis, shared by every replica. Each operation is one optimistic transaction
(WATCH, read, apply the lifecycle function, MULTI/EXEC; retried when another replica changed the
request meanwhile), on Redis's own clock: two replicas racing to use one approval use it once.

The connection is the policy's `[state.redis]` (RedisStateSource: explicit timeouts, every redis
error mapped to BackendError). Keys hold a request ID or a SHA-256, never a subject or an argument.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from ..errors import BackendError
from ..policy.model import Redis as RedisSettings
from ..resolvers.state_redis import RedisStateSource
from . import lifecycle
from .binding import Binding, Party
from .lifecycle import ApprovalRequest, Decision, Refusal, State
from .store import KEEP_SECONDS, MAX_WAITING_PER_CALLER, Busy, Changed, Transition, new_id

PREFIX = "mcp-preconditions:approval:"
# Optimistic transactions retried this many times when other replicas keep changing the same keys;
# then the operation fails (BackendError: the call is denied, never allowed).
ATTEMPTS = 16
T = TypeVar("T")


class RedisApprovalStore:
    """Requests as JSON under `PREFIX request:ID`, the latest request of a binding under `PREFIX
    binding:KEY`, and the waiting ones in sorted sets by deadline (`PREFIX waiting` for the approval
    page, `PREFIX waiting:CALLER` for the per-caller bound). `clock` (seconds) replaces Redis's
    TIME, for tests only."""

    name = "redis"

    def __init__(self, connection: RedisStateSource, prefix: str = PREFIX, *,
                 clock: Callable[[], float] | None = None, keep_seconds: float = KEEP_SECONDS) -> None:
        self.connection = connection
        self.prefix = prefix
        self._clock = clock
        self._keep = keep_seconds

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

    def _caller_key(self, binding: Binding) -> str:
        who = json.dumps(binding.caller.to_dict() if binding.caller else None, sort_keys=True)
        return f"{self.prefix}waiting:{hashlib.sha256(who.encode()).hexdigest()[:32]}"

    # -- operations --------------------------------------------------------------------------------
    async def open(self, binding: Binding, self_approval: bool, wait: float, lifetime: float
                   ) -> Changed | Busy:
        async def attempt(pipe: Pipeline) -> Changed | Busy:
            bkey, ckey = self._binding_key(binding), self._caller_key(binding)
            await pipe.watch(bkey, ckey)
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
            await pipe.zremrangebyscore(ckey, "-inf", now)
            waiting = int(await pipe.zcard(ckey))
            if waiting >= MAX_WAITING_PER_CALLER:
                return Busy(waiting)
            fresh = lifecycle.requested(new_id(), binding, self_approval, now, wait, lifetime)
            pipe.multi()  # type: ignore[no-untyped-call]
            if made and found is not None:
                self._write(pipe, found, now)
            self._write(pipe, fresh, now)
            pipe.set(bkey, fresh.id, px=self._ttl_ms(fresh, now))
            pipe.zadd(ckey, {fresh.id: fresh.expires_at})
            pipe.pexpire(ckey, self._ttl_ms(fresh, now))
            if not self_approval:
                pipe.zadd(self.prefix + "waiting", {fresh.id: fresh.expires_at})
            pipe.zremrangebyscore(self.prefix + "waiting", "-inf", now)  # outlived: no longer listed
            await pipe.execute()
            return Changed(fresh, (*made, State.REQUESTED))
        return await self._transaction("open", attempt)

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
                    pipe.zrem(self._caller_key(request.binding), request_id)
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

    async def waiting(self, limit: int = 100) -> list[ApprovalRequest]:
        async def read(client: Redis) -> list[ApprovalRequest]:
            now = await self._now(client)
            ids = await client.zrangebyscore(self.prefix + "waiting", f"({now}", "+inf", 0, limit)
            found = [await self._read(client, _text(i)) for i in ids]
            return [r for r in found if r is not None and lifecycle.aged(r, now)[0].state
                    is State.REQUESTED]
        answer: list[ApprovalRequest] = await self.connection.call("approval waiting", read)
        return answer

    # -- plumbing ----------------------------------------------------------------------------------
    async def _transaction(self, what: str, attempt: Callable[[Pipeline], Awaitable[T]]) -> T:
        async def run(client: Redis) -> T:
            for _ in range(ATTEMPTS):
                async with client.pipeline(transaction=True) as pipe:
                    try:
                        return await attempt(pipe)
                    except WatchError:
                        continue  # another replica changed a watched key: read again
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
        if raw is None:
            return None
        try:
            return ApprovalRequest.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:  # garbage under our key: never trusted
            raise BackendError(f"redis approval request {request_id[:8]}… is not readable: "
                               f"{type(exc).__name__}") from None

    def _write(self, pipe: Pipeline, request: ApprovalRequest, now: float) -> None:
        pipe.set(self._request_key(request.id), json.dumps(request.to_dict()),
                 px=self._ttl_ms(request, now))

    def _ttl_ms(self, request: ApprovalRequest, now: float) -> int:
        """A request is kept `keep_seconds` after its state ends, then Redis forgets it."""
        return max(1, math.ceil((request.expires_at - now + self._keep) * 1000))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
