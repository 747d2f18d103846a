"""Benchmarks: the guard side by side with Cedar and Casbin, scale, and the other issues' benches.

`make bench` runs `python -m bench.run`. This module holds the one timing method every bench here
uses: per-call `perf_counter_ns`, warm-up first, garbage collection paused while sampling.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from time import perf_counter_ns
from typing import Any

Call = Callable[[], object]


def sample(call: Call, count: int, warmup: int = 2_000) -> list[int]:
    """`count` timings of `call()` in nanoseconds, after `warmup` untimed calls.

    The collector is paused while sampling (as `timeit` does) so that one engine's garbage is not
    charged to another's calls; it runs between batches instead."""
    for _ in range(warmup):
        call()
    out = [0] * count
    clock = perf_counter_ns
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(count):
            start = clock()
            call()
            out[i] = clock() - start
    finally:
        if enabled:
            gc.enable()
    return out


def interleaved(calls: Mapping[str, Call], total: int, rounds: int = 50) -> dict[str, list[int]]:
    """`total` samples per call, taken in `rounds` interleaved batches so that a noisy moment on the
    machine (another process, a frequency change) spreads over every engine instead of hitting
    all of one fast engine's samples. Each call is warmed up once, then briefly per batch."""
    per_round = -(-total // rounds)
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for call in calls.values():
        sample(call, 1, warmup=2_000)
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name] += sample(call, per_round, warmup=20)
        gc.collect()
    return samples


def percentile(values: Sequence[int], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank, of unsorted values."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))
    return float(ordered[rank])


def summary_us(values: Sequence[int]) -> dict[str, float]:
    """p50, p99 and mean in microseconds."""
    return {"p50_us": percentile(values, 50) / 1000, "p99_us": percentile(values, 99) / 1000,
            "mean_us": statistics.fmean(values) / 1000, "n": float(len(values))}


def timer_overhead_ns() -> float:
    """The median cost of one empty timed sample: charged equally to every engine's numbers."""
    return percentile(sample(_nothing, 50_000, warmup=1_000), 50)


def _nothing() -> None:
    return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {"platform": platform.platform(), "python": platform.python_version(),
            "implementation": platform.python_implementation(), "cpu_count": os.cpu_count(),
            "cpu_model": cpu_model(), "load_average": list(os.getloadavg())}


def pace_ms() -> float:
    """How fast this machine runs plain Python right now: the median of nine runs of a fixed loop
    (`sum(range(10**6))`), in ms; lower is faster. A shared VM's pace moves with its neighbours, and
    every absolute figure moves with it: `make bench` records it at its start and its end."""
    times = []
    for _ in range(9):
        start = perf_counter_ns()
        sum(range(10**6))
        times.append(perf_counter_ns() - start)
    return statistics.median(times) / 1e6


def fresh(module: str, function: str = "run") -> Any:
    """`bench.MODULE.FUNCTION()` called in a new interpreter. No bench measures on the heap another
    left behind: in one shared process, the objects of the benches before it (a 100,000-tool guard
    among them) made the scale and filtering figures up to 2x slower than in any real process."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_call, module, function).result()


def _call(module: str, function: str) -> Any:
    return getattr(importlib.import_module(f"bench.{module}"), function)()
