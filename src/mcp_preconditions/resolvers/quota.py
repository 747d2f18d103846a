"""`quota:NAME`: satisfied while the caller's bucket of `[quotas.NAME]` has a unit (docs/quotas.md).

`resolve` only looks (a capability grant's condition in a lenient guard; a strict one refuses
it). Units are taken by a `QuotaPlan`, compiled once per tool: the tool's last late stage
(late.py), run only after every other requirement of a call holds (otherwise no store is asked),
and it takes one unit from each of the tool's quotas or from none. Quota outcomes are marked
`transient`: a client never learns them.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, NamedTuple

from ..late import LateCall
from ..outcomes import Outcome, OutcomeMemo, Status
from ..principal import Identity
from ..requirements import body_of
from .base import CallContext
from .quota_store import NS, Bucket, Key, MemoryQuotaStore, QuotaStore, Rate, Waits

TAKEN = "has room: the call takes one unit"
NOT_TAKEN = "has room (no unit taken: the call was denied)"
LOOKED = "has room (no unit taken)"
_WHOSE = {"subject": "for this caller", "client": "for this client", "global": "for all callers"}


class CompiledQuota(NamedTuple):
    """One `[quotas.NAME]` as the resolver uses it."""

    name: str
    rate: Rate
    by: str  # "subject" | "client" | "global"
    store: QuotaStore
    per_seconds: float


def bucket_key(name: str, by: str, identity: Identity) -> Key | None:
    """The key of the bucket of quota `name` a call draws on; None when it cannot be known
    (authentication failed on a backend error). Callers a quota cannot tell apart (no verified
    token, or a token without the claim `by` names) share one bucket, "unidentified": never
    unlimited, and never another caller's bucket."""
    principal = identity.principal
    if principal is None or by == "global":
        return (name, "global") if by == "global" else None if identity.error else (
            name, "unidentified")
    claims = principal.claims
    if by == "subject":
        who = principal.subject  # `sub` (None without one: the "unidentified" bucket, SPEC §14)
    else:
        who = claims.get("client_id")
        if who.__class__ is not str:
            who = claims.get("azp")
    if who.__class__ is not str:
        return (name, "unidentified")
    issuer = claims.get("iss")
    return (name, by, issuer if issuer.__class__ is str else "", who)


class QuotaResolver:
    namespace = "quota"
    forms = ("quota:NAME, where the policy defines [quotas.NAME]",)
    order = 900  # a late stage, the last: a unit is taken by a call about to run (namespaces.py)
    not_a_condition = ("a quota is not a grant condition: put it in the tool's requirements, where "
                       "an allowed call takes a unit")

    def __init__(self, quotas: Mapping[str, CompiledQuota]) -> None:
        self.quotas = dict(quotas)
        self._outcomes = OutcomeMemo()

    def validate(self, requirement: str) -> str | None:
        name = body_of(requirement)
        if name in self.quotas:
            return None
        defined = ", ".join(repr(n) for n in self.quotas) or "none"
        return f"the policy defines no quota {name!r} (defined quotas: {defined})"

    def resolve(self, requirement: str, context: CallContext) -> Outcome | Awaitable[Outcome]:
        """Whether the caller's bucket has a unit now; takes nothing."""
        quota = self.quotas[body_of(requirement)]
        key = bucket_key(quota.name, quota.by, context.identity)
        if key is None:
            return unidentified(requirement)
        waits = quota.store.peek([(key, quota.rate)])
        if isinstance(waits, list):
            return self.outcome(requirement, quota, checked(waits, 1)[0], LOOKED)
        return self._peeked(requirement, quota, waits)

    async def _peeked(self, requirement: str, quota: CompiledQuota, pending: Awaitable[Waits]
                      ) -> Outcome:
        return self.outcome(requirement, quota, checked(await pending, 1)[0], LOOKED)

    def plan(self, requirements: Sequence[str]) -> QuotaPlan:
        """How to take from these quotas (a tool's, in its order), compiled once per snapshot."""
        return QuotaPlan(self, tuple(requirements), tuple(self.quotas[body_of(r)] for r in requirements))

    stage = plan  # a tool's quotas are its last late stage

    def outcome(self, requirement: str, quota: CompiledQuota, wait: int, room: str) -> Outcome:
        """A quota's outcome: satisfied (`room` says whether a unit was taken) when `wait` is 0,
        else unsatisfied with the seconds until it has room again."""
        if wait == 0:
            key = (requirement, room, quota.store.name)
            found = self._outcomes.lookup(key)
            return found if found is not None else self._outcomes.keep(key, Outcome(
                requirement, Status.SATISFIED, f"quota '{quota.name}' {room} ({quota.store.name})",
                transient=True))
        seconds = wait / NS
        return Outcome(requirement, Status.UNSATISFIED,
                       f"quota '{quota.name}' is used up ({quota.rate.calls} calls per "
                       f"{quota.per_seconds:g} s {_WHOSE[quota.by]}, {quota.store.name}); it has "
                       f"room again in {seconds:.3f} s", transient=True, retry_after_seconds=seconds)


