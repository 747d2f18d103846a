"""Quotas through a real MCP server (GuardedMCPServer over streamable HTTP, and in memory) and the
SDK's own client: 20 concurrent calls of one subject with `calls = 3` run the tool exactly 3 times;
calls denied for another requirement take nothing; every refusal says when the quota refills, marks
it transient, and the filtering client keeps offering the tool.

In-process: the HTTP apps called through the streaming bridge (tests/fixtures/asgi_bridge.py), the
20 calls concurrent requests on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_preconditions import Credentials, Guard, Knowledge, Principal, parse_policy
from mcp_preconditions.client import TRANSIENT_META_KEY
from mcp_preconditions.integrations.client_mcp import RequirementsClient
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.inprocess import BASE_URL
from tests.fixtures.mcp_servers import MODES, VERSIONS, denial_payload

pytestmark = pytest.mark.integration

POLICY = b"""
[quotas."launch.hourly"]
calls = 3
per_seconds = 3600
[tools.launch]
requirements = ["auth:claim:role:mission_control", "quota:launch.hourly"]
"""
OPERATOR = {"sub": "alice", "role": "mission_control"}
OBSERVER = {"sub": "alice", "role": "observer"}  # the same subject, without the role


def server(guard: Guard, claims: dict[str, Any], ran: list[str]) -> GuardedMCPServer:
    app = GuardedMCPServer("range", guard=guard,
                           credentials=lambda _request: Credentials(principal=Principal.from_claims(claims)))

    @app.tool()
    def launch() -> str:
        ran.append(claims["role"])
        return "launched"

    return app


def guard(denial: str = "result") -> Guard:
    return Guard(parse_policy(POLICY + f'[guard]\ndenial = "{denial}"\n'.encode(), "q.toml"),
                 entry_points=False)


def refusals(results: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for result in results:
        if result.is_error:
            assert denial_payload(result)["unmet"] == ["quota:launch.hourly"]
            assert (result.meta or {})[TRANSIENT_META_KEY] == ["quota:launch.hourly"]
            out.append(denial_payload(result))
    return out


def over_http(bridge: AsgiBridge, version: str) -> Client:
    """The SDK's client on the app's `/mcp` over streamable HTTP."""
    return Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=bridge.httpx2()),
                  mode=MODES[version])


@pytest.mark.parametrize("version", VERSIONS)
async def test_twenty_concurrent_calls_run_the_tool_three_times_over_http(version: str) -> None:
    shared = guard()
    ran: list[str] = []
    async with AsgiBridge(server(shared, OBSERVER, ran).streamable_http_app(),
                          base_url=BASE_URL) as observer, \
            AsgiBridge(server(shared, OPERATOR, ran).streamable_http_app(),
                       base_url=BASE_URL) as operator:
        async with over_http(observer, version) as client:
            for _ in range(10):  # denied for the role: no unit taken
                denied = await client.call_tool("launch", {})
                assert denial_payload(denied)["unmet"] == ["auth:claim:role:mission_control"]
                assert "retry_after_seconds" not in denial_payload(denied)
        async with over_http(operator, version) as client:
            results = await asyncio.gather(*(client.call_tool("launch", {}) for _ in range(20)))
    assert ran == ["mission_control"] * 3
    refused = refusals(results)
    assert len(refused) == 17
    # One unit back every 1200 s: the first refusal waits a little less than that.
    assert all(1100 < r["retry_after_seconds"] <= 1200 for r in refused)


async def test_the_filtering_client_keeps_the_tool_after_a_quota_denial() -> None:
    ran: list[str] = []
    app = server(guard(), OPERATOR, ran)
    knowledge = Knowledge(satisfied=["auth:claim:role:mission_control"])
    async with Client(app) as client:
        wrapped = RequirementsClient(client, knowledge)
        results = [await wrapped.call_tool("launch", {}) for _ in range(5)]
        listed = await wrapped.list_tools()
    assert ran == ["mission_control"] * 3 and len(refusals(results)) == 2
    assert knowledge.learned() == frozenset()
    assert listed.names == ["launch"]
    assert listed.verdicts["launch"].will_fail is False


async def test_a_json_rpc_quota_denial_carries_the_refill_time_and_is_not_learned() -> None:
    ran: list[str] = []
    knowledge = Knowledge()
    async with Client(server(guard("jsonrpc"), OPERATOR, ran)) as client:
        wrapped = RequirementsClient(client, knowledge)
        for _ in range(3):
            assert not (await wrapped.call_tool("launch", {})).is_error
        with pytest.raises(MCPError) as raised:
            await wrapped.call_tool("launch", {})
    data = raised.value.data
    assert data["unmet"] == ["quota:launch.hourly"] and 1100 < data["retry_after_seconds"] <= 1200
    assert data["_meta"][TRANSIENT_META_KEY] == ["quota:launch.hourly"]
    assert "Retry after" in raised.value.message
    assert knowledge.learned() == frozenset() and len(ran) == 3
