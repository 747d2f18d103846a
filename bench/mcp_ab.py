"""bench_mcp for two source trees side by side on a shared machine: `bench_mcp.measure()` in fresh
interpreters, alternating between the trees (the order swapped every pair), so that a change in the
machine's load falls on both alike. Prints each run and, per tree, the median, lowest and highest
overhead on both protocol paths, and the median of the paired differences. Not part of `make bench`.

    git archive REV src | tar -x -C /tmp/before
    .venv/bin/python -m bench.mcp_ab [--pairs N] [--rounds R] before=/tmp/before/src after=src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("mcp_call_overhead_pct", "mcp_call_overhead_us", "mcp_call_legacy_overhead_pct",
        "mcp_call_legacy_overhead_us")


def one_run(src: str, rounds: int) -> dict[str, float]:
    """`bench_mcp.measure()` with `src` first on the path, in a fresh interpreter."""
    code = (f"import json, bench.bench_mcp as b; b.ROUNDS = {rounds}; "
            "print(json.dumps(b.measure()))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"bench_mcp failed for {src}:\n{done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40, help="bench_mcp's ROUNDS per run")
    parser.add_argument("trees", nargs=2, metavar="NAME=SRC")
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.trees)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for pair in range(args.pairs):
        for name in (list(trees) if pair % 2 == 0 else list(trees)[::-1]):
            r = one_run(trees[name], args.rounds)
            runs[name].append(r)
            print(f"pair {pair + 1} {name}: 2026-07-28 {r['mcp_call_overhead_pct']:.2f} % "
                  f"({r['mcp_call_overhead_us']:.2f} µs), 2025-11-25 "
                  f"{r['mcp_call_legacy_overhead_pct']:.2f} % ({r['mcp_call_legacy_overhead_us']:.2f} µs), "
                  f"plain p50 {r['mcp_call_plain_p50_us']:.1f} µs", flush=True)
    for name, done in runs.items():
        for key in KEYS:
            values = [r[key] for r in done]
            print(f"{name:<8} {key:<30} median {statistics.median(values):6.2f}  "
                  f"({min(values):.2f}-{max(values):.2f})")
    first, second = list(trees)
    for key in KEYS:
        diffs = [b[key] - a[key] for a, b in zip(runs[first], runs[second], strict=True)]
        print(f"{second} - {first} {key:<30} median {statistics.median(diffs):+6.2f}  "
              f"({min(diffs):+.2f} to {max(diffs):+.2f})")


if __name__ == "__main__":
    main()
