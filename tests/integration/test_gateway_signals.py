"""A stdio gateway told to stop (SIGTERM, as a desktop client does) takes its upstream with it: the
SDK starts the upstream in a session of its own, so a gateway that simply died would leave an
`npx` upstream running, orphaned. Real gateway process, real npm server-everything through npx."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import CLI, ROOT, server_env
from tests.fixtures.upstreams import NODE_BIN

pytestmark = pytest.mark.integration
MARKER = "mcp-server-everything stdio"  # npx, its shell and node
SERVER = "node .*mcp-server-everything stdio"  # the server itself: the gateway is up by then


def upstream_pids(pattern: str = MARKER) -> set[str]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return set(found.split())


def test_sigterm_stops_the_gateway_and_its_npx_upstream(tmp_path: Path) -> None:
    env = server_env(PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    already = upstream_pids()
    servers = upstream_pids(SERVER)
    gateway = subprocess.Popen(
        [*CLI, "gateway", "--policy", str(ROOT / "policies" / "everything.toml"), "--",
         "npx", "--no-install", "mcp-server-everything", "stdio"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (upstream_pids(SERVER) - servers):
            assert time.monotonic() < deadline, "the upstream never started"
            time.sleep(0.2)
        ours = upstream_pids() - already
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=20) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while ours & upstream_pids():
            assert time.monotonic() < deadline, f"upstream left running: {ours & upstream_pids()}"
            time.sleep(0.2)
    finally:
        if gateway.poll() is None:
            gateway.kill()
