"""The measured inputs of the capacity model in docs/scaling.md: Redis GET latency and throughput,
Redis operations per decision with and without the state cache, decisions per second of one Guard,
and what a policy bundle poll costs (a 304, and a full fetch + verify + compile).

Run: .venv/bin/python -m bench.bench_replicas (prints JSON); `run()` for bench/run.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mcp_preconditions import Guard, Identity, parse_policy
from mcp_preconditions.policy.bundle import BundleReloader, load_policy_url

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


def run() -> dict[str, float]:
    """The harness entry point (bench/run.py): every number in one flat dict."""
    with redis_server() as url:
        results = redis_get_figures(url)
        results.update(asyncio.run(guard_figures(url)))
    results.update(bundle_figures())
    return results


if __name__ == "__main__":
    print(json.dumps({k: round(v, 3) for k, v in run().items()}, indent=2))
