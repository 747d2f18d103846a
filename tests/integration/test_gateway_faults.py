"""Upstream faults never take the gateway down and never turn a denial into an allow: the upstream
killed mid-call, a tool hanging past `[gateway] call_timeout_seconds`, a non-JSON line on the
upstream's stdout, an HTTP upstream that is down when the gateway starts.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, its stdio upstream in memory (a crash ends it as a process exit does, and the gateway's
supervision starts a new one), its HTTP upstream an SDK server on a socket of this loop, stopped and
started again on the same port. Each wait is on the event (a new start, a session up, the log line
the upstream writes), with one safety net. The non-JSON line stays with a real process: it is about
the stdio framing of a real child.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.fixtures.gateway_upstream import (
    ECHO_RESULT,
    LoggingUpstream,
    gateway_stdio,
    read_log,
    tool_calls,
)
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, asgi_served, cli_gateway, until
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.ports import free_port
from tests.integration.test_gateway_calls import raw_call

pytestmark = pytest.mark.asyncio(loop_scope="module")

POLICY = """
[tools.echo]
requirements = ["auth:claim:role:observer"]
[gateway]
call_timeout_seconds = {timeout}
"""
OBSERVER = '{"sub": "olga", "role": "observer"}'
# The gateway's call timeout where a test waits for it (a hung call; a client's handshake while the
# server is down waits as long, bounded by it): short, as an answer in this process takes
# milliseconds and each call after it has as long again.
SHORT_TIMEOUT = 2.0


def files(tmp_path: Path, timeout: float) -> tuple[Path, Path, Path]:
    policy, claims = tmp_path / "policy.toml", tmp_path / "observer.json"
    policy.write_text(POLICY.format(timeout=timeout), encoding="utf-8")
    claims.write_text(OBSERVER, encoding="utf-8")
    return policy, claims, tmp_path / "upstream.jsonl"


@asynccontextmanager
async def stdio_gateway(tmp_path: Path, timeout: float) -> AsyncIterator[tuple[InProcess, Path,
                                                                               MemoryServers]]:
    """`gateway --policy P --claims C -- UPSTREAM` in-process, its upstream in memory."""
    policy, claims, log = files(tmp_path, timeout)
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream(**logging_env(log))
        async with cli_gateway(["--policy", str(policy), "--claims", str(claims), "--",
                                *upstream]) as gateway:
            yield gateway, log, servers


async def test_upstream_killed_mid_call_fails_that_call_at_once_and_is_restarted(
        tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, timeout=120) as (gateway, log, servers):
        upstream = gateway.gateway.fleet.members["upstream"].upstream
        async with gateway.client() as client:
            crashed = await raw_call(client, "crash")
            denied_meanwhile = await raw_call(client, "secret")
            await until(lambda: servers.starts["upstream"] == 2, "the upstream was not restarted")
            assert await upstream.wait_connected(WAIT_SECONDS) is not None
            recovered = await raw_call(client, "echo")
    assert crashed["isError"] is True
    # Seen when the server ended, not at the 120 s call timeout (that would say "timed out").
    assert crashed["content"][0]["text"].startswith("server upstream ")
    assert "timed out" not in crashed["content"][0]["text"]
    assert denied_meanwhile["structuredContent"]["error"] == "unmet_requirements"
    assert recovered["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert "secret" not in tool_calls(log)


async def test_a_tool_hanging_past_the_timeout_gets_a_tool_error_and_the_gateway_answers_on(
        tmp_path: Path) -> None:
    async with stdio_gateway(tmp_path, timeout=SHORT_TIMEOUT) as (gateway, log, _servers):
        async with gateway.client() as client:
            hung = await raw_call(client, "slow", {"seconds": 600})
            after = await raw_call(client, "echo")
            denied = await raw_call(client, "secret")
        # The upstream is told, in the background: what it received says so once it has.
        await until(lambda: "notifications/cancelled" in [e["method"] for e in read_log(log)],
                    "the upstream was not told of the cancelled call")
    assert hung["isError"] is True
    assert "timed out" in hung["content"][0]["text"]
    assert after["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert denied["structuredContent"]["error"] == "unmet_requirements"
    assert tool_calls(log) == ["slow", "echo"]


@pytest.mark.interop
async def test_a_non_json_line_from_the_upstream_is_skipped_and_traffic_goes_on(
        tmp_path: Path) -> None:
    """Interop: the line that is not JSON is written on a real child's stdout, read by the gateway
    process's own stdio framing (an in-memory server carries messages, not lines)."""
    policy, claims, log = files(tmp_path, timeout=30)
    async with Client(gateway_stdio(policy, log, "--claims", str(claims)), mode="auto") as client:
        garbage = await raw_call(client, "garbage")
        after = await raw_call(client, "echo")
    assert garbage["content"] == [{"type": "text", "text": "garbage done"}]
    assert after["structuredContent"] == ECHO_RESULT["structuredContent"]


def http_upstream_app(log: Path) -> Any:
    """The logging upstream's streamable-HTTP app, recording in `log`."""
    return LoggingUpstream(logging_env(log)).build().streamable_http_app(host="127.0.0.1")


async def test_http_upstream_down_at_start_then_up_then_restarted(tmp_path: Path) -> None:
    policy, _claims, log = files(tmp_path, timeout=SHORT_TIMEOUT)  # every call expects an answer
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with cli_gateway(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                            "--upstream-url", url]) as gateway:
        async with gateway.http() as http:
            assert (await http.get("/healthz")).status_code == 200
            down = await http.get("/readyz")
        assert down.status_code == 503 and down.json()["servers"]["upstream"]["connected"] is False
        refused = await call_anonymously(gateway, "slow")
        assert refused["isError"] is True  # a tool the gateway never saw is not forwarded blind
        async with asgi_served(http_upstream_app(log), port):
            await gateway.until_ready()
            denied = await call_anonymously(gateway, "echo")
            allowed = await call_anonymously(gateway, "slow")
        # The upstream goes away and comes back: the gateway stays up and reconnects.
        await gateway.until_ready(lambda body: not body["servers"]["upstream"]["connected"])
        while_down = await call_anonymously(gateway, "slow")
        async with asgi_served(http_upstream_app(log), port):
            await gateway.until_ready()
            again = await call_anonymously(gateway, "slow")
    assert denied["structuredContent"]["unmet"] == ["auth:claim:role:observer"]
    assert allowed == {"content": [{"type": "text", "text": "slow done"}], "isError": False}
    assert while_down["isError"] is True
    assert while_down["content"][0]["text"].startswith("server upstream ")
    assert again == allowed
    assert tool_calls(log) == ["slow", "slow"]


async def call_anonymously(gateway: InProcess, name: str) -> dict[str, Any]:
    async with gateway.client() as client:
        result = await client.call_tool(name, {"seconds": 0})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True,
                             exclude={"result_type"})
