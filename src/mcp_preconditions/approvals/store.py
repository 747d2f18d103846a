"""Where approval requests live: the store protocol both stores answer, and the memory store (one
process). Every operation is atomic: it reads a request, applies one function of lifecycle.py and
writes the result, so two calls racing on one approval use it once. The Redis store (shared by
replicas) is store_redis.py.

Both stores bound how many requests one caller keeps (SPEC §14, "Bounds that no single caller can
exhaust"), with the pure functions below, applied when a caller's request is made: at most
`MAX_PENDING_PER_CALLER` waiting for a decision (the oldest dropped to make room), and at most
`MAX_ENDED_PER_CALLER` that ended (used, expired, a declined question) kept besides, so a late
page or retry can say what became of them. An approver's decision that still holds (an approval
not yet used, a refusal that stands) is not dropped: only approvers make those.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

from ..errors import BackendError
from . import lifecycle
from .lifecycle import ApprovalRequest, Binding, Decision, Event, Party, Refusal, State

# How long a request that ended (used, expired, refused) is kept, so a late page or POST says what
# became of it, and a late call counts its expiry (each caller keeps at most
# MAX_ENDED_PER_CALLER of them).
KEEP_SECONDS = 3600.0


MAX_PENDING_PER_CALLER = 16
MAX_ENDED_PER_CALLER = 16


def pending(request: ApprovalRequest, now: float) -> bool:
    """Waiting for a decision (an approver's, or the caller's answer to a question)."""
    return request.state is State.REQUESTED and now < request.expires_at


def standing(request: ApprovalRequest, now: float) -> bool:
    """An approver's decision that still holds: only approvers make these."""
    return not request.self_approval and request.state in (State.APPROVED, State.REFUSED) \
        and now < request.expires_at


def crowded(mine: Iterable[ApprovalRequest], now: float) -> list[ApprovalRequest]:
    """Which of one caller's requests to drop before one more of theirs is made: the oldest
    waiting ones beyond `MAX_PENDING_PER_CALLER - 1`, and the oldest ended ones beyond
    `MAX_ENDED_PER_CALLER`. Oldest by `created_at`, then by ID: only requests of one caller
    made at the same instant tie (one at a time under the memory store's lock, or in Redis
    transactions watching the caller's set on Redis's clock in microseconds: a real clock all
    but never repeats itself there; a test's frozen clock does, and its model breaks ties alike)."""
    ordered = sorted(mine, key=lambda r: (r.created_at, r.id))
    waiting = [r for r in ordered if pending(r, now)]
    ended = [r for r in ordered if not pending(r, now) and not standing(r, now)]
    return [*waiting[:max(0, len(waiting) - MAX_PENDING_PER_CALLER + 1)],
            *ended[:max(0, len(ended) - MAX_ENDED_PER_CALLER)]]


def dropped(request: ApprovalRequest, now: float) -> tuple[Event, ...]:
    """What dropping `request` counts: a waiting one expired now (nobody can decide it any more);
    an outlived one its expiry, which nothing counted yet."""
    if pending(request, now):
        return ((request.binding.approval, State.EXPIRED),)
    _, made = lifecycle.aged(request, now)
    return tuple((request.binding.approval, state) for state in made)


def new_id() -> str:
    """A request ID: 144 random bits, URL-safe (it is the last segment of `/approvals/ID`)."""
    return secrets.token_urlsafe(18)


class Changed(NamedTuple):
    """A request after an operation, the results the operation made (counted once each), and
    those of the caller's requests it dropped to make room (`crowded`), by approval."""

    request: ApprovalRequest
    made: tuple[State, ...]
    dropped: tuple[Event, ...] = ()


class ApprovalStore(Protocol):
    """Approval requests, by ID and by binding. Every method is atomic and raises BackendError
    when the store cannot answer (the guard makes that `error`: fail closed). Making a request
    drops the caller's oldest ones beyond `bounds` (reported in `Changed.dropped`)."""

    name: str

    async def open(self, binding: Binding, wait: float, lifetime: float) -> Changed:
        """An approver's request: the one that answers for `binding` now (waiting, approved, or
        refused), else a new one, waiting `wait` seconds for a decision."""
        ...

    async def ask(self, request_id: str, binding: Binding, wait: float, lifetime: float
                  ) -> Changed | Refusal:
        """A `self` question: the request `request_id` as it stands, else a new one under that ID
        (the plan's question IDs name the call that asks: plan.py), waiting `wait` seconds for
        the caller's answer; "unbound" when that ID is another call's."""
        ...

    async def decide(self, request_id: str, decision: Decision, approver: Party | None
                     ) -> Changed | Refusal: ...

    async def use(self, request_id: str, binding: Binding) -> Changed | Refusal: ...

    async def release(self, request_id: str) -> Changed | Refusal: ...

    async def expire(self, request_id: str) -> Changed | Refusal: ...

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """The request as of now (an outlived one shows as expired), or None when unknown."""
        ...

    async def waiting(self, limit: int = 100, after: Cursor | None = None) -> list[ApprovalRequest]:
        """Approvers' requests waiting for a decision (no `self` question), soonest to expire
        first, those after `after` (the (expires_at, id) of the last one of a previous batch)."""
        ...

    async def pending_of(self, caller: Party) -> list[ApprovalRequest]:
        """`caller`'s own approvers' requests waiting for a decision, soonest to expire first."""
        ...


