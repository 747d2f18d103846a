"""Quotas through the gateway, in front of tests/fixtures/gateway_upstream.py whose log shows every
call that reached it: 20 concurrent calls with `calls = 3` from a stdio gateway's caller reach it 3
times (calls denied for another requirement take nothing); a Redis quota whose Redis is stopped or
paused denies with `error`, never allows; three replicas behind haproxy under load share one Redis
bucket and never let more than the limit through in total.

The memory quota runs in-process (tests/fixtures/inprocess.py: the gateway wired from its command
line in the test's loop, the upstream in memory). The Redis tests stay interop: they are about a
real redis-server stopped, paused and shared by gateway processes behind a real haproxy.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from mcp_preconditions.client import DENIAL_ERRORS_META_KEY, TRANSIENT_META_KEY
from tests.fixtures.flagd import eventually, eventually_async
from tests.fixtures.gateway_upstream import (
    CLI,
    gateway_http,
    started,
    tool_calls,
    upstream_env,
    upstream_http,
)
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer
from tests.integration.test_gateway_calls import gateway_client
from tests.integration.test_replicas_cluster import DOC_PORTS, REPLICAS, haproxy_config

pytestmark = pytest.mark.asyncio(loop_scope="module")


def denied_by(result: Any) -> list[str]:
    assert result.is_error, result
    return list(result.structured_content["unmet"])


async def test_twenty_concurrent_calls_through_a_stdio_gateway_reach_the_upstream_three_times(
        tmp_path: Path) -> None:
    policy, claims, log = tmp_path / "policy.toml", tmp_path / "me.json", tmp_path / "upstream.jsonl"
    policy.write_text('[quotas.q]\ncalls = 3\nper_seconds = 3600\n'
                      '[tools.echo]\nrequirements = ["auth:claim:role:observer", "quota:q"]\n'
                      '[tools.secret]\nrequirements = ["quota:q"]\n', encoding="utf-8")
    claims.write_text('{"sub": "olga", "role": "observer"}', encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode="auto") as client:
        for _ in range(5):  # `secret` also needs auth:claim:role:admin (the upstream's own)
            assert denied_by(await client.call_tool("secret", {})) == ["auth:claim:role:admin"]
        results = await asyncio.gather(*(client.call_tool("echo", {"text": "hi"}) for _ in range(20)))
    refused = [r for r in results if r.is_error]
    assert len(refused) == 17 and all(denied_by(r) == ["quota:q"] for r in refused)
    assert all((r.meta or {})[TRANSIENT_META_KEY] == ["quota:q"] for r in refused)
    assert all(1100 < r.structured_content["retry_after_seconds"] <= 1200 for r in refused)
    assert tool_calls(log) == ["echo"] * 3


def redis_policy(path: Path, redis: RedisServer, calls: int, extra: str = "", redis_extra: str = ""
                 ) -> Path:
    path.write_text(f'[state.redis]\nurl = "{redis.url}"\nquota_prefix = "gw-quota:"\n{redis_extra}'
                    f'[quotas.q]\ncalls = {calls}\nper_seconds = 3600\nby = "global"\n'
                    'store = "redis"\n[tools.echo]\nrequirements = ["quota:q"]\n' + extra,
                    encoding="utf-8")
    return path


def verdicts(results: list[Any]) -> list[str]:
    """Per result: allowed, exhausted (unsatisfied quota) or error (the store failed)."""
    out = []
    for r in results:
        if not r.is_error:
            out.append("allowed")
        else:
            errors = (r.meta or {}).get(DENIAL_ERRORS_META_KEY) or []
            out.append("error" if errors == ["quota:q"] else "exhausted")
    return out


@pytest.mark.interop
@pytest.mark.integration
async def test_a_stopped_or_paused_redis_denies_and_never_allows(
        tmp_path: Path, redis_factory: Callable[[], RedisServer]) -> None:
    redis = redis_factory()
    # Timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a healthy
    # Redis that late, and a call then is an `error`, not the `allowed` this test expects of it.
    policy = redis_policy(tmp_path / "policy.toml", redis, calls=50,
                          extra="[guard]\nlookup_timeout_seconds = 5\n",
                          redis_extra="connect_timeout_seconds = 3\nread_timeout_seconds = 3\n")
    log = tmp_path / "upstream.jsonl"
    with gateway_http(policy, log) as gw:
        async with Client(gw.url + "/mcp", mode="auto") as client:
            async def calls(n: int) -> list[str]:
                return verdicts(list(await asyncio.gather(
                    *(client.call_tool("echo", {"text": "hi"}) for _ in range(n)))))

            assert await calls(3) == ["allowed"] * 3
            redis.pause()  # a slow server: every answer past the lookup timeout
            assert await calls(5) == ["error"] * 5
            redis.resume()
            redis.kill()   # a stopped server: connection refused
            assert await calls(5) == ["error"] * 5
            redis.start()  # back, empty (no persistence): its buckets are full again

            async def one() -> str:
                return (await calls(1))[0]
            assert await eventually_async(one, "allowed", 30) == "allowed"
    assert tool_calls(log) == ["echo"] * 4  # the 3 before, and the first after Redis came back


# -- three replicas behind haproxy -----------------------------------------------------------------
LIMIT, CLIENTS = 12, 12
OVER = 10 * LIMIT  # the load goes on until this many calls were refused for the spent quota


@contextmanager
def replicas(tmp: Path, redis: RedisServer) -> Iterator[tuple[str, Path]]:
    """Three gateways (one policy file, one Redis) in front of one HTTP upstream, behind haproxy
    configured as examples/haproxy/haproxy.cfg; yields haproxy's /mcp and the upstream's log."""
    haproxy = shutil.which("haproxy")
    assert haproxy is not None, "haproxy is not installed: `make test` installs it"
    decisions = tmp / "decisions.jsonl"
    policy = redis_policy(tmp / "policy.toml", redis, calls=LIMIT,
                          extra=f'[decision_log]\njsonl_path = "{decisions}"\n')
    ports = {name: free_port() for name in DOC_PORTS}
    (tmp / "haproxy.cfg").write_text(haproxy_config(ports), encoding="utf-8")
    log = tmp / "upstream.jsonl"
    with ExitStack() as stack:
        upstream = stack.enter_context(upstream_http(log))
        for name in REPLICAS:
            base = f"http://127.0.0.1:{ports[name]}"
            command = [*CLI, "gateway", "--policy", str(policy), "--replica-id", name,
                       "--listen", base, "--upstream-url", upstream.url]
            stack.enter_context(started(command, upstream_env(log), base, base + "/readyz"))
        front = f"http://127.0.0.1:{ports['frontend']}"
        proxy = subprocess.Popen([haproxy, "-db", "-f", str(tmp / "haproxy.cfg")], cwd=tmp,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(proxy.wait, 10)
        stack.callback(proxy.terminate)
        seen: set[str] = set()
        assert eventually(lambda: _rotation(front, seen), True, 30), seen
        yield front + "/mcp", log


def _rotation(front: str, seen: set[str]) -> bool:
    with suppress(httpx.HTTPError, KeyError):
        seen.add(httpx.get(front + "/readyz", timeout=2).headers["x-served-by"])
    return set(REPLICAS) <= seen


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.timeout(180)  # work bound, not an event wait: three replicas, Redis and the calls below
async def test_three_replicas_share_one_bucket_under_load(
        tmp_path: Path, redis_factory: Callable[[], RedisServer]) -> None:
    redis = redis_factory()
    with replicas(tmp_path, redis) as (url, log):
        seen: list[str] = []

        async def client() -> None:
            async with Client(url, mode="auto") as session:  # 2026-07-28: no session to stick to
                while seen.count("exhausted") <= OVER:
                    seen.extend(verdicts([await session.call_tool("echo", {"text": "hi"})]))

        # As many calls as it takes (not a fixed time: a loaded machine makes fewer a second).
        async with asyncio.timeout(100):  # work bound, not an event wait: as many calls as the bucket takes
            await asyncio.gather(*(client() for _ in range(CLIENTS)))
    allowed, errors = seen.count("allowed"), seen.count("error")
    assert allowed <= LIMIT and tool_calls(log).count("echo") == allowed
    # Every unit went to an allowed call, or to one whose answer from Redis came too late on this
    # loaded machine (denied with `error`: fail closed, the unit stays taken).
    assert allowed + errors >= LIMIT and seen.count("exhausted") > OVER
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert sum(1 for r in records if r["allowed"]) == allowed
    assert {r["replica"] for r in records} == set(REPLICAS)  # every replica took its share of calls
