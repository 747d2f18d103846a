"""Live-fact benchmarks: Redis round trips against TTL-cached state lookups, and 1,000 concurrent
guarded evaluations with Redis state (every decision checked against the truth, p50/p99).

Starts its own redis-server on a free loopback port. Run: .venv/bin/python bench/bench_live.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from mcp_preconditions import Decision, Guard, Identity, parse_policy
from mcp_preconditions.resolvers.state_redis import RedisStateSource

SEQUENTIAL = 3000
CONCURRENT = 1000
KEYS = 100
ROUNDS = 5
NOBODY = Identity()


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throw-away redis-server (no persistence) on a free loopback port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench_live: redis-server is not installed (apt-get install -y redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", workdir],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait()


def _wait_for(port: int) -> None:
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return
        time.sleep(0.02)
    raise SystemExit(f"bench_live: redis-server did not start on port {port}")


def guard_for(url: str, ttl: float) -> Guard:
    tools = "\n".join(f'[tools.t{i}]\nrequirements = ["state:k{i}"]' for i in range(KEYS))
    text = f'[state]\nttl_seconds = {ttl}\n[state.redis]\nurl = "{url}"\nprefix = "bench:"\n{tools}\n'
    return Guard(parse_policy(text.encode(), "bench-live.toml"), entry_points=False,
                 recorder=_NoRecord())


class _NoRecord:
    """Decision logging is measured elsewhere; here only the decision path counts."""

    def record(self, decision: Any) -> None:
        return None


async def _timed(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    """Per-call latency in microseconds, sequentially."""
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def _pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


async def _concurrent(guard: Guard, truth: dict[int, bool]) -> dict[str, float]:
    """CONCURRENT guarded evaluations at once, each checked against the value in Redis. `wrong` is
    a decision that contradicts Redis; `errors` a fail-closed denial (a lookup over its timeout)."""
    picks = [random.randrange(KEYS) for _ in range(CONCURRENT)]

    async def one(i: int) -> tuple[float, Decision]:
        start = time.perf_counter_ns()
        decision = await guard.check_identity(f"t{i}", NOBODY)
        return (time.perf_counter_ns() - start) / 1e6, decision

    wall = time.perf_counter_ns()
    results = await asyncio.gather(*(one(i) for i in picks))
    wall_ms = (time.perf_counter_ns() - wall) / 1e6
    latencies = [ms for ms, _ in results]
    errors = sum(1 for _, d in results if d.errors)
    wrong = sum(1 for i, (_, d) in zip(picks, results, strict=True)
                if d.allowed != truth[i] and not d.errors)
    return {"p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99), "wall_ms": wall_ms,
            "wrong": float(wrong), "errors": float(errors)}


async def _measure(url: str) -> dict[str, float]:
    source = RedisStateSource(url, prefix="bench:")
    truth = {i: i % 2 == 0 for i in range(KEYS)}
    for i, value in truth.items():
        await source.set(f"k{i}", value)
    uncached, cached = guard_for(url, 0), guard_for(url, 60)
    await cached.check_identity("t0", NOBODY)  # warm the cache entry

    redis_get = await _timed(lambda: source.get("k0"), SEQUENTIAL)
    decision_redis = await _timed(lambda: uncached.check_identity("t0", NOBODY), SEQUENTIAL)
    decision_cached = await _timed(lambda: cached.check_identity("t0", NOBODY), SEQUENTIAL * 10)
    rounds = [await _concurrent(uncached, truth) for _ in range(ROUNDS)]
    warm = [await _concurrent(cached, truth) for _ in range(ROUNDS)]
    await source.aclose()
    return {
        "redis_get_p50_us": _pct(redis_get, 50),
        "redis_get_p99_us": _pct(redis_get, 99),
        "decision_redis_p50_us": _pct(decision_redis, 50),
        "decision_redis_p99_us": _pct(decision_redis, 99),
        "decision_cached_p50_us": _pct(decision_cached, 50),
        "decision_cached_p99_us": _pct(decision_cached, 99),
        **_summary("concurrent_1000_redis", rounds),
        **_summary("concurrent_1000_cached", warm),
    }


def _summary(name: str, rounds: list[dict[str, float]]) -> dict[str, float]:
    """Medians over the rounds for latencies; totals for wrong decisions and errors."""
    return {
        f"{name}_p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        f"{name}_p99_ms": statistics.median(r["p99_ms"] for r in rounds),
        f"{name}_wall_ms": statistics.median(r["wall_ms"] for r in rounds),
        f"{name}_wrong": sum(r["wrong"] for r in rounds),
        f"{name}_errors": sum(r["errors"] for r in rounds),
    }


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): every number in one flat dict."""
    with redis_server() as url:
        return asyncio.run(_measure(url))


if __name__ == "__main__":
    results = run()
    print(json.dumps({k: round(v, 2) for k, v in results.items()}, indent=2))
    if results["concurrent_1000_redis_wrong"] or results["concurrent_1000_cached_wrong"]:
        raise SystemExit("bench_live: some concurrent decisions were wrong")
