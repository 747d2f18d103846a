"""Scale: compile time and memory for 10, 1,000 and 100,000 tools, the per-decision cost at each
size (it must stay flat), and client-side filtering of 10,000 tools with up to 8 requirements.

Tools get random but realistic requirement mixes (seeded, so every run compiles the same set).
Run alone: .venv/bin/python -m bench.bench_scale
"""

from __future__ import annotations

import gc
import itertools
import random
import statistics
import time
import tracemalloc
from typing import Any

from mcp_preconditions import Guard, Identity, Principal, parse_policy
from mcp_preconditions.client import Knowledge, filter_tools

from . import sample, summary_us

SIZES = (10, 1_000, 100_000)
ROLES = [f"role_{i}" for i in range(8)]
CAPABILITIES = [f"cap.{i}" for i in range(50)]
FLAGS = [f"flag.{i}" for i in range(200)]
STATES = [f"state.{i}" for i in range(100)]
SERVICES = [f"svc{i}" for i in range(20)]
# The launch_rocket equivalent timed at every size (same shape as SEP-2487's example).
PROBE = "probe_launch"
PROBE_REQUIREMENTS = ["auth:oauth2", "auth:claim:role:role_0", "capability:cap.0", "env:production",
                      "state:state.0", "feature:flag.0"]
DECISIONS = 20_000


def policy_text() -> str:
    """A policy with the facts the random tools refer to: labels, 200 flags, 100 states, 50 grants."""
    lines = ['environment = ["production", "eu-west-1"]', "environment_variable = \"BENCH_UNSET_ENV\"",
             "[features.flags]"]
    lines += [f'"{f}" = {str(i % 3 != 1).lower()}' for i, f in enumerate(FLAGS)]
    lines.append("[state.values]")
    lines += [f'"{s}" = {str(i % 4 != 1).lower()}' for i, s in enumerate(STATES)]
    for i, cap in enumerate(CAPABILITIES):
        when = f'"auth:claim:role:{ROLES[i % len(ROLES)]}"' if i % 5 else '"auth:oauth2"'
        lines += ["[[capabilities.grants]]", f'capabilities = ["{cap}"]', f"when = [{when}]"]
    return "\n".join(lines) + "\n"


def random_requirements(rng: random.Random, most: int = 6) -> list[str]:
    """0..`most` requirements, drawn the way real tool sets look (mostly auth, some facts)."""
    pool: list[str] = []
    if rng.random() < 0.7:
        pool.append("auth:oauth2")
    if rng.random() < 0.4:
        pool.append(f"auth:scope:{rng.choice(SERVICES)}:{rng.choice(['read', 'write', 'admin'])}")
    if rng.random() < 0.3:
        pool.append(f"auth:claim:role:{rng.choice(ROLES)}")
    if rng.random() < 0.1:
        pool.append(f"auth:claim:groups:urn:org:team{rng.randrange(30)}")
    if rng.random() < 0.3:
        pool.append(f"capability:{rng.choice(CAPABILITIES)}")
    if rng.random() < 0.3:
        pool.append(f"env:{rng.choice(['production', 'staging', 'eu-west-1'])}")
    if rng.random() < 0.2:
        pool.append(f"feature:{rng.choice(FLAGS)}")
    if rng.random() < 0.15:
        pool.append(f"state:{rng.choice(STATES)}")
    while len(pool) < most and rng.random() < 0.3:
        pool.append(f"feature:{rng.choice(FLAGS)}")
    return pool[:most]


def tool_set(count: int, seed: int = 7) -> dict[str, list[str]]:
    rng = random.Random(seed)
    tools = {f"tool_{i:06d}": random_requirements(rng) for i in range(count - 1)}
    tools[PROBE] = list(PROBE_REQUIREMENTS)
    return tools


def compile_guard(tools: dict[str, list[str]]) -> Guard:
    policy = parse_policy(policy_text().encode(), "bench-scale.toml")
    return Guard(policy, tools, entry_points=False)


