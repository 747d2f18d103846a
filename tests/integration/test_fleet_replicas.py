"""Replicas of a many-server gateway (SPEC §12): three `gateway --config gateway.toml` replicas behind
Debian's haproxy, each guarding the same two servers (`main` with no prefix, `side` under `side__`),
sharing one redis-server, one flagd flag file and a signed policy bundle, as test_replicas_haproxy.py
runs the single-server gateway. Under load from 20 SDK clients (half sticky 2025-11-25 sessions,
half 2026-07-28 requests any replica may answer), every call is checked against the same oracle
while `state:` flips, and each server is reached through every replica.

Interop: real gateway processes behind a real haproxy, one redis-server and a flag file shared
between them, are what it checks (that the replicas agree while the state flips under them); one
process in-process would not be replicas.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client

from tests.fixtures.flagd import FlagFile, boolean_flag, eventually
from tests.fixtures.fleet import write_gateway_toml
from tests.fixtures.gateway_upstream import CLI, ECHO_RESULT, Process, tool_calls, upstream_http
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer, redis_binary
from tests.integration.test_replicas_cluster import (
    DOC_PORTS,
    POLL,
    REPLICAS,
    ROOT,
    SLACK,
    TTL,
    BundleServer,
    Cluster,
    _status,
    all_in_rotation,
    haproxy_config,
    policy,
)
from tests.integration.test_replicas_haproxy import UNMET_STATE, Event, failed, load, wrongly_allowed

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def fleet_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, Path]]]:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.fail("haproxy is not installed: `make test` installs it (apt-get install haproxy)",
                    pytrace=False)
    tmp = tmp_path_factory.mktemp("fleet-replicas")
    redis = RedisServer(redis_binary(), tmp).start()
    flags = FlagFile(tmp / "flags.json")
    flags.write({"gateway.open": boolean_flag(True)})
    key, bundles = Ed25519PrivateKey.generate(), BundleServer()
    public = tmp / "policy-public.pem"
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    decisions = tmp / "decisions.jsonl"
    v1 = policy(redis, flags.path, decisions, "v1")
    bundles.publish(v1, key.sign(v1))
    ports = {name: free_port() for name in DOC_PORTS}
    (tmp / "haproxy.cfg").write_text(haproxy_config(ports), encoding="utf-8")
    haproxy_log = tmp / "haproxy.log"
    logs = {"main": tmp / "main.jsonl", "side": tmp / "side.jsonl"}
    try:
        with upstream_http(logs["main"]) as main, upstream_http(logs["side"]) as side:
            config = write_gateway_toml(tmp / "gateway.toml", bundles.url, {
                "main": {"url": main.url, "prefix": ""}, "side": {"url": side.url}})
            with _replicas(ports, config, public) as gateways:
                with haproxy_log.open("wb") as log:
                    proxy = subprocess.Popen([haproxy, "-db", "-f", str(tmp / "haproxy.cfg")],
                                             stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
                front = f"http://127.0.0.1:{ports['frontend']}/mcp"
                try:
                    seen: set[str] = set()
                    assert eventually(lambda: all_in_rotation(front, seen), True, 30), \
                        (seen, haproxy_log.read_text())
                    yield (Cluster(front, redis, bundles, key, decisions, gateways, proxy, haproxy_log,
                                   "main", {"v1": v1}), logs)
                finally:
                    proxy.terminate()
                    proxy.wait(10)
    finally:
        redis.stop()
        bundles.httpd.shutdown()


@contextmanager
def _replicas(ports: dict[str, int], config: Path, public: Path) -> Iterator[dict[str, Process]]:
    """Three replicas of one gateway.toml, each with its own listener and replica id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PRECONDITIONS_")}
    gateways: dict[str, Process] = {}
    try:
        for name in REPLICAS:
            base = f"http://127.0.0.1:{ports[name]}"
            log = tempfile.TemporaryFile("a+b")  # noqa: SIM115 - closed by Process.stop()
            command = [*CLI, "gateway", "--config", str(config), "--policy-poll-seconds", str(POLL),
                       "--policy-public-key", str(public), "--replica-id", name, "--listen", base]
            gateways[name] = Process(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                      env=env, cwd=ROOT), log, base)
        for gateway in gateways.values():
            up = eventually(lambda g=gateway: _status(g.url + "/readyz"), 200, 30)  # type: ignore[misc]
            assert up == 200, gateway.output()
        yield gateways
    finally:
        for gateway in gateways.values():
            gateway.stop()


async def test_a_state_flip_under_load_through_a_many_server_gateway(
        fleet_cluster: tuple[Cluster, dict[str, Path]]) -> None:
    cluster, logs = fleet_cluster
    cluster.set_state("true")
    events: list[Event] = [(2.0, "state-false", lambda: cluster.set_state("false")),
                           (5.0, "state-true", lambda: cluster.set_state("true"))]
    calls, at = await load(cluster.url, 7.0, events)

    assert not failed(calls), failed(calls)[:5]
    assert wrongly_allowed(calls, at["state-false"], at["state-true:start"]) == []
    echo = [c for c in calls if c.tool == "echo"]
    assert any(c.outcome == "allowed" and c.end < at["state-false:start"] for c in echo)
    denied = [c for c in echo if at["state-false"] + TTL + SLACK < c.start and c.end < at["state-true:start"]]
    assert denied and {c.detail for c in denied} == {UNMET_STATE}, {c.detail for c in denied}
    assert all(c.outcome == "allowed" for c in calls if c.tool == "env")
    records = cluster.records()
    assert {r["replica"] for r in records} == set(REPLICAS)
    assert {r["server"] for r in records if r["tool"] in ("echo", "env")} == {"main"}
    assert set(tool_calls(logs["main"])) == {"echo", "env"} and tool_calls(logs["side"]) == []


async def _side_echo(url: str, mode: str) -> tuple[dict[str, object], list[str]]:
    async with Client(url, mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("side__echo", {})
    return result.structured_content or {}, names


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_each_server_through_every_replica(fleet_cluster: tuple[Cluster, dict[str, Path]],
                                           mode: str) -> None:
    cluster, logs = fleet_cluster
    before = len(tool_calls(logs["side"]))
    for name, gateway in cluster.gateways.items():
        ready = httpx.get(gateway.url + "/readyz", timeout=10).json()
        assert ready["status"] == "ready" and ready["down"] == [], (name, ready)
        assert set(ready["servers"]) == {"main", "side"}
        structured, names = anyio.run(_side_echo, gateway.url + "/mcp", mode)
        assert structured == ECHO_RESULT["structuredContent"]
        assert "echo" in names and "side__echo" in names and "side__env" in names
    structured, _ = anyio.run(_side_echo, cluster.url, mode)  # and through haproxy
    assert structured == ECHO_RESULT["structuredContent"]
    assert tool_calls(logs["side"])[before:] == ["echo"] * (len(REPLICAS) + 1)
