"""Many servers behind one gateway (SPEC §12), on 127.0.0.1 with the logging upstream of the tests
(tests/fixtures/gateway_upstream.py, over stdio):

- the same call (`s0__echo`, a satisfied requirement) through a gateway of 1 server and of 10, in
  interleaved rounds: p50 ratio (goal <= 1.05x);
- `tools/list` of 10 servers of 100 tools each, after the first listing: p50 (goal <= 20 ms), as a
  plain JSON-RPC client sees it (the SDK client's own validation of 1,000 tools is not the gateway's);
- start-up of 10 stdio servers in one gateway against the slowest of them alone (goal: <= 1.2x);
- the gateway's resident memory per server (10 servers against 1);
- issue 22: start-up of the gateway in front of one upstream of 1,500 tools with requirements, and a
  bystander's `echo` p50 during a burst of calls to unknown names, as a ratio to its p50 alone.

Run: .venv/bin/python -m bench.bench_fleet
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from time import perf_counter_ns

import anyio
import httpx
from mcp import Client
from tests.fixtures.fleet import command, fleet_http, write_gateway_toml
from tests.fixtures.gateway_upstream import OWN_TOOLS, UPSTREAM_STDIO
from tests.fixtures.mcp_servers import ROOT, server_env
from tests.fixtures.ports import free_port
from tests.fixtures.upstreams import Listening, listening

from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS

from . import percentile
from .loadgen import INITIALIZE, INITIALIZED, VERSION

SERVERS = 10
ROUNDS, PER_ROUND, WARMUP = 30, 20, 20
LISTINGS = 200
STARTS = 3  # start-up figures: the median of this many
MANY = 1_500
STALLING = 300  # the red-team pass's stall: 300 tools with requirements, unknown names beside
# The fleets' policy names s0's echo by its visible name; the one-server gateways' by its own (a
# policy naming a fleet server's tool by its own name is a near miss: that server is refused).
POLICY = 'environment = ["production"]\n[tools.s0__echo]\nrequirements = ["env:production"]\n'
SINGLE = 'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'

ECHO = {"text": "hi"}
ACCEPT = {"accept": "application/json, text/event-stream"}


async def session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A new MCP session on `url`: the headers its requests carry."""
    answer = await http.post(url, json=INITIALIZE, headers=ACCEPT)
    answer.raise_for_status()
    headers = {**ACCEPT, "mcp-protocol-version": VERSION}
    if "mcp-session-id" in answer.headers:
        headers["mcp-session-id"] = answer.headers["mcp-session-id"]
    await http.post(url, json=INITIALIZED, headers=headers)
    return headers


def _config(tmp: Path, servers: int, **env: str) -> Path:
    policy = tmp / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    entries = {f"s{i}": command(UPSTREAM_STDIO, env or None) for i in range(servers)}
    return write_gateway_toml(tmp / f"gateway-{servers}.toml", policy, entries)


# -- the same call through 1 and 10 servers ---------------------------------------------------------
async def _call_latency(urls: dict[str, str]) -> list[dict[str, list[int]]]:
    """Per round, each gateway's per-call nanoseconds; the rounds alternate which goes first, so
    that a noisy moment on a shared machine falls on both."""
    rounds: list[dict[str, list[int]]] = []
    async with Client(urls["1"], mode="legacy") as one, Client(urls["10"], mode="legacy") as ten:
        clients = {"1": one, "10": ten}
        for client in clients.values():
            for _ in range(WARMUP):
                result = await client.call_tool("s0__echo", ECHO)
                if result.is_error:
                    raise RuntimeError(f"s0__echo failed: {result}")
        for r in range(ROUNDS):
            samples: dict[str, list[int]] = {name: [] for name in clients}
            for name in (("1", "10") if r % 2 == 0 else ("10", "1")):
                for _ in range(PER_ROUND):
                    start = perf_counter_ns()
                    await clients[name].call_tool("s0__echo", ECHO)
                    samples[name].append(perf_counter_ns() - start)
            rounds.append(samples)
    return rounds


