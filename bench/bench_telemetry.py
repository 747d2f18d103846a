"""What telemetry costs a hosted `tools/call` (SPEC §13): a GuardedMCPServer with metrics on against
the same server with metrics off, through the SDK's in-process client (2026-07-28, the shorter
trip, so the stricter ratio). Goal: metrics add <= 3 %.

And the gateway hop (`measure_gateway`): three gateway processes in front of npm server-everything
over stdio (bench/gateway_variant.py: metrics off, metrics on, and metrics on with every span exported
over OTLP/HTTP to a local receiver), called side by side by bench/loadgen.py sessions, one call to
each in turn; the overhead is the median of the per-turn differences. Also each gateway process's
own CPU per call under 10 clients (/proc, bench/systems.py), the systems measured in turn. Goal:
metrics add <= 3 % to the hop; tracing is reported.

Calls alternate between the two servers and the overhead is the median of the paired differences;
the whole measurement runs in three fresh interpreters and each figure is the median of the three
(as bench_mcp.py does). Tracing is reported, not a goal: a process exporting every span over
OTLP/HTTP to a local receiver, against the same process's calls before tracing was installed (a
tracer provider cannot be uninstalled, so those two are measured one after the other).

Run: .venv/bin/python -m bench.bench_telemetry
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from mcp import Client
from tests.fixtures.mcp_servers import server_env
from tests.fixtures.otlp import OtlpReceiver
from tests.fixtures.ports import free_port
from tests.fixtures.upstreams import everything_stdio, listening

from bench import fresh, percentile
from bench.loadgen import Session, load
from bench.systems import POLICY, Running, started
from mcp_preconditions.examples_server import LAUNCH_REQUIREMENTS, default_policy
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from mcp_preconditions.principal import Credentials, Principal
from mcp_preconditions.telemetry import configure_tracing

PROCESSES = 3
ROUNDS = 40
PER_ROUND = 250
WARMUP = 300
TRACED_CALLS = 4_000
ALICE = Credentials(principal=Principal.from_claims(
    {"sub": "alice", "role": "mission_control", "scope": "mission:write"}))
LAUNCH = {"vehicle": "Falcon 9"}  # allowed: every requirement is evaluated


async def launch_rocket(vehicle: str) -> str:
    return f"{vehicle} has cleared the tower."


def server(name: str, metrics: bool) -> GuardedMCPServer:
    guarded = GuardedMCPServer(name, guard=Guard(default_policy()), log_level="WARNING",
                               credentials=lambda _request: ALICE, metrics=metrics)
    guarded.add_tool(launch_rocket, structured_output=False, requirements=LAUNCH_REQUIREMENTS)
    return guarded


def _launch(client: Client) -> Callable[[], Awaitable[Any]]:
    return lambda: client.call_tool("launch_rocket", LAUNCH)


async def _warm(client: Client) -> None:
    result = await client.call_tool("launch_rocket", LAUNCH)
    assert not result.is_error, result.content  # the guard must allow it
    for _ in range(WARMUP):
        await client.call_tool("launch_rocket", LAUNCH)


async def paired() -> dict[str, list[int]]:
    """Round trips alternating call by call between metrics off and on; `pairs` is on minus off."""
    samples: dict[str, list[int]] = {"off": [], "on": [], "pairs": []}
    async with Client(server("off", False), mode="auto") as c1, \
            Client(server("on", True), mode="auto") as c2:
        await _warm(c1)
        await _warm(c2)
        off, on = _launch(c1), _launch(c2)
        clock = perf_counter_ns
        gc.disable()
        try:
            for round_ in range(ROUNDS):
                for i in range(PER_ROUND):
                    first, second = (off, on) if (round_ + i) % 2 else (on, off)
                    t0 = clock()
                    await first()
                    t1 = clock()
                    await second()
                    t2 = clock()
                    a, b = (t1 - t0, t2 - t1) if first is off else (t2 - t1, t1 - t0)
                    samples["off"].append(a)
                    samples["on"].append(b)
                    samples["pairs"].append(b - a)
                gc.collect()
        finally:
            gc.enable()
    return samples


def _quiet() -> None:
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.WARNING)
    # The embedded policy names tools this one-tool server does not have: a warning per server.
    logging.getLogger("mcp_preconditions.policy").setLevel(logging.ERROR)


def measure() -> dict[str, float]:
    """One process's metrics figures."""
    _quiet()
    samples = asyncio.run(paired())
    off = percentile(samples["off"], 50) / 1000
    overhead = statistics.median(samples["pairs"]) / 1000
    return {"telemetry_metrics_overhead_pct": overhead / off * 100,
            "telemetry_metrics_overhead_us": overhead,
            "telemetry_metrics_off_p50_us": off,
            "telemetry_metrics_on_p50_us": percentile(samples["on"], 50) / 1000}


async def _timed(count: int) -> list[int]:
    out: list[int] = []
    async with Client(server("traced", True), mode="auto") as client:
        await _warm(client)
        clock = perf_counter_ns
        for _ in range(count):
            start = clock()
            await client.call_tool("launch_rocket", LAUNCH)
            out.append(clock() - start)
    return out


