"""`make bench`: every benchmark, each in a fresh interpreter of its own, a table on stdout,
bench/results.json (regenerated, not committed) and the charts bench/latency.png, bench/scale.png and
docs/gateway-performance.png (drawn by bench_gateway).

The other issues' benches (bench_auth, bench_live, bench_mcp, bench_gateway, bench_quota,
bench_telemetry, bench_fleet, ...) join when present: each module's `run() -> dict[str,
float]` is merged into the results.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import fresh, machine, pace_ms

HERE = Path(__file__).parent
RESULTS = HERE / "results.json"
OTHERS = ("bench_auth", "bench_live", "bench_mcp", "bench_gateway", "bench_agents", "bench_replicas",
          "bench_quota", "bench_telemetry", "bench_fleet", "bench_credentials",
          "bench_denial", "bench_authzen", "bench_pdp")

# metric -> (goal text, test): bounds a user would feel (a decision, a gateway hop, a tool list),
# plus "flat" read as at most 1.5x from 10 to 100k tools. Cedar and Casbin are shown, not goals.
GOALS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "guard_p50_us": ("<= 3 µs", lambda v: v <= 3),
    "guard_p99_us": ("<= 10 µs", lambda v: v <= 10),
    "arguments_vs_plain": ("<= 1.5x", lambda v: v <= 1.5),
    "mcp_call_overhead_pct": ("<= 5 %", lambda v: v <= 5),
    "filter_10k_ms": ("<= 20 ms", lambda v: v <= 20),
    "decide_flatness": ("<= 1.5x", lambda v: v <= 1.5),
    # issue 25 (tightened by issue 30): the gateway hop against direct server-everything and the
    # proxies people install
    "gateway_throughput_vs_direct": (">= 2x", lambda v: v >= 2),
    "gateway_throughput_vs_best_peer": (">= 1x", lambda v: v >= 1.0),
    "gateway_cpu_vs_npm_mcp_proxy": ("<= 1x", lambda v: v <= 1.0),
    "gateway_proxy_cpu_50_ms_per_call": ("<= 0.3 ms", lambda v: v <= 0.3),
    "gateway_stdio_added_ms": ("<= 0.3 ms", lambda v: v <= 0.3),
    "gateway_http_p50_ratio": ("<= 1.1x", lambda v: v <= 1.1),
    "gateway_http_p99_ratio": ("<= 1.3x", lambda v: v <= 1.3),
    "gateway_httpup_p50_ratio": ("<= 1.2x", lambda v: v <= 1.2),
    "gateway_rss_idle_mb": ("<= 60 MB", lambda v: v <= 60),
    "gateway_rss_50_mb": ("<= 60 MB", lambda v: v <= 60),
    "gateway_fleet_throughput_vs_one": (">= 0.95x", lambda v: v >= 0.95),
    "gateway_fleet_cpu_vs_one": ("<= 1.05x", lambda v: v <= 1.05),
    "gateway_fleet_p50_vs_one": ("<= 1.05x", lambda v: v <= 1.05),
    "agents_pydantic_ai_filter_pct": ("<= 5 %", lambda v: v <= 5),
    "agents_openai_filter_pct": ("<= 5 %", lambda v: v <= 5),
    "quota_memory_added_us": ("<= 2 µs", lambda v: v <= 2),
    "quota_redis_round_trips": ("1 per decision", lambda v: v == 1),
    "telemetry_metrics_overhead_pct": ("<= 3 %", lambda v: v <= 3),
    "fleet_call_ratio": ("<= 1.05x", lambda v: v <= 1.05),
    "fleet_tools_list_1000_p50_ms": ("<= 20 ms", lambda v: v <= 20),
    "fleet_startup_ratio": ("<= 1.2x", lambda v: v <= 1.2),
    "telemetry_gateway_metrics_overhead_pct": ("<= 3 %", lambda v: v <= 3),
    # issue 32: per-caller credentials against one static header
    "credentials_cpu_added_us": ("<= 20 µs", lambda v: v <= 20),
    "credentials_throughput_ratio": (">= 0.9x", lambda v: v >= 0.9),
    "credentials_rss_1000_mb": ("< 120 MB", lambda v: v < 120),
    "denial_envelope_added_us": ("<= 5 µs", lambda v: v <= 5),  # issue 33: a denial's envelope
    # issue 44: the Todo decisions per second, our decision point against Cerbos (same client)
    "authzen_vs_cerbos": (">= 1x", lambda v: v >= 1.0),
    # issue 44: `pdp:` as an enforcement point, against a real Cerbos
    "pdp_cached_added_us": ("<= 10 µs", lambda v: v <= 10),
    "pdp_uncached_round_trips": ("1 per call", lambda v: v == 1),
}
SHOWN = ("guard_p50_us", "guard_p99_us", "cedarpy_p50_us", "cedarpy_p99_us", "casbin_p50_us",
         "casbin_p99_us", "floor_p50_us", "speedup_vs_cedarpy", "speedup_vs_casbin", "guard_vs_floor",
         "guard_recorded_p50_us", "guard_denied_p50_us", "guard_arguments_p50_us",
         "arguments_vs_plain", "cedarpy_internal_p50_us",
         "timer_overhead_ns", "agreement_cases", "compile_10_s", "compile_1k_s", "compile_100k_s",
         "memory_1k_mb", "memory_100k_mb", "decide_10_p50_us", "decide_1k_p50_us",
         "decide_100k_p50_us", "decide_mixed_100k_p50_us", "decide_flatness", "filter_10k_ms",
         "cached_token_p50_us", "mcp_call_overhead_pct",
         "direct_http_p50_ms", "gateway_http_p50_ms", "direct_http_p99_ms", "gateway_http_p99_ms",
         "gateway_http_p50_ratio", "gateway_http_p99_ratio", "gateway_httpup_http_p50_ms",
         "gateway_httpup_p50_ratio", "direct_http_50_clients_per_s", "gateway_http_50_clients_per_s",
         "fastmcp_http_50_clients_per_s", "pypi_mcp_proxy_http_50_clients_per_s",
         "npm_mcp_proxy_http_50_clients_per_s", "supergateway_http_50_clients_per_s",
         "gateway_http_50_gen_ms", "gateway_throughput_vs_direct", "gateway_throughput_vs_best_peer",
         "direct_cpu_50_ms_per_call", "gateway_cpu_50_ms_per_call", "npm_mcp_proxy_cpu_50_ms_per_call",
         "gateway_proxy_cpu_50_ms_per_call", "gateway_cpu_vs_npm_mcp_proxy", "gateway_rss_idle_mb",
         "gateway_rss_50_mb", "direct_stdio_p50_ms", "gateway_stdio_p50_ms", "fastmcp_stdio_p50_ms",
         "gateway_stdio_added_ms", "gateway_fleet_throughput_vs_one", "gateway_fleet_cpu_vs_one",
         "gateway_fleet_p50_vs_one",
         "agents_pydantic_ai_filter_pct", "agents_openai_filter_pct",
         "quota_plain_p50_us", "quota_memory_p50_us", "quota_memory_added_us", "quota_redis_p50_us",
         "quota_redis_p99_us", "quota_redis_round_trips",
         "telemetry_metrics_off_p50_us", "telemetry_metrics_on_p50_us",
         "telemetry_metrics_overhead_us", "telemetry_metrics_overhead_pct",
         "telemetry_tracing_untraced_p50_us", "telemetry_tracing_p50_us",
         "telemetry_tracing_overhead_pct",
         "fleet_call_1_server_p50_ms", "fleet_call_10_servers_p50_ms", "fleet_call_ratio",
         "fleet_tools_list_1000_p50_ms", "fleet_startup_slowest_alone_s", "fleet_startup_10_s",
         "fleet_startup_ratio", "fleet_startup_vs_cpu_floor", "fleet_rss_1_server_mb",
         "fleet_rss_per_server_mb", "gateway_1500_tools_startup_s", "bystander_echo_alone_p50_ms",
         "bystander_echo_burst_p50_ms", "bystander_burst_ratio",
         "telemetry_gateway_off_p50_ms", "telemetry_gateway_on_p50_ms",
         "telemetry_gateway_metrics_overhead_us", "telemetry_gateway_metrics_overhead_pct",
         "telemetry_gateway_off_cpu_ms_per_call", "telemetry_gateway_on_cpu_ms_per_call",
         "telemetry_gateway_metrics_cpu_pct", "telemetry_gateway_traced_p50_ms",
         "telemetry_gateway_tracing_overhead_pct", "telemetry_gateway_traced_cpu_ms_per_call",
         "telemetry_gateway_tracing_cpu_pct",
         "credentials_static_cpu_us", "credentials_user_cpu_us", "credentials_cpu_added_us",
         "credentials_cpu_added_low_us", "credentials_cpu_added_high_us",
         "credentials_throughput_ratio", "credentials_rss_before_mb", "credentials_rss_1000_mb",
         "credentials_exchanges",
         "denial_with_result_p50_us", "denial_envelope_added_us", "denial_mcp_added_us",
         "authzen_ours_per_s", "authzen_cerbos_per_s", "authzen_vs_cerbos", "authzen_ours_p50_ms",
         "authzen_cerbos_p50_ms", "authzen_ours_p99_ms", "authzen_cerbos_p99_ms",
         "authzen_ours_cpu_us", "authzen_cerbos_cpu_us", "authzen_cpu_vs_cerbos",
         "authzen_ours_plain_per_s", "authzen_clients",
         "pdp_plain_p50_us", "pdp_cached_p50_us", "pdp_cached_added_us", "pdp_uncached_p50_us",
         "pdp_round_trip_p50_us", "pdp_uncached_added_us", "pdp_uncached_round_trips")



def need(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        raise SystemExit(f"bench: {module} is missing; install the bench extra: "
                         f"pip install -e '.[bench]'") from None


def others() -> tuple[dict[str, float], list[str]]:
    """The other issues' results, and one line per bench on how it went."""
    merged: dict[str, float] = {}
    lines: list[str] = []
    for name in OTHERS:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bench.{name}":
                lines.append(f"{name}: not available (needs {exc.name})")
            else:
                lines.append(f"{name}: not available (bench/{name}.py is not there yet)")
            continue
        except Exception as exc:  # a half-finished module elsewhere must not lose our results
            lines.append(f"{name}: not available (import failed: {type(exc).__name__}: {exc})")
            continue
        if not callable(getattr(module, "run", None)):
            lines.append(f"{name}: not available (no run() function)")
            continue
        started = time.perf_counter()
        try:
            found = fresh(name)
        except (Exception, SystemExit) as exc:  # one broken bench must not lose the others
            lines.append(f"{name}: failed: {type(exc).__name__}: {exc}")
            continue
        for key, value in dict(found).items():
            merged[key if key not in merged else f"{name}.{key}"] = float(value)
        lines.append(f"{name}: {len(found)} result(s) in {time.perf_counter() - started:.1f} s")
    return merged, lines


