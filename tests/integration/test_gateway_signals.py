"""A stdio gateway told to stop takes its upstream with it: on SIGTERM (as a desktop client sends),
and when the client closes stdin and sends SIGTERM 2 s later, in the middle of the upstream's
shutdown (as the MCP Inspector does). The SDK starts the upstream in a session of its own, so a
gateway that simply died would leave an `npx` upstream running, orphaned. Real gateway process, real
npm server-everything through npx; only this gateway's own descendants are looked at, so the test
may run beside others.

Interop: what it checks is a process's signal handling and its descendants (/proc), which an
in-process gateway, in the test's own process, does not have."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import CLI, ROOT, server_env
from tests.fixtures.upstreams import NODE_BIN

pytestmark = [pytest.mark.integration, pytest.mark.interop]


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of `pid` and its command line (from /proc)."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found and alive(child):
                    found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; whoever adopted it reaps it


def started_gateway() -> tuple[subprocess.Popen[bytes], dict[int, str]]:
    """A stdio gateway in front of npx server-everything, once the server itself runs: (process,
    its descendants then)."""
    env = server_env(PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    gateway = subprocess.Popen(
        [*CLI, "gateway", "--policy", str(ROOT / "policies" / "everything.toml"), "--",
         "npx", "--no-install", "mcp-server-everything", "stdio"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    deadline = time.monotonic() + 10
    while True:
        family = descendants(gateway.pid)
        if any("node" in cmd and "mcp-server-everything stdio" in cmd for cmd in family.values()):
            return gateway, family
        if time.monotonic() > deadline or gateway.poll() is not None:
            gateway.kill()
            raise AssertionError(f"the upstream never started: {family}")
        time.sleep(0.2)  # a poll of /proc (no event tells of a grandchild), within the wait


def assert_gone(family: dict[int, str]) -> None:
    deadline = time.monotonic() + 10  # a liveness deadline: node exits slowly on a loaded machine
    while left := {pid: cmd for pid, cmd in family.items() if alive(pid)}:
        if time.monotonic() > deadline:
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"upstream left running: {left}")
        time.sleep(0.2)  # a poll of /proc (no event tells of a grandchild's exit), within the wait


def test_sigterm_stops_the_gateway_and_its_npx_upstream() -> None:
    gateway, family = started_gateway()
    try:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=10) == 128 + signal.SIGTERM
        assert_gone(family)
    finally:
        if gateway.poll() is None:
            gateway.kill()


def test_sigterm_during_the_shutdown_after_stdin_closed_still_stops_the_upstream() -> None:
    gateway, family = started_gateway()
    try:
        assert gateway.stdin is not None
        gateway.stdin.close()  # the client has gone: the gateway begins stopping its upstream
        time.sleep(1.8)  # not a wait: the Inspector's timing, a SIGTERM inside the SDK's 2 s grace
        gateway.send_signal(signal.SIGTERM)  # and is told to stop meanwhile
        gateway.wait(timeout=10)
        assert_gone(family)
    finally:
        if gateway.poll() is None:
            gateway.kill()
