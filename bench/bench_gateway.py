"""The gateway's cost on a real hop: npm server-everything's `echo` called directly, through
`mcp-preconditions gateway` (a satisfied requirement on echo, so the guard decides every call) and
through fastmcp 4.1.2's `create_proxy`, interleaved in one run, over streamable HTTP and over stdio,
all on 127.0.0.1. Per call p50/p99; over HTTP, throughput at 1, 10 and 50 concurrent clients.

Goals: the gateway <= 1.3x direct p50 on both transports; >= 3x fastmcp's proxy throughput at 50
clients. Every client is the MCP SDK's at 2025-11-25: the version where fastmcp's proxy works in
front of server-everything (at 2026-07-28 it hands the client an empty tool list).
Run: .venv/bin/python -m bench.bench_gateway
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from pathlib import Path
from time import perf_counter, perf_counter_ns
from typing import Any

import anyio
import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from tests.fixtures.mcp_servers import ROOT, server_env
from tests.fixtures.upstreams import (
    everything_http,
    everything_stdio,
    fastmcp_proxy_http,
    fastmcp_proxy_stdio,
    gateway_http,
    gateway_stdio,
)

from bench import percentile

ROUNDS = 10
PER_ROUND = 40
WARMUP = 20
CLIENTS = (1, 10, 50)
CALLS_PER_LEVEL = 400  # split over the clients of a level; a bounded loop, not a timed one
POLICY = 'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
ECHO = {"message": "hi"}
Target = str | Sequence[str]  # a streamable-HTTP URL, or the command line of a stdio server


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Client]:
    if isinstance(target, str):
        transport: Any = streamable_http_client(target)
    else:
        # stderr dropped for every way alike: the gateway logs each decision there, which is part of
        # its cost but not of this table.
        quiet = ["sh", "-c", 'exec "$@" 2>/dev/null', "sh", *target]
        transport = StdioServerParameters(command=quiet[0], args=quiet[1:], env=server_env(), cwd=ROOT)
    async with Client(transport, mode="legacy") as client:
        result = await client.call_tool("echo", ECHO)  # each way must really echo, or it measures nothing
        if result.is_error or "Echo: hi" not in str(result.content):
            raise RuntimeError(f"{target!r} did not echo: {result}")
        yield client


async def latency(targets: dict[str, Target]) -> dict[str, list[int]]:
    """Per-call nanoseconds of each way, one session each, in interleaved rounds so that a noisy
    moment on a shared machine spreads over all of them."""
    async with AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(connect(t)) for name, t in targets.items()}
        for client in clients.values():
            for _ in range(WARMUP):
                await client.call_tool("echo", ECHO)
        samples: dict[str, list[int]] = {name: [] for name in clients}
        for _ in range(ROUNDS):
            for name, client in clients.items():
                for _ in range(PER_ROUND):
                    start = perf_counter_ns()
                    await client.call_tool("echo", ECHO)
                    samples[name].append(perf_counter_ns() - start)
    return samples


# The load generator speaks plain JSON-RPC over httpx: with the SDK's client, one Python process
# driving 50 sessions saturates before any of the servers does (it measured the client, not them).
ACCEPT = {"accept": "application/json, text/event-stream"}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "0"}}}
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": ECHO}}


async def session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A new MCP session on `url`: the headers its calls carry."""
    answer = await http.post(url, json=INITIALIZE, headers=ACCEPT)
    answer.raise_for_status()
    headers = {**ACCEPT, "mcp-protocol-version": "2025-11-25"}
    if "mcp-session-id" in answer.headers:
        headers["mcp-session-id"] = answer.headers["mcp-session-id"]
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def echo(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
    """One call, done when its answer arrives (an SSE stream may stay open a little longer)."""
    async with http.stream("POST", url, json=CALL, headers=headers) as answer:
        async for line in answer.aiter_lines():
            if "Echo: hi" in line:
                return
    raise RuntimeError(f"{url} did not echo (HTTP {answer.status_code})")


async def throughput(url: str, clients: int) -> float:
    """Calls per second of `clients` concurrent sessions, each making its share of CALLS_PER_LEVEL."""
    each = max(2, CALLS_PER_LEVEL // clients)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        sessions = [await session(http, url) for _ in range(clients)]

        async def loop(headers: dict[str, str]) -> None:
            for _ in range(each):
                await echo(http, url, headers)

        start = perf_counter()
        async with anyio.create_task_group() as tg:
            for headers in sessions:
                tg.start_soon(loop, headers)
        return clients * each / (perf_counter() - start)


def summarise(prefix: str, samples: dict[str, list[int]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, values in samples.items():
        out[f"{name}_{prefix}_p50_ms"] = percentile(values, 50) / 1e6
        out[f"{name}_{prefix}_p99_ms"] = percentile(values, 99) / 1e6
    out[f"gateway_{prefix}_ratio"] = out[f"gateway_{prefix}_p50_ms"] / out[f"direct_{prefix}_p50_ms"]
    out[f"fastmcp_{prefix}_ratio"] = out[f"fastmcp_{prefix}_p50_ms"] / out[f"direct_{prefix}_p50_ms"]
    return out


def run() -> dict[str, float]:
    """Every figure of this bench (the keys bench/run.py shows and checks against the goals)."""
    # The readiness probes close their sessions while a server may still be streaming: the SDK logs
    # that as an error, which is noise in a bench table.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        policy = Path(tmp) / "echo.toml"
        policy.write_text(POLICY, encoding="utf-8")
        http = {"direct": stack.enter_context(everything_http()).url,
                "gateway": stack.enter_context(gateway_http(policy, everything_stdio())).url,
                "fastmcp": stack.enter_context(fastmcp_proxy_http(everything_stdio())).url}
        stdio: dict[str, Target] = {"direct": everything_stdio(),
                                    "gateway": gateway_stdio(policy, everything_stdio()),
                                    "fastmcp": fastmcp_proxy_stdio(everything_stdio())}
        results = summarise("http", anyio.run(latency, dict[str, Target](http)))
        results.update(summarise("stdio", anyio.run(latency, stdio)))
        for clients in CLIENTS:  # the three ways interleaved at each level
            for name, url in http.items():
                results[f"{name}_http_{clients}_clients_per_s"] = anyio.run(throughput, url, clients)
    results["gateway_vs_fastmcp_throughput"] = (results["gateway_http_50_clients_per_s"]
                                                / results["fastmcp_http_50_clients_per_s"])
    return results


def main() -> None:
    for key, value in sorted(run().items()):
        print(f"{key:<40} {value:10.3f}")


if __name__ == "__main__":
    main()