def unidentified(requirement: str) -> Outcome:
    return Outcome(requirement, Status.ERROR, "the caller could not be identified (authentication "
                   "failed on a backend error), so its quota bucket is unknown", transient=True)


class QuotaPlan:
    """Takes one unit from each of a tool's quotas, or from none. Stores that answer at once
    (memory) are taken first, under their lock; a store that must be awaited (Redis) last, in one
    round trip for all its buckets; if it refuses or fails, the units taken before it go back.
    A late stage (late.py): `decide` takes, under the snapshot's lookup timeout."""

    namespace = "quota"
    timeout = None

    def __init__(self, resolver: QuotaResolver, requirements: tuple[str, ...],
                 quotas: tuple[CompiledQuota, ...]) -> None:
        self.resolver = resolver
        self.requirements = requirements
        self.quotas = quotas
        groups: dict[int, list[int]] = {}
        for i, quota in enumerate(quotas):
            groups.setdefault(id(quota.store), []).append(i)
        # Stores that can give units back come first (an awaited store is never refunded).
        self.groups = sorted((tuple(ix) for ix in groups.values()),
                             key=lambda ix: not _refundable(quotas[ix[0]].store))
        awaited = sum(1 for ix in self.groups if not _refundable(quotas[ix[0]].store))
        if awaited > 1:  # one Redis store per snapshot serves every redis quota
            raise ValueError("a tool's quotas may use at most one store that must be awaited")
        self._single = quotas[0] if len(quotas) == 1 else None
        # The memory store answers ints >= 0 by construction; any other store's answer is checked.
        store = self._single.store if self._single is not None else None
        self._memory = store if isinstance(store, MemoryQuotaStore) else None
        # Every quota had room and gave a unit: the same outcomes each time.
        self._taken = tuple(resolver.outcome(r, q, 0, TAKEN) for r, q in zip(requirements, quotas,
                                                                                  strict=True))

    def decide(self, call: LateCall) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        return self.take(call.identity)

    def release(self, call: LateCall) -> None:
        """Nothing to give back: the quotas are the last stage, and a refused take took nothing."""
        return None

    def take(self, identity: Identity) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        """One unit from each quota's bucket for this caller, or none (the outcomes say why)."""
        single = self._single
        if single is not None:  # the usual case: one quota
            key = bucket_key(single.name, single.by, identity)
            if key is None:
                return (unidentified(self.requirements[0]),)
            if self._memory is not None:  # the usual store: answered at once, ints >= 0
                wait = self._memory.take_one(key, single.rate)
                return self._taken if wait == 0 else self._refused([wait])
            buckets = [(key, single.rate)]
            waits = single.store.take(buckets)
            if not isinstance(waits, list):
                return self._awaited(buckets, [], [0], waits, 0)
            return self._taken if checked(waits, 1)[0] == 0 else self._refused(waits)
        buckets = []
        for quota in self.quotas:
            key = bucket_key(quota.name, quota.by, identity)
            if key is None:
                return tuple(map(unidentified, self.requirements))
            buckets.append((key, quota.rate))
        return self._take_groups(buckets)

    def _take_groups(self, buckets: list[Bucket], start: int = 0, taken: list[int] | None = None,
                     waits: list[int] | None = None
                     ) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        """Take from the groups from `start` on, in order; a refusal gives back what the groups
        before it took (`taken`), and the groups after it are only looked at."""
        taken = [] if taken is None else taken
        waits = [0] * len(buckets) if waits is None else waits
        for g in range(start, len(self.groups)):
            group = self.groups[g]
            answer = self.quotas[group[0]].store.take([buckets[i] for i in group])
            if not isinstance(answer, list):  # an awaited store (Redis: the last group)
                return self._awaited(buckets, taken, waits, answer, g)
            _fill(waits, group, answer)
            if any(answer):
                self._refund(buckets, taken)
                return self._looked(buckets, waits, self.groups[g + 1:])
            taken.append(g)
        return self._taken

    async def _awaited(self, buckets: list[Bucket], taken: list[int], waits: list[int],
                       pending: Awaitable[Waits], g: int) -> tuple[Outcome, ...]:
        """Group `g`'s take, awaited, then the groups after it; a refusal or a failure gives back
        what the groups before it took."""
        try:
            _fill(waits, self.groups[g], await pending)
        except BaseException:
            self._refund(buckets, taken)
            raise
        if any(waits[i] for i in self.groups[g]):
            self._refund(buckets, taken)
            rest = self._looked(buckets, waits, self.groups[g + 1:])
        else:
            rest = self._take_groups(buckets, g + 1, [*taken, g], waits)
        return rest if isinstance(rest, tuple) else await rest

    def _looked(self, buckets: list[Bucket], waits: list[int], groups: Sequence[tuple[int, ...]]
                ) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        """The outcomes of a refused call: the groups not asked yet are only looked at."""
        pending: list[tuple[tuple[int, ...], Awaitable[Waits]]] = []
        for group in groups:
            answer = self.quotas[group[0]].store.peek([buckets[i] for i in group])
            if isinstance(answer, list):
                _fill(waits, group, answer)
            else:
                pending.append((group, answer))
        return self._looked_later(waits, pending) if pending else self._refused(waits)

    async def _looked_later(self, waits: list[int],
                            pending: list[tuple[tuple[int, ...], Awaitable[Waits]]]
                            ) -> tuple[Outcome, ...]:
        for group, answer in pending:
            _fill(waits, group, await answer)
        return self._refused(waits)

    def _refused(self, waits: list[int]) -> tuple[Outcome, ...]:
        """The outcomes of a call that took nothing: used up, or had room (and gave nothing)."""
        return tuple(self.resolver.outcome(self.requirements[i], self.quotas[i], wait, NOT_TAKEN)
                     for i, wait in enumerate(waits))

    def _refund(self, buckets: list[Bucket], taken: list[int]) -> None:
        for g in taken:
            group = self.groups[g]
            self.quotas[group[0]].store.refund([buckets[i] for i in group])


def checked(answer: Any, count: int) -> Waits:
    """A store's answer when it is one wait (an int >= 0) per bucket; anything else raises, and the
    guard makes it `error`: a store's garbage never allows a call."""
    if answer.__class__ is list and len(answer) == count:
        for wait in answer:
            if wait.__class__ is not int or wait < 0:
                break
        else:
            return answer
    raise TypeError(f"a quota store answered {str(answer)[:80]}, not one wait (an int >= 0) per "
                    "bucket")


def _fill(waits: list[int], group: tuple[int, ...], answer: Any) -> None:
    for i, wait in zip(group, checked(answer, len(group)), strict=True):
        waits[i] = wait


def _refundable(store: Any) -> bool:
    """A store that answers `take` at once (memory, fixed); an awaited one (Redis) comes last."""
    return not inspect.iscoroutinefunction(getattr(store, "take", None))