def table(results: dict[str, Any]) -> str:
    rows = [("metric", "value", "goal", "")]
    for key in SHOWN:
        if key not in results:
            continue
        value = results[key]
        goal, test = GOALS.get(key, ("", None))
        verdict = "" if test is None else ("met" if test(value) else "MISSED")
        rows.append((key, f"{value:,.3f}", goal, verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}"
                     for r in rows)


def charts(raw: dict[str, list[int]], rows: dict[int, dict[str, float]], where: str) -> list[str]:
    try:
        from .plot import latency_chart, scale_chart
    except ImportError as exc:
        return [f"charts: not drawn ({exc}); install the bench extra"]
    drawn = [latency_chart(raw, HERE / "latency.png", where), scale_chart(rows, HERE / "scale.png", where)]
    return [f"chart: {p.relative_to(HERE.parent)}" for p in drawn]


def main() -> int:
    for module in ("cedarpy", "casbin", "matplotlib"):
        need(module)
    info = machine()
    info["pace_start_ms"] = pace_ms()
    where = (f"{info['cpu_model']}, {info['cpu_count']} CPU(s), Python {info['python']}, "
             f"{info['platform']}")
    print(f"machine: {where}", flush=True)
    print("engines: guard vs cedarpy vs casbin (agreement first) ...", flush=True)
    engines, raw = fresh("bench_engines", "measure")
    print("scale: 10 / 1,000 / 100,000 tools, client filtering of 10,000 ...", flush=True)
    scale, rows = fresh("bench_scale", "measure")
    print("other benches ...", flush=True)
    extra, lines = others()
    results: dict[str, Any] = {**engines, **scale, **{k: v for k, v in extra.items()
                                                      if k not in engines and k not in scale}}
    info["pace_end_ms"] = pace_ms()
    results["machine"] = info
    results["generated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["goals"] = {k: g for k, (g, _) in GOALS.items()}
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print()
    print(table(results))
    print()
    pace = (f"machine pace: {info['pace_start_ms']:.1f} ms at the start, {info['pace_end_ms']:.1f} ms "
            f"at the end (sum(range(10**6)); lower is faster, absolute figures move with it)")
    for line in [*lines, *charts(raw, rows, where), pace,
                 f"results: {RESULTS.relative_to(HERE.parent)}"]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
