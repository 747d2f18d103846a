"""A `self` approval is bound to the call that asked (SPEC §15; issue 39.1), through a real gateway
process on its HTTP listener, callers with real tokens of the oidc-provider, approvals in memory
and in a real redis-server, RAN.log (the upstream's own) the oracle of what ran:

- 2025-11-25 (the MCP SDK's client): two identical calls in flight at once, each asked on its own
  stream; the first question accepted, the second declined: exactly one run (it was two).
- 2026-07-28 (raw HTTP, as a client that retries freely): eight concurrent retries accepting one
  round run the call once; a declined round runs nothing whatever retries follow; two identical
  calls get two rounds, and only the accepted one runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.approvals import envelope
from tests.fixtures.gateway_upstream import started
from tests.fixtures.mcp_servers import CLI, MODES, server_env
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "purge")]
POLICY = """# run {run}
[guard]
lookup_timeout_seconds = 5
[auth]
issuer = "{issuer}"
audience = "{audience}"
jwks_uri = "{jwks}"
[state.redis]
url = "{redis}"
connect_timeout_seconds = 3
read_timeout_seconds = 3
[approvals.confirm]
approvers = "self"
[approvals.shared]
approvers = "self"
store = "redis"
[tools.wipe]
requirements = ["approval:confirm"]
[tools.purge]
requirements = ["approval:shared"]
"""
STORES = ["wipe", "purge"]  # wipe's approval is in memory, purge's in Redis
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}


class Listener:
    def __init__(self, base: str, ran: Path, token: str) -> None:
        self.base, self.ran, self.token = base, ran, token

    def runs(self) -> list[str]:
        return self.ran.read_text(encoding="utf-8").split() if self.ran.exists() else []

    async def post(self, http: httpx.AsyncClient, tool: str, **params: Any) -> dict[str, Any]:
        """One 2026-07-28 `tools/call` of `tool` with `{"path": "/"}`; its result."""
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "tools/call",
                "params": {"name": tool, "arguments": {"path": "/"}, **params, "_meta": META}}
        response = await http.post(f"{self.base}/mcp", json=body, headers={
            "authorization": f"Bearer {self.token}", "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call", "mcp-name": tool,
            "accept": "application/json, text/event-stream"})
        text = response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        result: dict[str, Any] = json.loads(text)["result"]
        return result


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory, oidc_server: OidcServer,
             redis_server: RedisServer) -> Iterator[Listener]:
    tmp = tmp_path_factory.mktemp("self-bound")
    policy, tools, ran = tmp / "policy.toml", tmp / "tools.json", tmp / "ran.log"
    policy.write_text(POLICY.format(run=uuid.uuid4().hex, issuer=oidc_server.issuer,
                                    audience=AUDIENCE, jwks=oidc_server.jwks_uri,
                                    redis=redis_server.url), encoding="utf-8")
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    base = f"http://127.0.0.1:{free_port()}"
    command = [*CLI, "gateway", "--policy", str(policy), "--listen", base, "--",
               sys.executable, "-m", "tests.fixtures.listed_server", str(tools), str(ran)]
    with started(command, server_env(), f"{base}/mcp", f"{base}/healthz"):
        yield Listener(base, ran, oidc_server.user_token("alice"))


def ran(listener: Listener, tool: str) -> int:
    return listener.runs().count(tool)


@pytest.mark.parametrize("tool", STORES)
async def test_at_2025_11_25_two_identical_calls_each_answer_their_own_question(
        listener: Listener, tool: str) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []
    both = anyio.Event()

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        mine = len(asked)
        if mine == 2:
            both.set()
        await both.wait()  # both calls are in flight, each asked: then the first yes, the second no
        return mcp_types.ElicitResult(action="accept", content={}) if mine == 1 else \
            mcp_types.ElicitResult(action="decline")

    before = ran(listener, tool)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {listener.token}"}, timeout=60)
    async with Client(streamable_http_client(f"{listener.base}/mcp", http_client=http),
                      mode=MODES["2025-11-25"], elicitation_callback=answer) as client:
        results = await asyncio.gather(*(client.call_tool(tool, {"path": "/"}) for _ in range(2)))
    assert len(asked) == 2
    assert sorted(r.is_error for r in results) == [False, True]
    [refused] = [r for r in results if r.is_error]
    assert envelope(refused) == ("unavailable", [])
    assert ran(listener, tool) == before + 1  # it was 2: the declined call ran too


async def _round(listener: Listener, http: httpx.AsyncClient, tool: str) -> str:
    first = await listener.post(http, tool)
    assert first["resultType"] == "input_required" and list(first["inputRequests"]) == ["approval"]
    state: str = first["requestState"]
    return state


def _answer(state: str, action: str) -> dict[str, Any]:
    response = {"action": action, **({"content": {}} if action == "accept" else {})}
    return {"requestState": state, "inputResponses": {"approval": response}}


@pytest.mark.parametrize("tool", STORES)
async def test_at_2026_07_28_eight_retries_accepting_one_round_run_it_once(
        listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with httpx.AsyncClient(timeout=60) as http:
        state = await _round(listener, http, tool)
        results = await asyncio.gather(*(listener.post(http, tool, **_answer(state, "accept"))
                                         for _ in range(8)))
        assert ran(listener, tool) == before + 1  # 3 of 8 ran on the Redis store
        ok = [r for r in results if r.get("resultType") != "input_required" and not r.get("isError")]
        assert len(ok) == 1
        again = await listener.post(http, tool, **_answer(state, "accept"))  # a replay: a new call
        assert again["resultType"] == "input_required" and again["requestState"] != state
    assert ran(listener, tool) == before + 1


@pytest.mark.parametrize("tool", STORES)
async def test_at_2026_07_28_a_declined_round_runs_nothing_whatever_follows(
        listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with httpx.AsyncClient(timeout=60) as http:
        state = await _round(listener, http, tool)
        declined = await listener.post(http, tool, **_answer(state, "decline"))
        assert declined["isError"] is True
        assert declined["structuredContent"]["unmet"] == [
            "approval:confirm" if tool == "wipe" else "approval:shared"]
        await asyncio.gather(*(listener.post(http, tool, **_answer(state, "accept"))
                               for _ in range(6)))
    assert ran(listener, tool) == before


@pytest.mark.parametrize("tool", STORES)
async def test_at_2026_07_28_two_identical_calls_get_two_rounds_and_one_runs(
        listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with httpx.AsyncClient(timeout=60) as http:
        yes, no = await _round(listener, http, tool), await _round(listener, http, tool)
        assert yes != no  # each call its own question (it was one shared request)
        answers = [_answer(yes, "accept")] * 4 + [_answer(no, "decline")] * 4
        await asyncio.gather(*(listener.post(http, tool, **a) for a in answers))
        await asyncio.gather(*(listener.post(http, tool, **_answer(no, "accept")) for _ in range(4)))
    assert ran(listener, tool) == before + 1
