"""The charts `make bench` draws into bench/: latency distributions per engine (latency.png) and
per-decision cost and compile time against the number of tools (scale.png).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a build machine
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from . import percentile

ENGINES = (("guard", "mcp-preconditions guard", "#1b7837"),
           ("cedarpy", "Cedar (cedarpy, pre-parsed)", "#2166ac"),
           ("casbin", "Casbin (Enforcer)", "#b2182b"),
           ("floor", "floor: frozenset <=", "#777777"))


def latency_chart(samples: Mapping[str, Sequence[int]], path: Path, machine: str) -> Path:
    """Log-scale histograms of per-decision latency, one per engine, with the median marked."""
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    edges = [0.05 * 1.06**i for i in range(200)]  # 0.05 µs .. ~5 ms, log-spaced
    for key, label, colour in ENGINES:
        values = samples.get(key)
        if not values:
            continue
        cap = percentile(values, 99.9)
        data = [v / 1000 for v in values if v <= cap]
        ax.hist(data, bins=edges, histtype="step", linewidth=1.6, color=colour,
                label=f"{label}: p50 {percentile(values, 50) / 1000:.2f} µs, "
                      f"p99 {percentile(values, 99) / 1000:.2f} µs")
        ax.axvline(percentile(values, 50) / 1000, color=colour, linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("latency per decision (µs, log scale)")
    ax.set_ylabel("decisions")
    ax.set_title("SEP-2487 launch_rocket: 6 requirements, 5 namespaces, same decisions", fontsize=11)
    ax.legend(fontsize=8, loc="upper right", frameon=False)
    fig.text(0.01, 0.01, machine, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def scale_chart(rows: Mapping[int, Mapping[str, float]], path: Path, machine: str) -> Path:
    """Per-decision cost (flat is the goal) and compile time, against the number of tools."""
    sizes = sorted(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)
    left.plot(sizes, [rows[n]["probe_p50_us"] for n in sizes], "o-", color="#1b7837",
              label="launch_rocket-like tool, p50")
    left.plot(sizes, [rows[n]["probe_p99_us"] for n in sizes], "o--", color="#1b7837", alpha=0.5,
              label="launch_rocket-like tool, p99")
    left.plot(sizes, [rows[n]["mixed_p50_us"] for n in sizes], "s-", color="#762a83",
              label="random walk over all tools, p50")
    left.set_xscale("log")
    left.set_ylim(bottom=0)
    left.set_xlabel("tools in the policy")
    left.set_ylabel("µs per decision")
    left.set_title("per-decision cost", fontsize=11)
    left.legend(fontsize=8, frameon=False)
    right.plot(sizes, [rows[n]["compile_s"] for n in sizes], "o-", color="#2166ac")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("tools in the policy")
    right.set_ylabel("compile time (s)")
    right.set_title("compile (validate + lint + plan), once per load", fontsize=11)
    for n in sizes:
        right.annotate(f"{rows[n]['memory_mb']:.1f} MB", (n, rows[n]["compile_s"]),
                       textcoords="offset points", xytext=(4, -12), fontsize=7)
    fig.text(0.01, 0.01, machine, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def gateway_chart(results: Mapping[str, float], names: Sequence[str], path: Path, machine: str) -> Path:
    """The gateway bench side by side: latency at 1 client, calls/s at 10 and 50 clients, CPU per
    call (the proxy's own part and the rest of its tree), and the proxy's resident memory."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=120)
    xs = range(len(names))
    colours = ["#1b7837" if n.startswith("gateway") else "#777777" if n == "direct" else "#2166ac"
               for n in names]

    def bars(ax: Any, keys: Sequence[tuple[str, str]], title: str, unit: str) -> None:
        width = 0.8 / len(keys)
        for i, (suffix, label) in enumerate(keys):
            values = [results.get(f"{n}_{suffix}", 0.0) for n in names]
            ax.bar([x + i * width for x in xs], values, width, label=label, color=colours,
                   alpha=1.0 - 0.45 * i, edgecolor="black", linewidth=0.4)
        ax.set_xticks([x + width * (len(keys) - 1) / 2 for x in xs], names, rotation=30, ha="right",
                      fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        handles = [Patch(facecolor="#999999", alpha=1.0 - 0.45 * i, edgecolor="black", linewidth=0.4,
                         label=label) for i, (_, label) in enumerate(keys)]
        ax.legend(handles=handles, fontsize=7, frameon=False)

    bars(axes[0][0], [("http_p50_ms", "p50"), ("http_p99_ms", "p99")], "latency, 1 client", "ms")
    bars(axes[0][1], [("http_10_clients_per_s", "10 clients"), ("http_50_clients_per_s", "50 clients")],
         "throughput (higher is better)", "calls/s")
    bars(axes[1][0], [("cpu_50_ms_per_call", "proxy + upstream"),
                      ("proxy_cpu_50_ms_per_call", "proxy alone")], "CPU per call at 50 clients",
         "ms of CPU")
    bars(axes[1][1], [("rss_idle_mb", "idle"), ("rss_50_mb", "50 sessions")], "proxy RSS", "MB")
    fig.suptitle("npm server-everything `echo` over streamable HTTP: direct, through the gateway "
                 "(green), through the proxies (blue)", fontsize=11)
    fig.text(0.01, 0.01, f"{machine}; median of three rounds; bench/bench_gateway.py", fontsize=7,
             color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(path)
    plt.close(fig)
    return path
