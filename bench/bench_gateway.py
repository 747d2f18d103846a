"""The gateway hop side by side with the proxies people install: npm server-everything's `echo` called
directly over streamable HTTP, through `mcp-preconditions gateway` (a satisfied requirement on echo,
so every call is decided; a stdio upstream, and an HTTP one), fastmcp 4.1.2's `create_proxy`, PyPI
mcp-proxy, npm mcp-proxy and supergateway, all on 127.0.0.1. Over stdio: direct, the gateway, fastmcp.

Per system: p50/p99 at 1 client, calls/s at 10 and 50 clients (one connection per session, bench/
loadgen.py), CPU per call of its process tree and of the proxy alone (/proc), the proxy's RSS idle and
under 50 sessions; beside each figure the load generator's own CPU per call. Systems rotate between
rounds; every figure is the median of ROUNDS rounds (one round moves 20-30 % on a shared machine).

    .venv/bin/python -m bench.bench_gateway [--rounds N] [--only NAME,...]
        [--with NAME='COMMAND {port} {upstream}'] [--with-stdio NAME='COMMAND {upstream}']
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from tests.fixtures.mcp_servers import CLI, ROOT, server_env
from tests.fixtures.upstreams import everything_stdio, fastmcp_proxy_stdio, gateway_stdio

from bench import percentile
from bench.loadgen import cpu_s, latencies, load
from bench.systems import POLICY, Running, everything

ROUNDS = 3
LATENCY_CALLS, WARMUP = 300, 30
LEVELS = {10: (0.5, 2.0), 50: (1.0, 3.0)}  # clients: (warm-up s, measured window s)
STDIO_CALLS = 300
PEERS = ("fastmcp", "pypi_mcp_proxy", "npm_mcp_proxy", "supergateway")
CHART = ROOT / "docs" / "gateway-performance.png"
Figures = dict[str, float]


def one_system(system: Running) -> Figures:
    """Every HTTP figure of one system in one round."""
    out: Figures = {}
    started = cpu_s()
    samples = asyncio.run(latencies(system.url, LATENCY_CALLS, WARMUP))
    out["http_1_gen_ms"] = (cpu_s() - started) / (LATENCY_CALLS + WARMUP) * 1e3
    out["http_p50_ms"] = percentile(samples, 50) / 1e6
    out["http_p99_ms"] = percentile(samples, 99) / 1e6

    def probe() -> tuple[float, float, float, float]:
        return system.cpu_s(), system.own_cpu_s(), system.rss_mb(), system.tree_rss_mb()

    for clients, (warmup, seconds) in LEVELS.items():
        measured = asyncio.run(load(system.url, clients, seconds, warmup, probe))
        first, last = measured.probes
        assert isinstance(first, tuple) and isinstance(last, tuple)
        calls = max(1, measured.calls)
        out[f"http_{clients}_clients_per_s"] = measured.calls / measured.seconds
        out[f"http_{clients}_gen_ms"] = measured.generator_cpu_s / calls * 1e3
        out[f"cpu_{clients}_ms_per_call"] = (last[0] - first[0]) / calls * 1e3
        out[f"proxy_cpu_{clients}_ms_per_call"] = (last[1] - first[1]) / calls * 1e3
        out[f"rss_{clients}_mb"], out[f"tree_rss_{clients}_mb"] = last[2], last[3]
    return out


def rotated(items: Sequence[str], round_: int) -> list[str]:
    shift = round_ % len(items)
    return [*items[shift:], *items[:shift]]


def http_rounds(systems: dict[str, Running], rounds: int) -> list[dict[str, Figures]]:
    """`rounds` rounds over every system, the order rotated each round."""
    out: list[dict[str, Figures]] = []
    for round_ in range(rounds):
        figures: dict[str, Figures] = {}
        for name in rotated(list(systems), round_):
            started = time.perf_counter()
            try:
                figures[name] = one_system(systems[name])
            except Exception as exc:  # which system failed, and how
                raise RuntimeError(f"{name} ({systems[name].url}): {type(exc).__name__}: {exc}") from exc
            print(f"  round {round_ + 1}: {name} in {time.perf_counter() - started:.1f} s", flush=True)
        out.append(figures)
    return out


# --- stdio: the SDK's client, one session per way ------------------------------------------------------
async def stdio_rounds(targets: dict[str, list[str]], rounds: int) -> list[dict[str, Figures]]:
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for name, argv in targets.items():
            # stderr dropped for every way alike: the gateway logs each decision there.
            quiet = ["sh", "-c", 'exec "$@" 2>/dev/null', "sh", *argv]
            params = StdioServerParameters(command=quiet[0], args=quiet[1:], env=server_env(), cwd=ROOT)
            client = await stack.enter_async_context(Client(params, mode="legacy"))
            result = await client.call_tool("echo", {"message": "hi"})
            if result.is_error or "Echo: hi" not in str(result.content):
                raise RuntimeError(f"{name} did not echo over stdio: {result}")
            clients[name] = client
        out: list[dict[str, Figures]] = []
        for round_ in range(rounds):
            figures: dict[str, Figures] = {}
            for name in rotated(list(clients), round_):
                for _ in range(WARMUP):
                    await clients[name].call_tool("echo", {"message": "hi"})
                samples = []
                for _ in range(STDIO_CALLS):
                    start = time.perf_counter_ns()
                    await clients[name].call_tool("echo", {"message": "hi"})
                    samples.append(time.perf_counter_ns() - start)
                figures[name] = {"stdio_p50_ms": percentile(samples, 50) / 1e6,
                                 "stdio_p99_ms": percentile(samples, 99) / 1e6}
            out.append(figures)
        return out


# --- medians and ratios ---------------------------------------------------------------------------------
def medians(rounds: list[dict[str, Figures]]) -> Figures:
    """`{system}_{metric}`: the median over rounds."""
    out: Figures = {}
    for name in rounds[0]:
        for metric in rounds[0][name]:
            out[f"{name}_{metric}"] = statistics.median(r[name][metric] for r in rounds)
    return out


def median_ratio(rounds: list[dict[str, Figures]], value: Callable[[dict[str, Figures]], float]) -> float:
    """A ratio taken inside each round (both sides measured minutes apart at most), then the median."""
    return statistics.median(value(r) for r in rounds)


def ratios(http: list[dict[str, Figures]], stdio: list[dict[str, Figures]]) -> Figures:
    """The figures issue 25's goals are stated in."""
    out: Figures = {}
    names = set(http[0]) if http else set()
    if {"gateway", "direct"} <= names:
        out["gateway_http_p50_ratio"] = median_ratio(
            http, lambda r: r["gateway"]["http_p50_ms"] / r["direct"]["http_p50_ms"])
        out["gateway_http_p99_ratio"] = median_ratio(
            http, lambda r: r["gateway"]["http_p99_ms"] / r["direct"]["http_p99_ms"])
        out["gateway_throughput_vs_direct"] = median_ratio(
            http, lambda r: r["gateway"]["http_50_clients_per_s"] / r["direct"]["http_50_clients_per_s"])
    if {"gateway_httpup", "direct"} <= names:
        out["gateway_httpup_p50_ratio"] = median_ratio(
            http, lambda r: r["gateway_httpup"]["http_p50_ms"] / r["direct"]["http_p50_ms"])
    if {"gateway", "gateway_fleet"} <= names:  # goal 6: ten servers within 5 % of one
        out["gateway_fleet_throughput_vs_one"] = median_ratio(
            http, lambda r: r["gateway_fleet"]["http_50_clients_per_s"]
            / r["gateway"]["http_50_clients_per_s"])
        out["gateway_fleet_cpu_vs_one"] = median_ratio(
            http, lambda r: r["gateway_fleet"]["proxy_cpu_50_ms_per_call"]
            / r["gateway"]["proxy_cpu_50_ms_per_call"])
        out["gateway_fleet_p50_vs_one"] = median_ratio(
            http, lambda r: r["gateway_fleet"]["http_p50_ms"] / r["gateway"]["http_p50_ms"])
    peers = [p for p in PEERS if p in names]
    if "gateway" in names and peers:
        out["gateway_throughput_vs_best_peer"] = median_ratio(
            http, lambda r: r["gateway"]["http_50_clients_per_s"]
            / max(r[p]["http_50_clients_per_s"] for p in peers))
    if {"gateway", "npm_mcp_proxy"} <= names:
        out["gateway_cpu_vs_npm_mcp_proxy"] = median_ratio(
            http, lambda r: r["gateway"]["cpu_50_ms_per_call"] / r["npm_mcp_proxy"]["cpu_50_ms_per_call"])
    for name in (stdio[0] if stdio else {}):
        if name != "direct" and "direct" in stdio[0]:
            out[f"{name}_stdio_added_ms"] = median_ratio(stdio, _added(name))
    return out


