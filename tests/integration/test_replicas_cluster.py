"""The replica cluster of test_replicas_haproxy.py: three gateway replicas behind Debian's haproxy
(examples/haproxy/haproxy.cfg, only its ports changed), one redis-server, one flagd flag file, one
upstream, and the policy as a signed bundle from a local HTTP server. Also: the shipped haproxy
configuration is valid as it is and with the test's ports.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.fixtures.flagd import FlagFile, boolean_flag, eventually
from tests.fixtures.gateway_upstream import CLI, Process, upstream_http
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer, redis_binary

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "examples" / "haproxy" / "haproxy.cfg"
TTL, POLL = 1.0, 1.0
SLACK = 1.0  # scheduling on 2 loaded cores: a liveness margin, not a timing claim
REPLICAS = ("gw1", "gw2", "gw3")
DOC_PORTS = {"frontend": 8100, "gw1": 8101, "gw2": 8102, "gw3": 8103}


# -- the pieces ------------------------------------------------------------------------------------
class BundleServer:
    """Policy bundles over HTTP/1.1 with strong ETags; `publish` replaces body and signature."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        files = self.files

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                body = files.get(self.path)
                etag = '"' + hashlib.sha256(body or b"").hexdigest()[:16] + '"'
                fresh = body is not None and self.headers.get("If-None-Match") == etag
                self.send_response(404 if body is None else 304 if fresh else 200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", "0" if fresh or body is None else str(len(body)))
                self.end_headers()
                if body is not None and not fresh:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/gateway.toml"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def publish(self, body: bytes, signature: bytes) -> None:
        self.files["/gateway.toml.sig"] = base64.b64encode(signature)  # body after its signature
        self.files["/gateway.toml"] = body


def haproxy_config(ports: dict[str, int]) -> str:
    """The shipped file with its documented ports replaced (each exactly once, else the file and
    this test have drifted apart)."""
    text = HAPROXY_CFG.read_text(encoding="utf-8")
    for name, documented in DOC_PORTS.items():
        pattern = (rf"(?m)^(\s+bind 127\.0\.0\.1:){documented}$" if name == "frontend"
                   else rf"(?m)^(\s+server {name} 127\.0\.0\.1:){documented}( check)$")
        text, count = re.subn(pattern, rf"\g<1>{ports[name]}\g<2>" if name != "frontend"
                              else rf"\g<1>{ports[name]}", text)
        assert count == 1, f"{HAPROXY_CFG}: no line for {name} on port {documented}"
    return text


@dataclass
class Cluster:
    url: str  # haproxy's /mcp
    redis: RedisServer
    bundles: BundleServer
    key: Ed25519PrivateKey
    decisions: Path
    gateways: dict[str, Process]
    haproxy: subprocess.Popen[bytes]
    haproxy_log: Path
    upstream: str  # the upstream's label in decision records
    policies: dict[str, bytes] = field(default_factory=dict)

    def set_state(self, value: str) -> None:
        assert self.redis.command("SET", "replicas:launch.window", value) == "+OK"

    def records(self) -> list[dict[str, Any]]:
        lines = self.decisions.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line]


def policy(redis: RedisServer, flags: Path, decisions: Path, note: str) -> bytes:
    """Redis timeouts for two loaded cores: a read that is slow only because of the load is not
    denied as an error (a stopped Redis refuses at once, whatever they are)."""
    return f"""# {note}
[guard]
lookup_timeout_seconds = 10
[state]
ttl_seconds = {TTL}
[state.redis]
url = "{redis.url}"
prefix = "replicas:"
connect_timeout_seconds = 5
read_timeout_seconds = 5
[features.openfeature]
provider = "flagd"
path = "{flags}"
poll_interval_seconds = 0.5
[decision_log]
jsonl_path = "{decisions}"
[tools.echo]
requirements = ["state:launch.window"]
[tools.env]
requirements = ["feature:gateway.open"]
""".encode()


def all_in_rotation(url: str, seen: set[str]) -> bool:
    """Ask haproxy for /readyz once; True when every replica has answered one by now."""
    with suppress(httpx.HTTPError, KeyError):
        seen.add(str(httpx.get(url.removesuffix("/mcp") + "/readyz", timeout=2).headers["x-served-by"]))
    return set(REPLICAS) <= seen


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.fail("haproxy is not installed: `make test` installs it (apt-get install haproxy)",
                    pytrace=False)
    tmp = tmp_path_factory.mktemp("replicas")
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
    try:
        with upstream_http(tmp / "upstream.jsonl") as upstream, \
                _gateways(ports, bundles.url, public, upstream.url) as gateways:
            with haproxy_log.open("wb") as log:
                proxy = subprocess.Popen([haproxy, "-db", "-f", str(tmp / "haproxy.cfg")],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
            front = f"http://127.0.0.1:{ports['frontend']}/mcp"
            try:
                seen: set[str] = set()
                assert eventually(lambda: all_in_rotation(front, seen), True, 30), \
                    (seen, haproxy_log.read_text())
                yield Cluster(front, redis, bundles, key, decisions, gateways, proxy,
                              haproxy_log, upstream.url, {"v1": v1})
            finally:
                proxy.terminate()
                proxy.wait(10)
    finally:
        redis.stop()
        bundles.httpd.shutdown()


@contextmanager
def _gateways(ports: dict[str, int], url: str, public: Path, upstream: str
              ) -> Iterator[dict[str, Process]]:
    """Start the three replicas at once (their imports overlap on two cores), stop them all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PRECONDITIONS_")}
    env["MCP_PRECONDITIONS_REPLICA_ID"] = "overridden-by-the-flag"
    gateways: dict[str, Process] = {}
    try:
        for name in REPLICAS:
            base = f"http://127.0.0.1:{ports[name]}"
            log = tempfile.TemporaryFile("a+b")  # noqa: SIM115 - closed by Process.stop()
            command = [*CLI, "gateway", "--policy", url, "--policy-poll-seconds", str(POLL),
                       "--policy-public-key", str(public), "--replica-id", name, "--listen", base,
                       "--upstream-url", upstream]
            gateways[name] = Process(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                      env=env, cwd=ROOT), log, base)
        for gateway in gateways.values():
            up = eventually(lambda g=gateway: _status(g.url + "/readyz"), 200, 30)  # type: ignore[misc]
            assert up == 200, gateway.output()
        yield gateways
    finally:
        for gateway in gateways.values():
            gateway.stop()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None


def test_the_shipped_haproxy_config_is_valid_as_is_and_with_the_test_ports(tmp_path: Path) -> None:
    haproxy = shutil.which("haproxy")
    assert haproxy is not None, "haproxy is not installed: `make test` installs it"
    rewritten = tmp_path / "haproxy.cfg"
    rewritten.write_text(haproxy_config({name: free_port() for name in DOC_PORTS}), encoding="utf-8")
    for config in (HAPROXY_CFG, rewritten):
        checked = subprocess.run([haproxy, "-c", "-f", str(config)], capture_output=True, text=True,
                                 cwd=tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert "Configuration file is valid" in checked.stdout + checked.stderr
