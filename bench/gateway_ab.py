"""The HTTP hop's p50 against `direct`, for builds side by side on a shared machine: `direct`
(server-everything over HTTP), `gateway_httpup` (this tree, in front of it) and every `--with` system,
one session each at one client. Calls alternate between the systems one by one (`--blocked`: blocks
of `--calls`, the order rotated each round, as bench_gateway takes them), so a change in the
machine's load falls on all of them alike. Not part of `make bench`.

    git archive REV src | tar -x -C /tmp/before
    .venv/bin/python -m bench.gateway_ab [--calls N] [--rounds R] [--blocked] \\
        --with "before=env PYTHONPATH=/tmp/before/src {gateway} --policy {policy} \\
                --listen http://127.0.0.1:{port} --upstream-url {direct}"
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.loadgen import Session
from bench.systems import POLICY, everything

WARMUP = 50


async def _timed(session: Session) -> float:
    start = time.perf_counter_ns()
    await session.call()
    return (time.perf_counter_ns() - start) / 1e6


async def one_round(sessions: dict[str, Session], calls: int, blocked: bool, shift: int
                    ) -> dict[str, float]:
    """Each system's p50 (ms) over `calls` calls in this round."""
    names = list(sessions)
    names = names[shift % len(names):] + names[:shift % len(names)]
    samples: dict[str, list[float]] = {n: [] for n in names}
    if blocked:
        for name in names:
            samples[name] = [await _timed(sessions[name]) for _ in range(calls)]
    else:
        for _ in range(calls):
            for name in names:
                samples[name].append(await _timed(sessions[name]))
    return {n: statistics.median(v) for n, v in samples.items()}


async def measure(urls: dict[str, str], calls: int, rounds: int, blocked: bool) -> None:
    sessions = {name: await Session(url).open() for name, url in urls.items()}
    for session in sessions.values():
        for _ in range(WARMUP):
            await session.call()
    ratios: dict[str, list[float]] = {n: [] for n in urls}
    added: dict[str, list[float]] = {n: [] for n in urls}
    for round_ in range(rounds):
        p50 = await one_round(sessions, calls, blocked, round_)
        direct = p50["direct"]
        for name in urls:
            ratios[name].append(p50[name] / direct)
            added[name].append(p50[name] - direct)
        print(f"round {round_ + 1}: " + "  ".join(
            f"{n} {p50[n]:.3f} ms ({p50[n] / direct:.2f}x)" for n in urls), flush=True)
    for name in urls:
        if name != "direct":
            print(f"{name:<16} p50/direct median {statistics.median(ratios[name]):.2f}x "
                  f"(rounds {min(ratios[name]):.2f}-{max(ratios[name]):.2f}x), added median "
                  f"{statistics.median(added[name]):.3f} ms", flush=True)
    for session in sessions.values():
        await session.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_ab")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocked", action="store_true", help="blocks of --calls per system")
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="NAME=COMMAND",
                        help="another HTTP system: {port} {direct} {policy} {python} {gateway}")
    args = parser.parse_args(argv)
    extra = dict(e.split("=", 1) for e in args.extra)
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "echo.toml"
        policy.write_text(POLICY, encoding="utf-8")
        with everything(policy, extra, ["gateway_httpup", *extra]) as systems:
            asyncio.run(measure({n: s.url for n, s in systems.items()}, args.calls, args.rounds,
                                args.blocked))


if __name__ == "__main__":
    main()
