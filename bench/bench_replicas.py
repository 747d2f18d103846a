"""The measured inputs of the capacity model in docs/scaling.md: Redis GET latency and throughput,
Redis operations per decision with and without the state cache, decisions per second of one Guard,
what a policy bundle poll costs (a 304, and a full fetch + verify + compile), and real gateway
replicas: one at saturation (denied by the guard, and allowed through to a real upstream), and
p50 / p99 through haproxy (examples/haproxy/haproxy.cfg) with 1 and 3 replicas.

Run: .venv/bin/python -m bench.bench_replicas (prints JSON); `run()` for bench/run.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import httpx2
import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions import Guard, Identity, parse_policy
from mcp_preconditions.drivers.bundle import BundleReloader, load_policy_url

from . import percentile
from .bench_live import KEYS, guard_for, redis_server

NOBODY = Identity()
SECONDS = 1.5  # per throughput figure
CONCURRENCY = 64  # decisions in flight at once in the concurrent figures
BUNDLE_TOOLS = 1_000
POLLS = 200


# -- Redis -----------------------------------------------------------------------------------------
def redis_get_figures(url: str) -> dict[str, float]:
    """GET latency from redis-py (one connection, sequential) and GET throughput from
    redis-benchmark (20 connections, no pipelining)."""
    client = redis.Redis.from_url(url)
    client.set("bench:k0", "true")
    samples = []
    for _ in range(3_000):
        start = time.perf_counter_ns()
        client.get("bench:k0")
        samples.append(time.perf_counter_ns() - start)
    client.close()
    port = url.rsplit(":", 1)[1].split("/")[0]
    out = {"redis_get_p50_us": percentile(samples, 50) / 1000,
           "redis_get_p99_us": percentile(samples, 99) / 1000}
    binary = shutil.which("redis-benchmark")
    if binary is not None:
        csv = subprocess.run([binary, "-h", "127.0.0.1", "-p", port, "-t", "get", "-n", "50000",
                              "-c", "20", "--csv"], capture_output=True, text=True, check=True).stdout
        for line in csv.splitlines():
            if line.startswith('"GET"'):
                out["redis_get_rps"] = float(line.split(",")[1].strip('"'))
    return out


def commands_run(client: redis.Redis) -> int:
    """Every command the server has run so far (INFO commandstats), minus our own INFO calls."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def decisions_per_second(guard: Guard, concurrency: int, client: redis.Redis
                               ) -> tuple[float, float]:
    """Decisions per second for SECONDS with `concurrency` in flight (random tools over KEYS state
    keys), and Redis commands per decision over the same run."""
    before, done = commands_run(client), 0
    end = time.perf_counter() + SECONDS
    start = time.perf_counter()
    while time.perf_counter() < end:
        batch = [guard.check_identity(f"t{random.randrange(KEYS)}", NOBODY) for _ in range(concurrency)]
        for decision in await asyncio.gather(*batch):
            assert not decision.errors, decision  # an error would make the figure meaningless
        done += concurrency
    rate = done / (time.perf_counter() - start)
    return rate, (commands_run(client) - before) / done


async def guard_figures(url: str) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    for i in range(KEYS):
        client.set(f"bench:k{i}", "true" if i % 2 == 0 else "false")
    out: dict[str, float] = {}
    for name, ttl in (("uncached", 0.0), ("cached_1s", 1.0)):
        guard = guard_for(url, ttl)
        for concurrency in (1, CONCURRENCY):
            rate, ops = await decisions_per_second(guard, concurrency, client)
            out[f"replica_decisions_per_s_{name}_c{concurrency}"] = rate
            out[f"redis_ops_per_decision_{name}_c{concurrency}"] = ops
    client.close()
    static = Guard(parse_policy(b'environment = ["production"]\n[tools.t]\nrequirements = '
                                b'["env:production"]\n', "static.toml"), entry_points=False,
                   recorder=_NoRecord())
    out["replica_decisions_per_s_static"] = _rate(lambda: static.decide("t", NOBODY))
    return out


def _rate(call: Callable[[], object]) -> float:
    done, end = 0, time.perf_counter() + SECONDS
    start = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(1_000):
            call()
        done += 1_000
    return done / (time.perf_counter() - start)


class _NoRecord:
    def record(self, decision: object) -> None:
        return None


