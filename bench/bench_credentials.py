"""Per-caller credentials through the gateway (SPEC §14, issue 32): one `mcp-preconditions gateway`
in front of npm server-everything (2025-11-25, over HTTP) twice, as `static` (one static
Authorization header) and `user` (token exchange at the real oidc-provider), both tools requiring
`auth:oauth2` so every call is decided alike; callers are people signed in at the provider.

- `credentials_cpu_added_us`: the gateway's own CPU per call of `user__echo` (its exchanged
  credential cached, on the caller's own session) less per call of `static__echo`, one caller:
  the median of paired slices (static then user, user then static, alternately), each read from
  the process's nanosecond CPU clock, not /proc's 10 ms ticks (goal: at most 20 µs). One pair's
  difference scatters by ~75 µs (a static call is ~800 µs), so the median of 200 pairs moved by
  ±8 µs from run to run: 1,000 pairs, and `credentials_cpu_added_low_us`/`_high_us`, the 90 %
  bootstrap interval of that median, say how far one run's figure can be trusted;
- `credentials_throughput_ratio`: calls/s of 50 callers each with a credential of their own over
  calls/s of the same 50 callers through the static header, once each caller's first call (its
  exchange, its session) is made: the median of paired windows (static then user, user then
  static, alternately, both sets of sessions open throughout), so a drift of the machine's load
  between two long runs cannot decide it (goal: at least 0.9);
- `credentials_rss_1000_mb`: the gateway's RSS once 1,000 distinct callers have each called
  `user__echo` (1,000 exchanges, 1,000 sessions of their own; goal: under 120 MB).

    .venv/bin/python -m bench.bench_credentials [--rounds N] [--callers N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests.fixtures.credential_gateway import GATEWAY_SECRET, policy_text
from tests.fixtures.fleet import write_gateway_toml
from tests.fixtures.gateway_upstream import started as process_started
from tests.fixtures.mcp_servers import CLI, server_env
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, OidcServer
from tests.fixtures.ports import free_port
from tests.fixtures.upstreams import everything_http

from bench.loadgen import Session
from bench.systems import Running, started

ROUNDS = 5
SLICES, CALLS = 200, 25  # per round: pairs of slices, calls per tool per slice (CPU)
BOOTSTRAP = 1000  # resamples of the pairs, for the interval of their median
LOAD_SECONDS, WARMUP_SECONDS = 1.5, 0.5  # one throughput window
PAIRS = 2  # per round: pairs of throughput windows
CALLERS_LOAD, CALLERS_MEMORY = 50, 1000
TOOLS = {"static": "static__echo", "user": "user__echo"}


@contextmanager
def setup(directory: Path, oidc: OidcServer) -> Iterator[Running]:
    """The gateway (and server-everything behind it), both servers' tools requiring auth:oauth2."""
    policy = directory / "policy.toml"
    policy.write_text(policy_text(oidc, sign_in=False, extra="".join(
        f'[tools."{tool}"]\nrequirements = ["auth:oauth2"]\n' for tool in TOOLS.values())),
        encoding="utf-8")
    with started("everything", everything_http()) as upstream:
        config = write_gateway_toml(directory / "gateway.toml", policy, {
            "static": {"url": upstream.url, "headers": {"Authorization": "env:STATIC_TOKEN"}},
            "user": {"url": upstream.url}})
        with config.open("a", encoding="utf-8") as out:
            out.write(f'\n[servers.user.credentials]\nkind = "token-exchange"\n'
                      f'token_endpoint = "{oidc.issuer}/token"\nclient_id = "gateway"\n'
                      f'client_secret = "env:GW_SECRET"\naudience = "{CRM_AUDIENCE}"\n')
        env = {**server_env(), "GW_SECRET": GATEWAY_SECRET, "STATIC_TOKEN": "Bearer the-gateways-own"}
        base = f"http://127.0.0.1:{free_port()}"
        command = [*CLI, "gateway", "--config", str(config), "--listen", base]
        with process_started(command, env, base + "/mcp", base + "/healthz") as process:
            gateway = Running("gateway", process.url, process.process.pid)
            gateway.pids()
            try:
                yield gateway
            finally:
                gateway.reap()


