"""The reliability suite for quotas on a real redis-server: three guards, as three replicas, share one
quota through it; a paused server (SIGSTOP: connections accepted, nothing answered) allows nothing
and the guard recovers when it resumes; a bucket holding garbage allows nothing. Counted with the
in-memory storms of test_quotas.py ("wrongly allowed" must stay 0).

Interop: what these check is Redis itself, a real component (SPEC §9): its script run atomically for
calls from several clients at once, a server that stops answering on a connection already open,
and what it stores; an in-process stand-in would check only itself.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from mcp_preconditions import Guard
from tests.fixtures.redis import RedisServer

from .test_quotas import (
    COUNTING_TIMEOUT,
    LIMIT,
    OPS,
    allowed,
    errors,
    policy,
    store_errors_only,
    storm,
    tally,
)

pytestmark = pytest.mark.interop
SETTLE_SECONDS = 10.0  # the safety net of a wait for a call that Redis answers in time


async def until_allowed(call: Callable[[], Awaitable[bool]]) -> None:
    """Until a call is allowed: once Redis answers within the short lookup timeout, which on a
    loaded machine is not always the first call after a start or a pause."""
    with anyio.fail_after(SETTLE_SECONDS):
        while not await call():
            await anyio.sleep(0.02)


async def test_three_guards_on_one_redis_allow_exactly_the_limit(redis_server: RedisServer) -> None:
    prefix = f"reliability-{random.randrange(10**9)}:"
    redis = (f'[state.redis]\nurl = "{redis_server.url}"\nquota_prefix = "{prefix}"\n'
             f'connect_timeout_seconds = {COUNTING_TIMEOUT}\n'
             f'read_timeout_seconds = {COUNTING_TIMEOUT}\n')
    guards = [Guard(policy("redis", redis, timeout=COUNTING_TIMEOUT), {}, entry_points=False)
              for _ in range(3)]
    results = await storm(guards, 300)
    assert tally(results, LIMIT) == LIMIT, errors(results)


async def test_a_paused_redis_allows_nothing_and_recovers(
        redis_factory: Callable[[], RedisServer]) -> None:
    server = redis_factory()
    g = Guard(policy("redis", f'[state.redis]\nurl = "{server.url}"\n', timeout=0.3), {},
              entry_points=False)
    await until_allowed(lambda: allowed(g, OPS))
    server.pause()
    try:
        results = await storm([g], 30)
    finally:
        server.resume()
    assert tally(results, 0) == 0
    await until_allowed(lambda: allowed(g, OPS))


async def test_a_bucket_holding_garbage_allows_nothing(redis_server: RedisServer) -> None:
    prefix = f"garbage-{random.randrange(10**9)}:"
    g = Guard(policy("redis", f'[state.redis]\nurl = "{redis_server.url}"\n'
                              f'quota_prefix = "{prefix}"\n'), {}, entry_points=False)
    assert redis_server.command("SET", f"{prefix}q:global", "many") == "+OK"
    results: list[Any] = await storm([g], 30)
    assert tally(results, 0) == 0
    assert store_errors_only(results)