# -- policy bundles --------------------------------------------------------------------------------
@contextmanager
def bundle_server(files: dict[str, bytes]) -> Iterator[str]:
    """A stdlib HTTP/1.1 server with strong ETags on 127.0.0.1; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = files[self.path]
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            fresh = self.headers.get("If-None-Match") == etag
            self.send_response(304 if fresh else 200)
            self.send_header("ETag", etag)
            if not fresh:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not fresh:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def bundle_figures() -> dict[str, float]:
    """A 304 poll, and a full reload (fetch, Ed25519 verify, validate, compile) of a policy naming
    BUNDLE_TOOLS tools, through BundleReloader against a local server."""
    key = Ed25519PrivateKey.generate()
    body = "".join(f'[tools.t{i}]\nrequirements = ["env:production", "state:k{i % 100}"]\n'
                   for i in range(BUNDLE_TOOLS)).encode()
    files = {"/p.toml": body, "/p.toml.sig": base64.b64encode(key.sign(body))}
    with tempfile.TemporaryDirectory() as folder, bundle_server(files) as base:
        public = Path(folder) / "key.raw"
        public.write_bytes(key.public_key().public_bytes_raw())
        url = f"{base}/p.toml"
        guard = Guard(load_policy_url(url, public), entry_points=False, recorder=_NoRecord())
        reloader = BundleReloader(guard, url, public_key=public)
        reloader.reload()  # the first poll learns the ETag
        polls = _timed(reloader.reload, POLLS)
        reloads = _timed(lambda: reloader.reload(force=True), 20)
    return {"bundle_poll_304_p50_ms": percentile(polls, 50) / 1e6,
            "bundle_reload_1k_tools_p50_ms": percentile(reloads, 50) / 1e6,
            "bundle_1k_tools_bytes": float(len(body))}


def _timed(call: Callable[[], object], n: int) -> list[int]:
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        out.append(time.perf_counter_ns() - start)
    return out


# -- gateway replicas, alone and behind haproxy -----------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
HAPROXY_CFG = ROOT / "examples" / "haproxy" / "haproxy.cfg"
CLI = [sys.executable, "-c", "import sys; from mcp_preconditions.cli import main; sys.exit(main())"]
GATEWAY_POLICY = (b'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
                  b'[tools.env]\nrequirements = ["env:staging"]\n')  # echo allowed, env denied
CLIENTS = 16  # concurrent SDK clients for the saturation figures
GATEWAY_SECONDS = 3.0
LATENCY_CALLS = 300


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ok(url: str, process: subprocess.Popen[bytes], deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end and process.poll() is None:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"bench_replicas: {url} did not come up (exit {process.poll()})")


def _wait_up(port: int, process: subprocess.Popen[bytes]) -> None:
    """The upstream answers any HTTP request (its /mcp wants a POST)."""
    end = time.monotonic() + 60
    while time.monotonic() < end and process.poll() is None:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"bench_replicas: the upstream on port {port} did not come up")


@contextmanager
def gateway_cluster(replicas: int, folder: Path) -> Iterator[tuple[str, list[str]]]:
    """One upstream (the tests' SDK server), `replicas` gateways and haproxy with the shipped
    configuration (its ports changed, servers past `replicas` dropped). Yields haproxy's /mcp URL and
    each replica's /mcp URL."""
    policy = folder / "bench-gateway.toml"
    policy.write_bytes(GATEWAY_POLICY)
    up, front = _port(), _port()
    ports = [_port() for _ in range(replicas)]
    started: list[subprocess.Popen[bytes]] = []

    def start(command: list[str]) -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
        return started[-1]
    try:
        upstream = start([sys.executable, "-m", "tests.fixtures.gateway_upstream", "http", str(up)])
        _wait_up(up, upstream)
        gateways = [start([*CLI, "gateway", "--policy", str(policy), "--replica-id", f"gw{i + 1}",
                           "--listen", f"http://127.0.0.1:{port}",
                           "--upstream-url", f"http://127.0.0.1:{up}/mcp"])
                    for i, port in enumerate(ports)]
        for process, port in zip(gateways, ports, strict=True):
            _wait_ok(f"http://127.0.0.1:{port}/readyz", process)
        config = folder / f"haproxy-{replicas}.cfg"
        config.write_text(_haproxy_config(front, ports), encoding="utf-8")
        proxy = start([shutil.which("haproxy") or "haproxy", "-db", "-f", str(config)])
        for _ in range(replicas * 2):  # every server has passed its first check
            _wait_ok(f"http://127.0.0.1:{front}/readyz", proxy)
        time.sleep(2.5)
        yield (f"http://127.0.0.1:{front}/mcp", [f"http://127.0.0.1:{p}/mcp" for p in ports])
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(10)


def _haproxy_config(front: int, ports: list[int]) -> str:
    text = HAPROXY_CFG.read_text(encoding="utf-8").replace("127.0.0.1:8100", f"127.0.0.1:{front}")
    lines = []
    for line in text.splitlines(keepends=True):
        match = re.match(r"(\s+server gw(\d) 127\.0\.0\.1:)810\d( check)$", line.rstrip("\n"))
        if match is None:
            lines.append(line)
        elif int(match.group(2)) <= len(ports):
            lines.append(f"{match.group(1)}{ports[int(match.group(2)) - 1]}{match.group(3)}\n")
    return "".join(lines)


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}


