"""Two gateway containers from the image behind Debian's haproxy (examples/haproxy/haproxy.cfg, its
ports changed and gw3 left out), sharing one redis-server and one signed policy bundle URL on the
host, as test_replicas_cluster.py runs processes. One quota in Redis is shared by both replicas, a
2025-11-25 session sticks to one replica, a signed bundle reaches both and a tampered one neither,
and a `state:` flip in Redis denies on both. The server's own log is the oracle for what ran.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.policy.load import revision_of
from tests.fixtures.containers import BUILD_TIMEOUT, Container, gateway_container
from tests.fixtures.flagd import eventually, eventually_async
from tests.fixtures.gateway_upstream import tool_calls, upstream_http
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer, redis_binary
from tests.integration.test_replicas_cluster import DOC_PORTS, BundleServer, haproxy_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT)]  # the first test may build
NAMES = ("gw1", "gw2")
TTL, POLL, QUOTA = 1.0, 1.0, 3
KEY = "/etc/mcp-preconditions/policy-public.pem"  # where the public key is mounted in a container
SIGNATURE_REFUSED = "does not match the body for the configured public key"


def policy(redis: RedisServer, note: str, *, quota: bool) -> bytes:
    needs = '"state:launch.window", "quota:echo.shared"' if quota else '"state:launch.window"'
    return f"""# {note}