def measure_tracing() -> dict[str, float]:
    """Calls before and after this process installs tracing that exports every span to a local
    OTLP/HTTP receiver (batched, every 200 ms)."""
    _quiet()
    untraced = percentile(asyncio.run(_timed(TRACED_CALLS)), 50) / 1000
    receiver = OtlpReceiver()
    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                       "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_MAX_QUEUE_SIZE": "65536"})
    tracing = configure_tracing(service_name="bench")
    assert tracing is not None
    try:
        traced = percentile(asyncio.run(_timed(TRACED_CALLS)), 50) / 1000
    finally:
        tracing.shutdown()
        receiver.close()
    return {"telemetry_tracing_untraced_p50_us": untraced, "telemetry_tracing_p50_us": traced,
            "telemetry_tracing_overhead_pct": (traced - untraced) / untraced * 100,
            "telemetry_tracing_spans_exported": float(len(receiver.spans))}


# --- the gateway hop ------------------------------------------------------------------------------
GATEWAY_TURNS = 3_000  # calls to each gateway, one to each in turn
GATEWAY_WARMUP = 200
LOAD_CLIENTS, LOAD_WARMUP_S, LOAD_SECONDS, LOAD_ROUNDS = 10, 1.0, 3.0, 5


def _variant(policy: Path, metrics: str, env: Mapping[str, str] | None = None) -> Any:
    port = free_port()
    return listening([sys.executable, "-m", "bench.gateway_variant", str(port), metrics, str(policy),
                      "--", *everything_stdio()], port, server_env(**(env or {})))


@contextmanager
def gateways(receiver: OtlpReceiver) -> Iterator[dict[str, Running]]:
    """off, on, and traced (on, exporting every span to `receiver` every 200 ms)."""
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200",
               "OTEL_BSP_MAX_QUEUE_SIZE": "65536"}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        policy = Path(tmp) / "echo.toml"
        policy.write_text(POLICY, encoding="utf-8")
        yield {name: stack.enter_context(started(name, _variant(policy, *how)))
               for name, how in (("off", ("off",)), ("on", ("on",)), ("traced", ("on", tracing)))}


async def turns(systems: Mapping[str, Running], count: int) -> dict[str, list[int]]:
    """`count` calls to each system, one to each in turn (the order rotated every turn)."""
    names = list(systems)
    sessions = {n: await Session(systems[n].url).open() for n in names}
    try:
        for _ in range(GATEWAY_WARMUP):
            for n in names:
                await sessions[n].call()
        samples: dict[str, list[int]] = {n: [] for n in names}
        clock = perf_counter_ns
        for i in range(count):
            shift = i % len(names)
            for n in names[shift:] + names[:shift]:
                start = clock()
                await sessions[n].call()
                samples[n].append(clock() - start)
        return samples
    finally:
        for session in sessions.values():
            await session.close()


def _cpu_per_call(system: Running) -> float:
    """The gateway process's own CPU ms per call under LOAD_CLIENTS clients."""
    measured = asyncio.run(load(system.url, LOAD_CLIENTS, LOAD_SECONDS, LOAD_WARMUP_S, system.own_cpu_s))
    first, last = measured.probes
    assert isinstance(first, float) and isinstance(last, float)
    return (last - first) / max(1, measured.calls) * 1e3


def measure_gateway() -> dict[str, float]:
    """The gateway figures (one process; the gateways are processes of their own)."""
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    receiver = OtlpReceiver()
    try:
        with gateways(receiver) as systems:
            samples = asyncio.run(turns(systems, GATEWAY_TURNS))
            cpu: dict[str, list[float]] = {n: [] for n in systems}
            for round_ in range(LOAD_ROUNDS):
                order = list(systems) if round_ % 2 == 0 else list(systems)[::-1]
                for name in order:
                    cpu[name].append(_cpu_per_call(systems[name]))
    finally:
        receiver.close()
    off = statistics.median(samples["off"]) / 1e6
    out = {f"telemetry_gateway_{n}_p50_ms": statistics.median(samples[n]) / 1e6 for n in samples}
    out |= {f"telemetry_gateway_{n}_cpu_ms_per_call": statistics.median(cpu[n]) for n in cpu}
    for name, key in (("on", "metrics"), ("traced", "tracing")):
        added = statistics.median(b - a for a, b in zip(samples["off" if name == "on" else "on"],
                                                        samples[name], strict=True)) / 1e6
        base = off if name == "on" else statistics.median(samples["on"]) / 1e6
        out[f"telemetry_gateway_{key}_overhead_us"] = added * 1e3
        out[f"telemetry_gateway_{key}_overhead_pct"] = added / base * 100
        base_cpu = out["telemetry_gateway_off_cpu_ms_per_call" if name == "on" else
                       "telemetry_gateway_on_cpu_ms_per_call"]
        out[f"telemetry_gateway_{key}_cpu_pct"] = (
            out[f"telemetry_gateway_{name}_cpu_ms_per_call"] / base_cpu - 1) * 100
    out["telemetry_gateway_spans_exported"] = float(len(receiver.spans))
    return out


def run() -> dict[str, float]:
    """The median of each metrics figure over PROCESSES fresh interpreters (and the overhead's
    spread), plus one tracing process and the gateway hop."""
    runs = [fresh("bench_telemetry", "measure") for _ in range(PROCESSES)]
    result = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    result["telemetry_metrics_overhead_pct_min"] = min(r["telemetry_metrics_overhead_pct"] for r in runs)
    result["telemetry_metrics_overhead_pct_max"] = max(r["telemetry_metrics_overhead_pct"] for r in runs)
    result.update(fresh("bench_telemetry", "measure_tracing"))
    result.update(fresh("bench_telemetry", "measure_gateway"))
    return result


if __name__ == "__main__":
    if sys.argv[1:] == ["gateway"]:  # the gateway figures alone
        print(json.dumps(measure_gateway(), indent=2))
    else:
        print(json.dumps(run(), indent=2))