def measure_compile(count: int) -> dict[str, float]:
    """Seconds to compile, and memory (tracemalloc, a separate run: tracing slows compiling)."""
    tools = tool_set(count)
    start = time.perf_counter()
    guard = compile_guard(tools)
    seconds = time.perf_counter() - start
    del guard
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        guard = compile_guard(tools)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del guard
    return {"compile_s": seconds, "memory_mb": (retained - before) / 2**20, "peak_mb": peak / 2**20}


def measure_decide(count: int) -> dict[str, float]:
    """p50/p99 of deciding the probe tool, and the median over a random walk of compiled tools."""
    guard = compile_guard(tool_set(count))
    who = Identity(principal=Principal.from_claims(
        {"sub": "alice", "role": "role_0", "scope": "svc1:read svc2:write"}))
    if not guard.decide(PROBE, who, record=False).allowed:
        raise SystemExit("bench_scale: the probe tool must be allowed for its principal")
    probe = summary_us(sample(lambda: guard.decide(PROBE, who, record=False), DECISIONS))
    names = list(guard.snapshot.tools)
    rng = random.Random(11)
    walk = itertools.cycle([rng.choice(names) for _ in range(DECISIONS)]).__next__
    mixed = summary_us(sample(lambda: guard.decide(walk(), who, record=False), DECISIONS))
    return {"probe_p50_us": probe["p50_us"], "probe_p99_us": probe["p99_us"],
            "mixed_p50_us": mixed["p50_us"]}


def filter_tools_list(count: int = 10_000, seed: int = 3) -> tuple[list[dict[str, Any]], Knowledge]:
    """`count` tool definitions with 1..8 requirements, and knowledge that decides most strings."""
    rng = random.Random(seed)
    tools = [{"name": f"tool_{i}", "description": "a tool", "inputSchema": {"type": "object"},
              "execution": {"requirements": random_requirements(rng, most=8) or ["auth:oauth2"]}}
             for i in range(count)]
    strings = sorted({r for t in tools for r in t["execution"]["requirements"]})  # type: ignore[index]
    known = [s for s in strings if rng.random() < 0.9]
    unsat = {s for s in known if rng.random() < 0.2}
    return tools, Knowledge([s for s in known if s not in unsat], sorted(unsat))


def measure_filter(repeats: int = 30) -> dict[str, float]:
    """The median of `repeats` filterings of the whole list (collector paused, as in `sample`)."""
    tools, knowledge = filter_tools_list()
    filter_tools(tools, knowledge, "hide")  # warm-up
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            result = filter_tools(tools, knowledge, "hide")
            times.append(time.perf_counter_ns() - start)
    finally:
        gc.enable()
    return {"filter_10k_ms": statistics.median(times) / 1e6, "filter_10k_hidden": float(len(result.hidden)),
            "filter_10k_requirements": float(sum(len(t["execution"]["requirements"]) for t in tools))}


def measure() -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """(flat results for results.json, per-size rows for the chart).

    Client filtering runs first: a client process has not compiled a 100,000-tool server guard,
    and the heap those runs leave behind (freed, fragmented) made filtering ~50% slower."""
    filtering = measure_filter()
    rows: dict[int, dict[str, float]] = {}
    for count in SIZES:
        rows[count] = {**measure_compile(count), **measure_decide(count)}
    out: dict[str, float] = {}
    for count, row in rows.items():
        label = {10: "10", 1_000: "1k", 100_000: "100k"}[count]
        out[f"compile_{label}_s"] = row["compile_s"]
        out[f"memory_{label}_mb"] = row["memory_mb"]
        out[f"peak_memory_{label}_mb"] = row["peak_mb"]
        out[f"decide_{label}_p50_us"] = row["probe_p50_us"]
        out[f"decide_{label}_p99_us"] = row["probe_p99_us"]
        out[f"decide_mixed_{label}_p50_us"] = row["mixed_p50_us"]
    out["decide_flatness"] = rows[SIZES[-1]]["probe_p50_us"] / rows[SIZES[0]]["probe_p50_us"]
    out.update(filtering)
    return out, rows


def run() -> dict[str, float]:
    return measure()[0]


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:32} {value:12.3f}")
