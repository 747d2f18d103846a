"""Where approval requests live: the store protocol both stores answer, and the memory store (one
process). Every operation is atomic: it reads a request, applies one function of lifecycle.py and
writes the result, so two calls racing on one approval use it once. The Redis store (shared by
replicas) is store_redis.py.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ..errors import BackendError
from . import lifecycle
from .binding import Binding, Party
from .lifecycle import ApprovalRequest, Decision, Refusal, State

# A caller may have this many requests waiting at once (per store): a greedy caller cannot fill the
# store and lock everyone else out of asking.
MAX_WAITING_PER_CALLER = 20
# How long a request that ended (used, expired, refused) is kept, so a late page or POST says what
# became of it, and a late call counts its expiry.
KEEP_SECONDS = 3600.0


def new_id() -> str:
    """A request ID: 144 random bits, URL-safe (it is the last segment of `/approvals/ID`)."""
    return secrets.token_urlsafe(18)


class Changed(NamedTuple):
    """A request after an operation, and the results the operation made (counted once each)."""

    request: ApprovalRequest
    made: tuple[State, ...]


class Busy(NamedTuple):
    """`open` made no request: the caller has `MAX_WAITING_PER_CALLER` waiting already."""

    waiting: int


class ApprovalStore(Protocol):
    """Approval requests, by ID and by binding. Every method is atomic and raises BackendError
    when the store cannot answer (the guard makes that `error`: fail closed)."""

    name: str

    async def open(self, binding: Binding, self_approval: bool, wait: float, lifetime: float
                   ) -> Changed | Busy:
        """The request that answers for `binding` now (waiting, approved, or an approver's
        refusal), else a new one, waiting `wait` seconds for a decision."""
        ...

    async def decide(self, request_id: str, decision: Decision, approver: Party | None
                     ) -> Changed | Refusal: ...

    async def use(self, request_id: str, binding: Binding) -> Changed | Refusal: ...

    async def release(self, request_id: str) -> Changed | Refusal: ...

    async def expire(self, request_id: str) -> Changed | Refusal: ...

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """The request as of now (an outlived one shows as expired), or None when unknown."""
        ...

    async def waiting(self, limit: int = 100) -> list[ApprovalRequest]:
        """Requests waiting for an approver (not `self` ones), soonest to expire first."""
        ...


Transition = Callable[[ApprovalRequest, float], "lifecycle.Step | Refusal"]


class MemoryApprovalStore:
    """Requests in this process, under one lock; at most `max_requests` kept (then BackendError:
    a full store refuses new requests, it never drops a waiting one)."""

    name = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.time, max_requests: int = 10_000,
                 keep_seconds: float = KEEP_SECONDS) -> None:
        self._clock = clock
        self._max = max_requests
        self._keep = keep_seconds
        self._lock = threading.Lock()
        self._requests: dict[str, ApprovalRequest] = {}
        self._bindings: dict[str, str] = {}  # binding key -> the ID of its latest request

    async def open(self, binding: Binding, self_approval: bool, wait: float, lifetime: float
                   ) -> Changed | Busy:
        with self._lock:
            now = self._clock()
            made: tuple[State, ...] = ()
            found = self._requests.get(self._bindings.get(binding.key, ""))
            if found is not None:
                found, made = lifecycle.aged(found, now)
                self._requests[found.id] = found
                if found.blocks:
                    return Changed(found, made)
            waiting = self._waiting_for(binding, now)
            if waiting >= MAX_WAITING_PER_CALLER:  # anonymous callers count as one
                return Busy(waiting)
            self._make_room(now)
            fresh = lifecycle.requested(new_id(), binding, self_approval, now, wait, lifetime)
            self._requests[fresh.id] = fresh
            self._bindings[binding.key] = fresh.id
            return Changed(fresh, (*made, State.REQUESTED))

    def _waiting_for(self, binding: Binding, now: float) -> int:
        return sum(1 for r in self._requests.values() if r.binding.caller == binding.caller
                   and r.state is State.REQUESTED and now < r.expires_at)

    def _make_room(self, now: float) -> None:
        if len(self._requests) < self._max:
            return
        for request in list(self._requests.values()):
            if request.expires_at + self._keep <= now:
                del self._requests[request.id]
                if self._bindings.get(request.binding.key) == request.id:
                    del self._bindings[request.binding.key]
        if len(self._requests) >= self._max:
            raise BackendError(f"the approval store is full ({self._max} requests kept)")

    async def decide(self, request_id: str, decision: Decision, approver: Party | None
                     ) -> Changed | Refusal:
        return self._apply(request_id, lambda r, now: lifecycle.decide(r, decision, approver, now))

    async def use(self, request_id: str, binding: Binding) -> Changed | Refusal:
        return self._apply(request_id, lambda r, now: lifecycle.use(r, binding, now))

    async def release(self, request_id: str) -> Changed | Refusal:
        return self._apply(request_id, lifecycle.release)

    async def expire(self, request_id: str) -> Changed | Refusal:
        return self._apply(request_id, lifecycle.expire)

    def _apply(self, request_id: str, transition: Transition) -> Changed | Refusal:
        with self._lock:
            request = self._requests.get(request_id)
            if request is None:
                return "unknown"
            stepped = transition(request, self._clock())
            if isinstance(stepped, str):
                return stepped
            self._requests[request_id] = stepped[0]
            return Changed(*stepped)

    async def get(self, request_id: str) -> ApprovalRequest | None:
        with self._lock:
            request = self._requests.get(request_id)
            return None if request is None else lifecycle.aged(request, self._clock())[0]

    async def waiting(self, limit: int = 100) -> list[ApprovalRequest]:
        with self._lock:
            now = self._clock()
            found = [r for r in self._requests.values() if r.state is State.REQUESTED
                     and not r.self_approval and now < r.expires_at]
        return sorted(found, key=lambda r: (r.expires_at, r.id))[:limit]
