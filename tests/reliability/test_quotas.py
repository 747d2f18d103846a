"""The reliability suite for quotas: storms of concurrent calls over threads and asyncio through
every path into the guard, in memory, and quota stores that fail every way a store can (a Redis
address where nothing listens or nothing answers, a store that raises, hangs or answers garbage).
The count that matters: calls allowed beyond the limit, or while the store failed, are "wrongly
allowed": it must stay 0. A real redis-server's storms: test_quotas_redis.py (interop).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

from mcp_preconditions import Credentials, Decision, Guard, Identity, LiveSources, Principal, parse_policy
from mcp_preconditions.resolvers.quota_store import Bucket, Waits

from .faults import black_hole, closed_port
from .tally import TALLY

SUITE = "quotas"
LIMIT = 25
# The storms that count the limit exactly wait this long for a lookup, and for a connection to
# Redis: on a loaded machine one of 300 calls at once waited longer than the 0.25 s connect
# timeout, was denied for it (fail closed, its quota spent), and 24 of 25 were allowed. The
# timeouts have tests of their own (an unreachable Redis below, a paused one in test_quotas_redis).
COUNTING_TIMEOUT = 10.0
OPS = Principal.from_claims({"sub": "ops", "role": "ops"})
GUEST = Principal.from_claims({"sub": "ops", "role": "guest"})  # same subject, denied for its role


def policy(store: str = "memory", redis: str = "", timeout: float = 0.5) -> Any:
    text = (f'[guard]\nlookup_timeout_seconds = {timeout}\n[quotas.q]\ncalls = {LIMIT}\n'
            f'per_seconds = 3600\nby = "global"\nstore = "{store}"\n{redis}'
            '[tools.t]\nrequirements = ["auth:claim:role:ops", "quota:q"]\n')
    return parse_policy(text.encode(), "reliability-quotas.toml")


async def via_check(g: Guard, who: Principal) -> Decision:
    return await g.check("t", Credentials(principal=who))


async def via_identity(g: Guard, who: Principal) -> Decision:
    return await g.check_identity("t", Identity(principal=who))


async def via_decide(g: Guard, who: Principal) -> Decision:
    return await asyncio.to_thread(g.decide, "t", Identity(principal=who))


PATHS = (via_check, via_identity, via_decide)


async def allowed(g: Guard, who: Principal) -> bool:
    return (await via_identity(g, who)).allowed


def tally(decisions: Sequence[Decision | BaseException], allowed_at_most: int) -> int:
    """Count a storm: its calls, those allowed beyond `allowed_at_most` (wrongly), its exceptions
    (tracebacks); both must be 0. How many were allowed."""
    allowed = sum(1 for d in decisions if isinstance(d, Decision) and d.allowed)
    tracebacks = sum(1 for d in decisions if isinstance(d, BaseException))
    wrong = max(0, allowed - allowed_at_most)
    TALLY.add(SUITE, cases=1, calls=len(decisions), wrongly_allowed=wrong, tracebacks=tracebacks)
    assert tracebacks == 0, [d for d in decisions if isinstance(d, BaseException)][:3]
    assert wrong == 0, f"{allowed} allowed, limit {allowed_at_most}"
    return allowed


def errors(decisions: Sequence[Decision | BaseException]) -> list[tuple[Any, int]]:
    """What denied calls for an error (a timeout, a store), and how long each took: why a storm
    allowed fewer than the limit."""
    return [(d.outcome("quota:q"), d.duration_ns) for d in decisions
            if isinstance(d, Decision) and d.errors]


async def storm(guards: Sequence[Guard], calls: int) -> list[Decision | BaseException]:
    """`calls` calls at once, a third of them from a caller without the role, spread over the
    guards and every path (the sync one on threads)."""
    rng = random.Random(calls)

    async def one(i: int) -> Decision:
        who = GUEST if i % 3 == 0 else OPS
        return await rng.choice(PATHS)(guards[i % len(guards)], who)

    return list(await asyncio.gather(*(one(i) for i in range(calls)), return_exceptions=True))


def store_errors_only(results: Sequence[Decision | BaseException]) -> bool:
    """Every call with the role was denied for the store's failure alone."""
    return all(d.errors == ("quota:q",) for d in results if isinstance(d, Decision) and
               d.outcome("auth:claim:role:ops").ok)  # type: ignore[union-attr]