def _added(name: str) -> Callable[[dict[str, Figures]], float]:
    def added(r: dict[str, Figures]) -> float:
        return r[name]["stdio_p50_ms"] - r["direct"]["stdio_p50_ms"]
    return added


# --- the table -------------------------------------------------------------------------------------------
def table(results: Figures, names: Sequence[str]) -> str:
    """One row per system: every figure with the load generator's CPU per call beside it."""
    head = ("system", "p50 ms", "p99 ms", "gen", "10 cl/s", "gen", "50 cl/s", "gen", "gen %core",
            "CPU ms/call", "proxy", "RSS idle", "RSS@50", "tree@50")
    rows = [head]
    for n in names:
        def f(metric: str, fmt: str = "{:.2f}", n: str = n) -> str:
            value = results.get(f"{n}_{metric}")
            return "–" if value is None else fmt.format(value)

        core = results[f"{n}_http_50_gen_ms"] * results[f"{n}_http_50_clients_per_s"] / 10
        rows.append((n, f("http_p50_ms"), f("http_p99_ms"), f("http_1_gen_ms", "{:.3f}"),
                     f("http_10_clients_per_s", "{:.0f}"), f("http_10_gen_ms", "{:.3f}"),
                     f("http_50_clients_per_s", "{:.0f}"), f("http_50_gen_ms", "{:.3f}"), f"{core:.0f} %",
                     f("cpu_50_ms_per_call"), f("proxy_cpu_50_ms_per_call"),
                     f("rss_idle_mb", "{:.0f} MB"), f("rss_50_mb", "{:.0f} MB"),
                     f("tree_rss_50_mb", "{:.0f} MB")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                         strict=True)))
             for r in rows]
    stdio = [f"{key.removesuffix('_stdio_p50_ms')} p50 {value:.2f} ms" for key, value in results.items()
             if key.endswith("_stdio_p50_ms")]
    stdio += [f"{key.removesuffix('_stdio_added_ms')} +{value:.2f} ms" for key, value in results.items()
              if key.endswith("_stdio_added_ms")]
    return "\n".join([*lines, "stdio (the SDK's client): " + ", ".join(stdio)])


