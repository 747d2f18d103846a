"""Upstream faults never take the gateway down and never turn a denial into an allow: the upstream
killed mid-call, a tool hanging past `[gateway] call_timeout_seconds`, a non-JSON line on the
upstream's stdout, an HTTP upstream that is down when the gateway starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client

from tests.fixtures.gateway_upstream import (
    ECHO_RESULT,
    gateway_http,
    gateway_stdio,
    read_log,
    tool_calls,
    upstream_http,
)
from tests.fixtures.ports import free_port
from tests.integration.test_gateway_calls import raw_call

POLICY = """
[tools.echo]
requirements = ["auth:claim:role:observer"]
[gateway]
call_timeout_seconds = {timeout}
"""
OBSERVER = '{"sub": "olga", "role": "observer"}'
RECOVERY_SECONDS = 60.0  # restart with backoff, on a loaded machine


def files(tmp_path: Path, timeout: float) -> tuple[Path, Path, Path]:
    policy, claims = tmp_path / "policy.toml", tmp_path / "observer.json"
    policy.write_text(POLICY.format(timeout=timeout), encoding="utf-8")
    claims.write_text(OBSERVER, encoding="utf-8")
    return policy, claims, tmp_path / "upstream.jsonl"


async def until_echo_works(client: Client) -> dict[str, Any]:
    """Call `echo` until the upstream answers again; every answer meanwhile is a tool error."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        result = await raw_call(client, "echo")
        if not result.get("isError") or time.monotonic() > deadline:
            return result
        assert result["content"][0]["text"].startswith("server upstream ")
        await anyio.sleep(0.2)


async def test_upstream_killed_mid_call_fails_that_call_at_once_and_is_restarted(
        tmp_path: Path) -> None:
    policy, claims, log = files(tmp_path, timeout=120)
    async with Client(gateway_stdio(policy, log, "--claims", str(claims)), mode="legacy") as client:
        started = time.monotonic()
        crashed = await raw_call(client, "crash")
        elapsed = time.monotonic() - started
        denied_meanwhile = await raw_call(client, "secret")
        recovered = await until_echo_works(client)
    assert crashed["isError"] is True
    assert crashed["content"][0]["text"].startswith("server upstream ")
    assert elapsed < 60  # seen when the process exited, not at the 120 s call timeout
    assert denied_meanwhile["structuredContent"]["error"] == "unmet_requirements"
    assert recovered["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert "secret" not in tool_calls(log)


async def test_a_tool_hanging_past_the_timeout_gets_a_tool_error_and_the_gateway_answers_on(
        tmp_path: Path) -> None:
    # The timeout bounds `echo` after it too: 10 s, so that a loaded machine does not make it a
    # second hung call (5 s was within reach of two loaded cores).
    policy, claims, log = files(tmp_path, timeout=10)
    async with Client(gateway_stdio(policy, log, "--claims", str(claims)), mode="legacy") as client:
        hung = await raw_call(client, "slow", {"seconds": 600})
        after = await raw_call(client, "echo")
        denied = await raw_call(client, "secret")
    assert hung["isError"] is True
    assert "timed out" in hung["content"][0]["text"]
    assert after["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert denied["structuredContent"]["error"] == "unmet_requirements"
    assert tool_calls(log) == ["slow", "echo"]
    assert "notifications/cancelled" in [e["method"] for e in read_log(log)]  # the upstream was told


async def test_a_non_json_line_from_the_upstream_is_skipped_and_traffic_goes_on(
        tmp_path: Path) -> None:
    policy, claims, log = files(tmp_path, timeout=30)
    async with Client(gateway_stdio(policy, log, "--claims", str(claims)), mode="auto") as client:
        garbage = await raw_call(client, "garbage")
        after = await raw_call(client, "echo")
    assert garbage["content"] == [{"type": "text", "text": "garbage done"}]
    assert after["structuredContent"] == ECHO_RESULT["structuredContent"]


def test_http_upstream_down_at_start_then_up_then_restarted(tmp_path: Path) -> None:
    policy, _claims, log = files(tmp_path, timeout=10)  # every call here expects an answer
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with gateway_http(policy, log, "--upstream-url", url) as gw:
        assert httpx.get(gw.url + "/healthz", timeout=30).status_code == 200
        down = httpx.get(gw.url + "/readyz", timeout=30)
        assert down.status_code == 503 and down.json()["servers"]["upstream"]["connected"] is False
        refused = anyio.run(_call_anonymously, gw.url + "/mcp", "slow")
        assert refused["isError"] is True  # a tool the gateway never saw is not forwarded blind
        with upstream_http(log, port):
            wait_ready(gw.url, gw.output)
            denied = anyio.run(_call_anonymously, gw.url + "/mcp", "echo")
            allowed = anyio.run(_call_anonymously, gw.url + "/mcp", "slow")
        # The upstream goes away and comes back: the gateway stays up and reconnects.
        assert httpx.get(gw.url + "/readyz", timeout=30).status_code == 503
        while_down = anyio.run(_call_anonymously, gw.url + "/mcp", "slow")
        with upstream_http(log, port):
            wait_ready(gw.url, gw.output)
            again = anyio.run(_call_anonymously, gw.url + "/mcp", "slow")
    assert denied["structuredContent"]["unmet"] == ["auth:claim:role:observer"]
    assert allowed == {"content": [{"type": "text", "text": "slow done"}], "isError": False}
    assert while_down["isError"] is True
    assert while_down["content"][0]["text"].startswith("server upstream ")
    assert again == allowed
    assert tool_calls(log) == ["slow", "slow"]


def wait_ready(url: str, output: Callable[[], str]) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while httpx.get(url + "/readyz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, output()
        time.sleep(0.2)


async def _call_anonymously(url: str, name: str) -> dict[str, Any]:
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool(name, {"seconds": 0})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True,
                             exclude={"result_type"})