class TestQuotas:
    """0 wrongly allowed: never more than the limit, nothing while the store fails, nothing for a
    caller denied for another requirement (which must not drain the quota either)."""

    async def test_a_memory_storm_over_tasks_and_threads_allows_exactly_the_limit(self) -> None:
        g = Guard(policy(timeout=COUNTING_TIMEOUT), {}, entry_points=False)
        results = await storm([g], 600)
        # Threads hammering the sync API at the same time as the tasks.
        from_threads: list[Decision | BaseException] = []

        def worker() -> None:
            for _ in range(50):
                try:
                    from_threads.append(g.decide("t", Identity(principal=OPS)))
                except Exception as exc:  # counted as a traceback
                    from_threads.append(exc)
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert tally(results + from_threads, LIMIT) == LIMIT, errors(results + from_threads)
        guests = [d for d in results if isinstance(d, Decision) and d.outcome("auth:claim:role:ops")
                  and not d.outcome("auth:claim:role:ops").ok]  # type: ignore[union-attr]
        assert guests and not any(d.allowed for d in guests)

    @pytest.mark.parametrize("where", ["closed port", "black hole"])
    async def test_an_unreachable_redis_allows_nothing(self, where: str) -> None:
        with black_hole() as hole:
            url = (f"redis://127.0.0.1:{closed_port()}/0" if where == "closed port"
                   else hole.replace("http://", "redis://") + "/0")
            g = Guard(policy("redis", f'[state.redis]\nurl = "{url}"\n', timeout=0.3), {},
                      entry_points=False)
            results = await storm([g], 60)
        assert tally(results, 0) == 0
        # Every call with the role names the store's failure; a call denied for its role never
        # asks the store, and is denied for the role alone.
        assert all(isinstance(d, Decision) for d in results)
        decisions = [d for d in results if isinstance(d, Decision)]
        with_role = [d for d in decisions if d.outcome("auth:claim:role:ops") is not None
                     and d.outcome("auth:claim:role:ops").ok]  # type: ignore[union-attr]
        without = [d for d in decisions if d not in with_role]
        assert with_role and without
        assert all(d.errors == ("quota:q",) for d in with_role)
        assert all(d.errors == () and d.outcome("quota:q") is None for d in without)

    @pytest.mark.parametrize("answer", ["raises", "hangs", None, [], [0, 0], [-1], [False], [0.0],
                                        ["0"], (0,), "0"])
    async def test_a_store_that_fails_or_answers_garbage_allows_nothing(self, answer: Any) -> None:
        for awaited in (False, True):
            g = Guard(policy(timeout=0.1), {}, entry_points=False,
                      live=LiveSources(quotas=Broken(answer, awaited)))
            results = await storm([g], 12)
            assert tally(results, 0) == 0
            assert store_errors_only(results)


class Broken:
    """A quota store that raises, hangs, or answers `answer` (at once, or awaited)."""

    name = "broken"

    def __init__(self, answer: Any, awaited: bool = False) -> None:
        self.answer, self.awaited = answer, awaited

    def _answer(self) -> Any:
        if self.answer == "raises":
            raise ConnectionError("store down")
        return self.answer

    def take(self, buckets: Sequence[Bucket]) -> Waits | Awaitable[Waits]:
        if self.answer == "hangs":
            return asyncio.sleep(10, [0])  # past the lookup timeout
        if not self.awaited:
            return self._answer()  # type: ignore[no-any-return]

        async def later() -> Any:
            await asyncio.sleep(0)
            return self._answer()
        return later()

    peek = take

    def refund(self, buckets: Sequence[Bucket]) -> None:
        raise AssertionError("a store that never gave a unit is never refunded")
