"""A `self` approval is bound to the call that asked (SPEC §15; issue 39.1), through the gateway on
its HTTP listener, approvals in memory and in a real redis-server, what the upstream ran the oracle:

- 2025-11-25 (the MCP SDK's client): two identical calls in flight at once, each asked on its own
  stream; the first question accepted, the second declined: exactly one run (it was two).
- 2026-07-28 (raw HTTP, as a client that retries freely): eight concurrent retries accepting one
  round run the call once; a declined round runs nothing whatever retries follow; two identical
  calls get two rounds, and only the accepted one runs.

The memory store's rows (`wipe`) run in-process: the gateway wired from its command line and served
over the bridge, the listed server in memory, alice's token signed here and verified by `[auth]`
with the key inline. Interop, marked, with why: the Redis store's rows (`purge`), through a real
gateway process in front of a real listed server process, alice's token from the real provider and
the approvals in a real redis-server (the store under test, shared by the gateway's connections).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
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
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import BASE_URL, cli_gateway
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import CLI, MODES, server_env
from tests.fixtures.memory_upstream import MemoryServers
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
# wipe's approval is in memory (in-process), purge's in Redis (interop)
STORES = ["wipe", pytest.param("purge", marks=pytest.mark.interop)]
MEMORY_POLICY = """[auth]
{auth}[approvals.confirm]
approvers = "self"
[tools.wipe]
requirements = ["approval:confirm"]
"""
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}


class Listener:
    """The gateway's `/mcp` at `base`, alice's `token`, what ran (`runs`), and HTTP clients on it."""

    def __init__(self, base: str, runs: Callable[[], list[str]], token: str,
                 http: Callable[[], httpx.AsyncClient],
                 http2: Callable[[dict[str, str]], httpx2.AsyncClient]) -> None:
        self.base, self.runs, self.token, self.http, self.http2 = base, runs, token, http, http2

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
def real(tmp_path_factory: pytest.TempPathFactory, oidc_server: OidcServer,
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
        yield Listener(base, lambda: ran.read_text(encoding="utf-8").split() if ran.exists() else [],
                       oidc_server.user_token("alice"), lambda: httpx.AsyncClient(timeout=10),
                       lambda headers: httpx2.AsyncClient(headers=headers, timeout=10))


@asynccontextmanager
async def listening(tool: str, request: pytest.FixtureRequest, tmp_path: Path
                    ) -> AsyncIterator[Listener]:
    """The gateway for `tool`'s store: in this process for the memory store, else `real`."""
    if tool == "purge":
        yield request.getfixturevalue("real")
        return
    policy, ran = tmp_path / "policy.toml", list[str]()
    policy.write_text(MEMORY_POLICY.format(auth=ISSUER.auth_lines()), encoding="utf-8")
    servers = MemoryServers()
    upstream = servers.add("listed", lambda _env, _die: build(TOOLS, ran.append))
    with servers.installed():
        async with cli_gateway(["--policy", str(policy), "--listen", BASE_URL, "--",
                                *upstream]) as gw:
            await gw.until_ready()
            yield Listener(BASE_URL, lambda: list(ran), ISSUER.token("alice"),
                           lambda: gw.bridge.httpx(timeout=10),
                           lambda headers: gw.bridge.httpx2(headers=headers, timeout=10))


def ran(listener: Listener, tool: str) -> int:
    return listener.runs().count(tool)


@pytest.mark.parametrize("tool", STORES)
async def test_at_2025_11_25_two_identical_calls_each_answer_their_own_question(
        request: pytest.FixtureRequest, tmp_path: Path, tool: str) -> None:
    async with listening(tool, request, tmp_path) as listener:
        await _two_identical_calls(listener, tool)


async def _two_identical_calls(listener: Listener, tool: str) -> None:
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
    http = listener.http2({"Authorization": f"Bearer {listener.token}"})
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
        request: pytest.FixtureRequest, tmp_path: Path, tool: str) -> None:
    async with listening(tool, request, tmp_path) as listener:
        await _eight_retries_accepting_one_round_run_it_once(listener, tool)


async def _eight_retries_accepting_one_round_run_it_once(listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with listener.http() as http:
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
        request: pytest.FixtureRequest, tmp_path: Path, tool: str) -> None:
    async with listening(tool, request, tmp_path) as listener:
        await _a_declined_round_runs_nothing_whatever_follows(listener, tool)


async def _a_declined_round_runs_nothing_whatever_follows(listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with listener.http() as http:
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
        request: pytest.FixtureRequest, tmp_path: Path, tool: str) -> None:
    async with listening(tool, request, tmp_path) as listener:
        await _two_identical_calls_get_two_rounds_and_one_runs(listener, tool)


async def _two_identical_calls_get_two_rounds_and_one_runs(listener: Listener, tool: str) -> None:
    before = ran(listener, tool)
    async with listener.http() as http:
        yes, no = await _round(listener, http, tool), await _round(listener, http, tool)
        assert yes != no  # each call its own question (it was one shared request)
        answers = [_answer(yes, "accept")] * 4 + [_answer(no, "decline")] * 4
        await asyncio.gather(*(listener.post(http, tool, **a) for a in answers))
        await asyncio.gather(*(listener.post(http, tool, **_answer(no, "accept")) for _ in range(4)))
    assert ran(listener, tool) == before + 1