async def _raw_load(url: str, tool: str, clients: int, seconds: float) -> tuple[float, list[int]]:
    """`clients` loops POSTing one 2026-07-28 `tools/call` each at a time for `seconds` (a light
    client, so that the gateway rather than the load generator saturates first); calls/s and
    every call's latency in ns."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": {}, "_meta": MODERN_META}}).encode()
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": tool}
    samples: list[int] = []
    async with httpx2.AsyncClient(limits=httpx2.Limits(max_connections=clients),
                                  timeout=httpx2.Timeout(30.0)) as http:
        async def one() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter_ns()
                answer = await http.post(url, headers=headers, content=body)
                samples.append(time.perf_counter_ns() - start)
                denied = b'"isError":true' in answer.content
                assert answer.status_code == 200 and denied == (tool == "env"), answer.text[:300]
        await asyncio.gather(*(http.post(url, headers=headers, content=body) for _ in range(clients)))
        begin = time.perf_counter()
        end = begin + seconds
        await asyncio.gather(*(one() for _ in range(clients)))
        return len(samples) / (time.perf_counter() - begin), samples


async def _sdk_latency(url: str, mode: str, count: int) -> list[int]:
    """One SDK client, `count` sequential `echo` calls: legacy (a 2025-11-25 session, sticky behind
    haproxy) or auto (2026-07-28, no session)."""
    samples = []
    async with Client(streamable_http_client(url), mode=mode) as client:
        await client.call_tool("echo", {})  # warm: the session, the first call
        for _ in range(count):
            start = time.perf_counter_ns()
            result = await client.call_tool("echo", {})
            samples.append(time.perf_counter_ns() - start)
            assert not result.is_error, result
    return samples


def _percentiles(out: dict[str, float], key: str, samples: list[int]) -> None:
    out[key + "_p50_ms"] = percentile(samples, 50) / 1e6
    out[key + "_p99_ms"] = percentile(samples, 99) / 1e6


def gateway_figures() -> dict[str, float]:
    """One replica at saturation (direct: denied by the guard, and allowed through to the upstream),
    then p50 / p99 through haproxy with 1 and 3 replicas: one SDK client (session, and 2026-07-28
    requests) and CLIENTS light clients at saturation."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for replicas in (1, 3):
            with gateway_cluster(replicas, Path(tmp)) as (front, direct):
                if replicas == 1:
                    for name, tool in (("guard_only", "env"), ("with_upstream", "echo")):
                        rate, loaded = asyncio.run(_raw_load(direct[0], tool, CLIENTS, GATEWAY_SECONDS))
                        out[f"gateway_replica_calls_per_s_{name}"] = rate
                        _percentiles(out, f"gateway_replica_{name}_c{CLIENTS}", loaded)
                for mode, label in (("legacy", "session"), ("auto", "stateless")):
                    _percentiles(out, f"haproxy_{replicas}r_{label}_c1",
                                 asyncio.run(_sdk_latency(front, mode, LATENCY_CALLS)))
                rate, loaded = asyncio.run(_raw_load(front, "echo", CLIENTS, GATEWAY_SECONDS))
                out[f"haproxy_{replicas}r_c{CLIENTS}_calls_per_s"] = rate
                _percentiles(out, f"haproxy_{replicas}r_c{CLIENTS}", loaded)
    return out


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): every number in one flat dict."""
    with redis_server() as url:
        results = redis_get_figures(url)
        results.update(asyncio.run(guard_figures(url)))
    results.update(bundle_figures())
    results.update(gateway_figures())
    return results


if __name__ == "__main__":
    print(json.dumps({k: round(v, 3) for k, v in run().items()}, indent=2))