[guard]
lookup_timeout_seconds = 10
[state]
ttl_seconds = {TTL}
[state.redis]
url = "{redis.url}"
prefix = "image:"
connect_timeout_seconds = 5
read_timeout_seconds = 5
[quotas."echo.shared"]
calls = {QUOTA}
per_seconds = 3600
by = "global"
store = "redis"
[tools.echo]
requirements = [{needs}]
""".encode()


@dataclass
class Fleet:
    url: str  # haproxy's /mcp
    redis: RedisServer
    bundles: BundleServer
    key: Ed25519PrivateKey
    containers: dict[str, Container]
    upstream_log: Path

    def publish(self, body: bytes, signed: bytes | None = None) -> str:
        """Serve `body` with the signature of `signed` (default: of `body`); its revision."""
        self.bundles.publish(body, self.key.sign(body if signed is None else signed))
        return revision_of(body)

    def set_state(self, value: str) -> None:
        assert self.redis.command("SET", "image:launch.window", value) == "+OK"

    def revisions(self) -> dict[str, str]:
        return {name: httpx.get(c.url + "/readyz", timeout=10).json()["policy"]
                for name, c in self.containers.items()}


def two_replica_config(ports: dict[str, int]) -> str:
    text, removed = re.subn(r"(?m)^\s+server gw3 .*\n", "", haproxy_config(ports))
    assert removed == 1, text
    return text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.fail("haproxy is not installed: `make test` installs it (apt-get install haproxy)",
                    pytrace=False)
    tmp = tmp_path_factory.mktemp("image-replicas")
    redis = RedisServer(redis_binary(), tmp).start()
    key, bundles = Ed25519PrivateKey.generate(), BundleServer()
    public = tmp / "policy-public.pem"
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    ports = {name: free_port() for name in DOC_PORTS}
    (tmp / "haproxy.cfg").write_text(two_replica_config(ports), encoding="utf-8")
    log = tmp / "upstream.jsonl"
    try:
        with upstream_http(log) as upstream, ExitStack() as stack, \
                (tmp / "haproxy.log").open("wb") as haproxy_log:
            fleet = Fleet(f"http://127.0.0.1:{ports['frontend']}/mcp", redis, bundles, key, {}, log)
            fleet.publish(policy(redis, "v1", quota=True))
            fleet.set_state("true")
            args = ["--policy", bundles.url, "--policy-poll-seconds", str(POLL),
                    "--policy-public-key", KEY, "--upstream-url", upstream.url]
            for name in NAMES:
                fleet.containers[name] = stack.enter_context(gateway_container(
                    ports[name], args, mounts={public: KEY}, env={"MCP_PRECONDITIONS_REPLICA_ID": name}))
            proxy = subprocess.Popen([haproxy, "-db", "-f", str(tmp / "haproxy.cfg")],
                                     stdout=haproxy_log, stderr=subprocess.STDOUT, cwd=tmp)
            stack.callback(proxy.wait, 10)
            stack.callback(proxy.terminate)
            seen: set[str] = set()
            assert eventually(lambda: in_rotation(fleet.url, seen), True, 30), \
                (seen, (tmp / "haproxy.log").read_text(errors="replace"))
            yield fleet
    finally:
        redis.stop()
        bundles.httpd.shutdown()


def in_rotation(url: str, seen: set[str]) -> bool:
    """Ask haproxy for /readyz once; True when both replicas have answered one by now."""
    with suppress(httpx.HTTPError, KeyError):
        seen.add(httpx.get(url.removesuffix("/mcp") + "/readyz", timeout=2).headers["x-served-by"])
    return set(NAMES) <= seen


async def calls(url: str, mode: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """`count` calls of `echo` by one SDK client: (the replica that answered, the result) each."""
    served: dict[str, str] = {}

    async def note(response: httpx2.Response) -> None:
        served["by"] = response.headers.get("x-served-by", "?")

    out = []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0), event_hooks={"response": [note]}) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        for _ in range(count):
            result = await client.call_tool("echo", {"text": "hi"})
            out.append((served["by"], result.model_dump(by_alias=True, mode="json", exclude_none=True)))
    return out


async def test_one_quota_in_redis_for_both_replicas_and_a_session_sticks(fleet: Fleet) -> None:
    before = len(tool_calls(fleet.upstream_log))
    answered = await calls(fleet.url, "auto", 8)  # 2026-07-28: each call balanced on its own
    by_replica = {name: [r for who, r in answered if who == name] for name in NAMES}
    assert all(by_replica.values()), {n: len(r) for n, r in by_replica.items()}  # both served
    allowed = [r for _, r in answered if not r.get("isError")]
    denied = [r["structuredContent"] for _, r in answered if r.get("isError")]
    # One bucket in Redis: 3 calls in all. A bucket per replica would have allowed this many:
    assert len(allowed) == QUOTA < sum(min(len(r), QUOTA) for r in by_replica.values())
    assert denied and all(d["unmet"] == ["quota:echo.shared"] and d["retry_after_seconds"] > 0
                          for d in denied), denied
    assert len(tool_calls(fleet.upstream_log)) - before == QUOTA  # the denied never reached it

    session = await calls(fleet.url, "legacy", 4)  # 2025-11-25: one session, one replica
    assert len({who for who, _ in session}) == 1 and session[0][0] in NAMES, session
    assert all(r["structuredContent"]["unmet"] == ["quota:echo.shared"] for _, r in session)


async def test_a_signed_bundle_reaches_both_a_tampered_one_neither_and_state_denies_on_both(
        fleet: Fleet) -> None:
    v2 = fleet.publish(policy(fleet.redis, "v2", quota=False))
    assert eventually(fleet.revisions, dict.fromkeys(NAMES, v2), 30) == dict.fromkeys(NAMES, v2)
    answered = await calls(fleet.url, "auto", 4)
    assert {who for who, _ in answered} == set(NAMES)
    assert [r.get("isError", False) for _, r in answered] == [False] * 4

    v3 = policy(fleet.redis, "v3", quota=False)
    fleet.publish(v3, signed=policy(fleet.redis, "v2", quota=False))  # v2's signature on v3
    refused = eventually(lambda: all(SIGNATURE_REFUSED in c.logs() for c in fleet.containers.values()),
                         True, 30)
    assert refused, {name: c.logs()[-1500:] for name, c in fleet.containers.items()}
    assert fleet.revisions() == dict.fromkeys(NAMES, v2)

    fleet.set_state("false")
    unmet = ["state:launch.window"]

    async def all_denied() -> bool:
        return all(r.get("isError") and r["structuredContent"]["unmet"] == unmet
                   for _, r in await calls(fleet.url, "auto", 4))

    assert await eventually_async(all_denied, True, 30)
    fleet.set_state("true")