def call_figures(urls: dict[str, str]) -> dict[str, float]:
    """p50 of each, and the ratio as the median of the rounds' p50 ratios (robust to drift)."""
    rounds = anyio.run(_call_latency, urls)
    ratios = sorted(percentile(r["10"], 50) / percentile(r["1"], 50) for r in rounds)
    return {"fleet_call_1_server_p50_ms": percentile([v for r in rounds for v in r["1"]], 50) / 1e6,
            "fleet_call_10_servers_p50_ms": percentile([v for r in rounds for v in r["10"]], 50) / 1e6,
            "fleet_call_ratio": ratios[len(ratios) // 2]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# -- tools/list of 10 servers of 100 tools ------------------------------------------------------------
async def _listing_ms(url: str) -> list[float]:
    """Per-listing milliseconds of `tools/list` (the first one excluded), plain JSON-RPC."""
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    out: list[float] = []
    async with httpx.AsyncClient(timeout=60) as http:
        headers = await session(http, url)
        for i in range(LISTINGS + 1):
            start = perf_counter_ns()
            answer = await http.post(url, json=request, headers={**headers, **ACCEPT})
            text = answer.text
            if '"tools"' not in text:
                raise RuntimeError(f"no listing: {text[:200]}")
            if i:
                out.append((perf_counter_ns() - start) / 1e6)
    return out


def _tool_count(url: str) -> int:
    async def count() -> int:
        async with Client(url, mode="legacy") as client:
            return len((await client.list_tools()).tools)
    return anyio.run(count)


# -- start-up of 10 stdio servers, in-process -----------------------------------------------------------
async def _startup_seconds(specs: list[ServerSpec]) -> float:
    """From `Gateway.run()` until every server's tools are listed."""
    guard = Guard(parse_policy(POLICY.encode(), "bench.toml"))
    gateway = Gateway(guard, specs, lambda _ctx: ANONYMOUS)
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.run)
        with anyio.fail_after(300):
            while not all(m.catalog.listings["tools"].loaded for m in gateway.fleet):
                await anyio.sleep(0.005)
        elapsed = time.perf_counter() - start
        tg.cancel_scope.cancel()
    return elapsed


def startup_figures() -> dict[str, float]:
    specs = [ServerSpec(f"s{i}", f"s{i}__", command=UPSTREAM_STDIO[0], args=tuple(UPSTREAM_STDIO[1:]))
             for i in range(SERVERS)]
    alone = [sorted(anyio.run(_startup_seconds, [spec]) for _ in range(STARTS))[STARTS // 2]
             for spec in specs]
    together = sorted(anyio.run(_startup_seconds, specs) for _ in range(STARTS))[STARTS // 2]
    slowest = max(alone)
    # Starting a server is mostly CPU (an interpreter's imports): with fewer cores than servers,
    # no gateway can start them faster than their total CPU time over the cores.
    floor = max(slowest, sum(alone) / (os.cpu_count() or 1))
    return {"fleet_startup_10_s": together, "fleet_startup_slowest_alone_s": slowest,
            "fleet_startup_ratio": together / slowest, "fleet_startup_vs_cpu_floor": together / floor}


# -- issue 22: 1,500 tools; unknown names beside a bystander ---------------------------------------------
@contextmanager
def _single(policy: Path, **env: str) -> Iterator[Listening]:
    port = free_port()
    with listening([*_cli(), "gateway", "--policy", str(policy), "--listen", f"http://127.0.0.1:{port}",
                    "--", *UPSTREAM_STDIO], port, server_env(**env)) as gateway:
        yield gateway


def _cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from mcp_preconditions.cli import main; sys.exit(main())"]


def many_policy(tmp: Path, count: int) -> Path:
    """The bench's policy plus a requirement on each of `count` upstream tools `many0`, `many1`, ...:
    every one of them is compiled, as in the red-team pass's upstream."""
    policy = tmp / f"policy-{count}.toml"
    policy.write_text(SINGLE + "".join(f'[tools.many{i}]\nrequirements = ["env:production"]\n'
                                       for i in range(count)), encoding="utf-8")
    return policy


def many_tools_startup(policy: Path) -> float:
    """Seconds from starting the gateway to its first tools/list of its 1,512 tools, each of the 1,500
    with a requirement (median)."""
    times = []
    for _ in range(STARTS):
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        start = time.perf_counter()
        with listening([*_cli(), "gateway", "--policy", str(policy), "--listen",
                        f"http://127.0.0.1:{port}", "--", *UPSTREAM_STDIO], port,
                       server_env(GATEWAY_UPSTREAM_MANY=str(MANY))):
            times.append(time.perf_counter() - start)
            if _tool_count(url) != MANY + len(OWN_TOOLS):
                raise RuntimeError("the gateway did not list every tool")
    return sorted(times)[STARTS // 2]


BURST = """
import sys, random, anyio, httpx
from bench.bench_fleet import ACCEPT, session
async def main(url, seconds):
    async with httpx.AsyncClient(timeout=60) as http:
        headers = await session(http, url)
        async def loop():
            end = anyio.current_time() + seconds
            while anyio.current_time() < end:
                name = "nope%d" % random.randrange(10**9)
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1,
                    "method": "tools/call", "params": {"name": name, "arguments": {}}})
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(loop)
anyio.run(main, sys.argv[1], float(sys.argv[2]))
"""


async def _echo_p50(client: Client, count: int) -> float:
    samples = []
    for _ in range(count):
        start = perf_counter_ns()
        await client.call_tool("echo", ECHO)
        samples.append(perf_counter_ns() - start)
    return percentile(samples, 50) / 1e6


def bystander(policy: Path) -> dict[str, float]:
    """The bystander's echo p50 alone, then while another process sends unknown names (8 at once), in
    front of an upstream of 300 tools with requirements (each unknown name may re-list it)."""
    with _single(policy, GATEWAY_UPSTREAM_MANY=str(STALLING)) as gateway:
        async def measure() -> tuple[float, float]:
            async with Client(gateway.url, mode="legacy") as client:
                await _echo_p50(client, WARMUP)
                alone = await _echo_p50(client, 200)
                burst = subprocess.Popen([sys.executable, "-c", BURST, gateway.url, "60"], cwd=ROOT,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    await anyio.sleep(2)  # the burst under way
                    during = await _echo_p50(client, 200)
                finally:
                    burst.kill()
                    burst.wait()
            return alone, during
        alone, during = anyio.run(measure)
    return {"bystander_echo_alone_p50_ms": alone, "bystander_echo_burst_p50_ms": during,
            "bystander_burst_ratio": during / alone}


def run() -> dict[str, float]:
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    logging.getLogger("mcp_preconditions").setLevel(logging.ERROR)  # the in-process gateways' notes
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        one_dir, ten_dir, many_dir = (Path(tmp) / d for d in ("one", "ten", "many"))
        for d in (one_dir, ten_dir, many_dir):
            d.mkdir()
        one = stack.enter_context(fleet_http(_config(one_dir, 1)))
        ten = stack.enter_context(fleet_http(_config(ten_dir, SERVERS)))
        results.update(call_figures({"1": one.url, "10": ten.url}))
        one_mb, ten_mb = rss_mb(one.process.pid), rss_mb(ten.process.pid)
        results["fleet_rss_1_server_mb"] = one_mb
        results["fleet_rss_per_server_mb"] = (ten_mb - one_mb) / (SERVERS - 1)
        stack.close()
        with fleet_http(_config(many_dir, SERVERS, GATEWAY_UPSTREAM_MANY=str(100 - len(OWN_TOOLS)))) as many:
            if _tool_count(many.url) != SERVERS * 100:
                raise RuntimeError("the 10 servers do not list 100 tools each")
            listing = anyio.run(_listing_ms, many.url)
        results["fleet_tools_list_1000_p50_ms"] = percentile([int(v * 1e6) for v in listing], 50) / 1e6
        results.update(startup_figures())
        results["gateway_1500_tools_startup_s"] = many_tools_startup(many_policy(Path(tmp), MANY))
        results.update(bystander(many_policy(Path(tmp), STALLING)))
    return results


def main() -> None:
    for key, value in sorted(run().items()):
        print(f"{key:<40} {value:10.3f}")


if __name__ == "__main__":
    main()