def tokens(oidc: OidcServer, count: int, prefix: str) -> list[str]:
    """`count` people's own access tokens (authorization code flows at the provider, 8 at once)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda n: oidc.user_token(f"{prefix}{n}"), range(count)))


def cpu_clock(pid: int) -> Callable[[], float]:
    """Another process's CPU time (all its threads) in seconds, to the nanosecond: Linux's
    process CPU clock id, MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)."""
    clock = (~pid << 3) | 2
    return lambda: time.clock_gettime(clock)


async def cpu_per_call(gateway: Running, token: str, rounds: int) -> dict[str, list[float]]:
    """The gateway's own CPU per call of each tool, one caller, one session each, in paired slices
    (the order alternating, so a drift of the machine's load favours neither); "added": each pair's
    user less static."""
    sessions = {kind: await Session(gateway.url, token=token, tool=tool).open()
                for kind, tool in TOOLS.items()}
    out: dict[str, list[float]] = {kind: [] for kind in (*TOOLS, "added")}
    cpu = cpu_clock(gateway.root)
    try:
        for session in sessions.values():  # warm: the exchange, the caller's session, caches
            for _ in range(100):
                await session.call()
        for pair in range(rounds * SLICES):
            kinds = list(TOOLS) if pair % 2 == 0 else list(reversed(TOOLS))
            for kind in kinds:
                before = cpu()
                for _ in range(CALLS):
                    await sessions[kind].call()
                out[kind].append((cpu() - before) / CALLS * 1e6)
            out["added"].append(out["user"][-1] - out["static"][-1])
    finally:
        for session in sessions.values():
            await session.close()
    return out


async def throughput(gateway: Running, callers: list[str], pairs: int) -> list[float]:
    """Each pair's calls/s with per-user credentials over calls/s with the static header: one
    session per caller and tool, each opened (and called once: the exchange, the caller's own
    session) before any window; in a window every caller of one kind calls as fast as answers
    come."""
    sets = {kind: [await Session(gateway.url, token=t, tool=tool).open() for t in callers]
            for kind, tool in TOOLS.items()}
    ratios = []
    try:
        for sessions in sets.values():
            await asyncio.gather(*(s.call() for s in sessions))
        for pair in range(pairs):
            kinds = list(TOOLS) if pair % 2 == 0 else list(reversed(TOOLS))
            rate = {kind: await calls_per_second(sets[kind]) for kind in kinds}
            ratios.append(rate["user"] / rate["static"])
    finally:
        for sessions in sets.values():
            for session in sessions:
                await session.close()
    return ratios


async def calls_per_second(sessions: list[Session]) -> float:
    """Calls/s of these sessions calling at once, after a warm-up, over one window."""
    done, stop = 0, False

    async def loop(session: Session) -> None:
        nonlocal done
        while not stop:
            await session.call()
            done += 1

    tasks = [asyncio.create_task(loop(s)) for s in sessions]
    try:
        await asyncio.sleep(WARMUP_SECONDS)
        first, start = done, time.perf_counter()
        await asyncio.sleep(LOAD_SECONDS)
        calls, seconds = done - first, time.perf_counter() - start
    finally:
        stop = True
        await asyncio.gather(*tasks)
    return calls / seconds


async def many_callers(gateway: Running, callers: list[str]) -> float:
    """The gateway's RSS (MB) once every caller has called `user__echo` once, 16 at a time."""
    gate = asyncio.Semaphore(16)

    async def one(token: str) -> None:
        async with gate:
            session = await Session(gateway.url, token=token, tool=TOOLS["user"]).open()
            try:
                await session.call()
            finally:
                await session.close()

    await asyncio.gather(*(one(t) for t in callers))
    return gateway.rss_mb()


def interval(values: list[float], share: float = 0.9) -> tuple[float, float]:
    """The `share` bootstrap interval of the median of `values` (percentiles of the medians of
    BOOTSTRAP resamples, seeded: the same pairs give the same interval)."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values)))
                     for _ in range(BOOTSTRAP))
    tail = int(BOOTSTRAP * (1 - share) / 2)
    return medians[tail], medians[-tail - 1]


def run(rounds: int = ROUNDS, callers: int = CALLERS_MEMORY) -> dict[str, float]:
    oidc = OidcServer(free_port())
    oidc.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-credentials-") as tmp, \
                setup(Path(tmp), oidc) as gateway:
            load = tokens(oidc, CALLERS_LOAD, "load")
            cpu = asyncio.run(cpu_per_call(gateway, load[0], rounds))
            ratios = asyncio.run(throughput(gateway, load, rounds * PAIRS))
            idle_mb = gateway.rss_mb()
            rss = asyncio.run(many_callers(gateway, tokens(oidc, callers, "many")))
            exchanges = sum(1 for line in oidc.output().splitlines()
                            if line.startswith("exchange ") and line.endswith(CRM))
    finally:
        oidc.stop()
    static_us, user_us = statistics.median(cpu["static"]), statistics.median(cpu["user"])
    low, high = interval(cpu["added"])
    return {"credentials_static_cpu_us": static_us, "credentials_user_cpu_us": user_us,
            "credentials_cpu_added_us": statistics.median(cpu["added"]),
            "credentials_cpu_added_low_us": low, "credentials_cpu_added_high_us": high,
            "credentials_throughput_ratio": statistics.median(ratios),
            "credentials_rss_before_mb": idle_mb, "credentials_rss_1000_mb": rss,
            "credentials_exchanges": float(exchanges)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--callers", type=int, default=CALLERS_MEMORY)
    args = parser.parse_args()
    for name, value in run(args.rounds, args.callers).items():
        print(f"{name:34} {value:10.2f}")


if __name__ == "__main__":
    main()