def measure(rounds: int = ROUNDS, only: Sequence[str] = (), extra: dict[str, str] | None = None,
            extra_stdio: dict[str, str] | None = None, stdio: bool = True,
            chart: Path | None = CHART) -> Figures:
    """Every figure: HTTP rounds, then stdio rounds; the medians, the ratios, the table, and the chart
    (when `chart` names where it goes)."""
    # The readiness probes close their sessions while a server may still be streaming: the SDK logs
    # that as an error, which is noise in a bench table.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "echo.toml"
        policy.write_text(POLICY, encoding="utf-8")
        print("gateway: starting the systems ...", flush=True)
        with everything(policy, extra or {}, only) as systems:
            idle = {f"{n}_rss_idle_mb": s.rss_mb() for n, s in systems.items()}
            http = http_rounds(systems, rounds)
        upstream = everything_stdio()
        targets = {"direct": upstream, "gateway": gateway_stdio(policy, upstream),
                   "fastmcp": fastmcp_proxy_stdio(upstream)}
        targets = {n: t for n, t in targets.items() if stdio and (not only or n in only or n == "direct")}
        for name, template in (extra_stdio or {}).items():
            targets[name] = shlex.split(template.format(upstream=shlex.join(upstream), policy=policy,
                                                        python=sys.executable,
                                                        gateway=shlex.join([*CLI, "gateway"])))
        print("gateway: stdio rounds ...", flush=True)
        by_stdio = anyio.run(stdio_rounds, targets, rounds) if len(targets) > 1 else []
    results = {**medians(http), **idle, **(medians(by_stdio) if by_stdio else {}),
               **ratios(http, by_stdio)}
    names = list(http[0])
    print(table(results, names), flush=True)
    if chart is not None:
        draw(results, names, chart)
    return results


def draw(results: Figures, names: Sequence[str], path: Path) -> None:
    try:
        from bench.plot import gateway_chart
    except ImportError as exc:
        print(f"chart: not drawn ({exc}); install the bench extra", flush=True)
        return
    from bench import machine

    info = machine()
    gateway_chart(results, names, path, f"{info['cpu_model']}, {info['cpu_count']} CPU(s)")
    print(f"chart: {path.relative_to(ROOT)}", flush=True)


def run() -> dict[str, float]:
    """Every figure of this bench (bench/run.py shows them and checks the goals)."""
    return measure()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_gateway")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--only", default="", help="comma-separated systems (direct always runs)")
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="NAME=COMMAND",
                        help="another HTTP system: {port} {upstream} {policy} {python} {gateway}")
    parser.add_argument("--no-stdio", action="store_true", help="HTTP systems only")
    parser.add_argument("--with-stdio", action="append", default=[], metavar="NAME=COMMAND",
                        help="another stdio system: {upstream} {policy} {python} {gateway}")
    args = parser.parse_args(argv)
    only = [n for n in args.only.split(",") if n]
    extra = dict(e.split("=", 1) for e in args.extra)
    extra_stdio = dict(e.split("=", 1) for e in args.with_stdio)
    started = time.perf_counter()
    # A narrowed or extended run is an experiment: it does not replace the chart in docs/.
    whole = not (only or extra or extra_stdio or args.no_stdio)
    results = measure(args.rounds, only, extra, extra_stdio, stdio=not args.no_stdio,
                      chart=CHART if whole else None)
    for key, value in sorted(results.items()):
        print(f"{key:<45} {value:10.3f}")
    print(f"gateway bench: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
