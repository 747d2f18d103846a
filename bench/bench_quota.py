"""Quota benchmarks: a decision with a memory quota against the same tool without it (interleaved,
same caller; goal: at most 2 µs added at p50), and a decision with a Redis quota, whose Redis
commands are counted with INFO commandstats (one EVALSHA per decision: one round trip).

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


def _evalsha_calls(info: dict[str, Any]) -> int:
    stats = info.get("cmdstat_evalsha") or {}
    return int(stats.get("calls", 0))


async def _redis(url: str) -> dict[str, float]:
    from redis.asyncio import Redis

    guard = _guard(url)
    identity = Identity(principal=ALICE)
    admin = Redis.from_url(url)
    warm = await guard.check_identity("metered", identity)  # loads the script, opens the pool
    assert warm.allowed, warm.outcomes
    await admin.config_resetstat()
    before = await admin.info("commandstats")
    times: list[int] = []
    for _ in range(REDIS_RUNS):
        start = time.perf_counter_ns()
        decision = await guard.check_identity("metered", identity)
        times.append(time.perf_counter_ns() - start)
        assert decision.allowed, decision.outcomes
    after = await admin.info("commandstats")
    commands = sum(int(v.get("calls", 0)) for k, v in after.items() if k.startswith("cmdstat_")
                   and k not in ("cmdstat_info", "cmdstat_config|resetstat"))
    await admin.aclose()
    return {"quota_redis_p50_us": percentile(times, 50) / 1000,
            "quota_redis_p99_us": percentile(times, 99) / 1000,
            "quota_redis_evalsha_per_decision": (_evalsha_calls(after) - _evalsha_calls(before))
            / REDIS_RUNS,
            "quota_redis_commands_per_decision": commands / REDIS_RUNS}


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): every number in one flat dict."""
    results = memory()
    with redis_server() as url:
        results.update(asyncio.run(_redis(url)))
    return results


if __name__ == "__main__":
    print(json.dumps({k: round(v, 3) for k, v in run().items()}, indent=2))