Cursor = tuple[float, str]
Transition = Callable[[ApprovalRequest, float], "lifecycle.Step | Refusal"]


class MemoryApprovalStore:
    """Requests in this process, under one lock; at most `max_requests` kept: past it, those that
    ended go first (oldest first), then BackendError (a full store refuses new requests, it never
    drops another caller's waiting one)."""

    name = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.time, max_requests: int = 10_000,
                 keep_seconds: float = KEEP_SECONDS) -> None:
        self._clock = clock
        self._max = max_requests
        self._keep = keep_seconds
        self._lock = threading.Lock()
        self._requests: dict[str, ApprovalRequest] = {}  # in the order they were made
        self._bindings: dict[str, str] = {}  # an approver's binding key -> its latest request ID
        self._callers: dict[Party | None, dict[str, None]] = {}  # each caller's request IDs

    async def open(self, binding: Binding, wait: float, lifetime: float) -> Changed:
        with self._lock:
            now = self._clock()
            made: tuple[State, ...] = ()
            found = self._requests.get(self._bindings.get(binding.key, ""))
            if found is not None:
                found, made = lifecycle.aged(found, now)
                self._requests[found.id] = found
                if found.blocks:
                    return Changed(found, made)
            fresh = lifecycle.requested(new_id(), binding, False, now, wait, lifetime)
            dropped = self._admit(fresh, now)
            self._bindings[binding.key] = fresh.id
            return Changed(fresh, (*made, State.REQUESTED), dropped)

    async def ask(self, request_id: str, binding: Binding, wait: float, lifetime: float
                  ) -> Changed | Refusal:
        with self._lock:
            now = self._clock()
            found = self._requests.get(request_id)
            if found is not None:
                if not found.self_approval or found.binding != binding:
                    return "unbound"
                found, made = lifecycle.aged(found, now)
                self._requests[found.id] = found
                return Changed(found, made)
            fresh = lifecycle.requested(request_id, binding, True, now, wait, lifetime)
            return Changed(fresh, (State.REQUESTED,), self._admit(fresh, now))

    def _admit(self, fresh: ApprovalRequest, now: float) -> tuple[Event, ...]:
        """Keep `fresh`, dropping what its caller keeps beyond the bounds, and making room."""
        mine = self._callers.setdefault(fresh.binding.caller, {})
        events: list[Event] = []
        for old in crowded((self._requests[i] for i in mine), now):
            events += dropped(old, now)
            self._forget(old)
        self._make_room(now)
        self._requests[fresh.id] = fresh
        self._callers.setdefault(fresh.binding.caller, {})[fresh.id] = None
        return tuple(events)

    def _make_room(self, now: float) -> None:
        if len(self._requests) < self._max:
            return
        for request in list(self._requests.values()):  # outlived their keeping, then ended ones
            if request.expires_at + self._keep <= now:
                self._forget(request)
        for request in list(self._requests.values()):
            if len(self._requests) < self._max:
                return
            if not pending(request, now) and not standing(request, now):
                self._forget(request)
        if len(self._requests) >= self._max:
            raise BackendError(f"the approval store is full ({self._max} requests kept)")

    def _forget(self, request: ApprovalRequest) -> None:
        del self._requests[request.id]
        if self._bindings.get(request.binding.key) == request.id:
            del self._bindings[request.binding.key]
        mine = self._callers.get(request.binding.caller)
        if mine is not None:
            mine.pop(request.id, None)
            if not mine:
                del self._callers[request.binding.caller]

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

    async def waiting(self, limit: int = 100, after: Cursor | None = None) -> list[ApprovalRequest]:
        with self._lock:
            now = self._clock()
            found = [r for r in self._requests.values() if not r.self_approval
                     and pending(r, now) and (after is None or (r.expires_at, r.id) > after)]
        return sorted(found, key=lambda r: (r.expires_at, r.id))[:limit]

    async def pending_of(self, caller: Party) -> list[ApprovalRequest]:
        with self._lock:
            now = self._clock()
            found = [self._requests[i] for i in self._callers.get(caller, {})]
        return sorted((r for r in found if not r.self_approval and pending(r, now)),
                      key=lambda r: (r.expires_at, r.id))
