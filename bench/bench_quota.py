"""Quota benchmarks: a decision with a memory quota against the same tool without it (interleaved,
same caller; goal: at most 2 µs added at p50), and a decision with a Redis quota: its p50, and the
commands Redis receives per decision, counted with MONITOR (one EVALSHA: one round trip).

Starts its own redis-server on a free loopback port. Run: .venv/bin/python -m bench.bench_quota
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench import interleaved, percentile
from bench.bench_live import redis_server
from mcp_preconditions import Credentials, Guard, Identity, Principal, parse_policy
from mcp_preconditions.decisions import DecisionRecorder

RUNS = 20_000
REDIS_RUNS = 2_000
MONITORED = 200
# Enough units that no sample is ever refused: the refused path is not what is measured here.
POLICY = """
[quotas.q]
calls = 1000000000
per_seconds = 1000
{redis}
[tools.plain]
requirements = ["auth:oauth2", "auth:claim:role:mission_control"]
[tools.metered]
requirements = ["auth:oauth2", "auth:claim:role:mission_control", "quota:q"]
"""
ALICE = Principal.from_claims({"sub": "alice", "role": "mission_control"})


class _NoRecord:
    """Decision logging is measured elsewhere; here only the decision path counts."""

    def record(self, decision: Any) -> None:
        return None


def _guard(redis_url: str | None = None) -> Guard:
    redis = (f'store = "redis"\n[state.redis]\nurl = "{redis_url}"\nprefix = "bench:"\n'
             f'quota_prefix = "bench-quota:"' if redis_url else "")
    recorder: DecisionRecorder = _NoRecord()
    return Guard(parse_policy(POLICY.format(redis=redis).encode(), "bench-quota.toml"),
                 entry_points=False, recorder=recorder)


def memory() -> dict[str, float]:
    """`check_now` of a host-verified caller (the adapters' hot path), with and without the quota."""
    guard = _guard()
    credentials = Credentials(principal=ALICE)
    for tool in ("plain", "metered"):
        decision = guard.check_now(tool, credentials)
        assert not isinstance(decision, asyncio.Future) and getattr(decision, "allowed", False), tool
    samples = interleaved({"plain": lambda: guard.check_now("plain", credentials),
                           "metered": lambda: guard.check_now("metered", credentials)}, RUNS)
    plain, metered = percentile(samples["plain"], 50), percentile(samples["metered"], 50)
    return {"quota_plain_p50_us": plain / 1000, "quota_memory_p50_us": metered / 1000,
            "quota_memory_added_us": (metered - plain) / 1000}


async def _client_commands(admin: Any, url: str, guard: Guard, identity: Identity, decisions: int
                          ) -> list[str]:
    """The commands Redis received from clients (MONITOR; a script's own commands are marked
    `lua` and left out) while `decisions` decisions were made: one per round trip."""
    seen: list[str] = []

    async def watch() -> None:
        async with admin.monitor() as monitor:
            async for command in monitor.listen():
                if command["command"] == "ECHO bench-quota-done":
                    return
                if command["client_type"] != "lua":
                    seen.append(command["command"].split(" ", 1)[0].upper())

    sentinel = type(admin).from_url(url)
    await sentinel.ping()  # its connection is open (and greeted) before MONITOR starts
    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)  # MONITOR is listening
    for _ in range(decisions):
        assert (await guard.check_identity("metered", identity)).allowed
    await sentinel.echo("bench-quota-done")
    await asyncio.wait_for(watcher, 10)
    await sentinel.aclose()
    return seen


async def _redis(url: str) -> dict[str, float]:
    from redis.asyncio import Redis

    guard = _guard(url)
    identity = Identity(principal=ALICE)
    admin = Redis.from_url(url)
    warm = await guard.check_identity("metered", identity)  # loads the script, opens the pool
    assert warm.allowed, warm.outcomes
    times: list[int] = []
    for _ in range(REDIS_RUNS):
        start = time.perf_counter_ns()
        decision = await guard.check_identity("metered", identity)
        times.append(time.perf_counter_ns() - start)
        assert decision.allowed, decision.outcomes
    commands = await _client_commands(admin, url, guard, identity, MONITORED)
    await admin.aclose()
    return {"quota_redis_p50_us": percentile(times, 50) / 1000,
            "quota_redis_p99_us": percentile(times, 99) / 1000,
            "quota_redis_round_trips": len(commands) / MONITORED,
            "quota_redis_evalsha_share": commands.count("EVALSHA") / max(1, len(commands))}


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): every number in one flat dict."""
    results = memory()
    with redis_server() as url:
        results.update(asyncio.run(_redis(url)))
    return results


if __name__ == "__main__":
    print(json.dumps({k: round(v, 3) for k, v in run().items()}, indent=2))
