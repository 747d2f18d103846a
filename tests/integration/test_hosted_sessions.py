"""A hosted guarded server's streamable HTTP sessions belong to the caller that opened them (SPEC §10):
`serve --transport http`, `GuardedMCPServer`'s own HTTP apps, a `guard_server` lowlevel `Server`'s
app and a `guard_fastmcp` app's `http_app()` (streamable HTTP and SSE) with `SessionOwners`, with
verified tokens. Another principal's token (or none) gets 404 for the session, as for an unknown one,
on every verb; the owner, and a fresh token of the same principal, carry on.

In-process: each app called through the streaming bridge (tests/fixtures/asgi_bridge.py), `serve`
wired from its command line (tests/fixtures/hosted.py), tokens signed in this process. The real
provider's tokens and a real `serve` over a socket are tests/integration/test_mcp_http.py's interop
rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import mcp_types
import pytest
from fastmcp import FastMCP
from mcp.server.lowlevel.server import Server
from starlette.middleware import Middleware

from mcp_preconditions.examples_server import LAUNCH_REQUIREMENTS, build_server
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import SessionOwners, guard_server
from mcp_preconditions.policy.load import load_policy
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.hosted import ISSUER, local_policy, serving
from tests.fixtures.inprocess import BASE_URL

pytestmark = pytest.mark.integration

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
LAUNCH = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
          "params": {"name": "launch_rocket", "arguments": {"vehicle": "Falcon 9"}}}


def _on(session: str, token: str | None) -> dict[str, str]:
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return headers


async def _open_session(http: httpx.AsyncClient, token: str) -> str:
    init = await http.post("/mcp", headers={"authorization": f"Bearer {token}"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-http", "version": "1"}}})
    assert init.status_code == 200, init.text
    session = init.headers["mcp-session-id"]
    initialized = await http.post("/mcp", headers=_on(session, token),
                                  json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert initialized.status_code == 202, initialized.text
    return session


def _result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of a POST answered as one SSE event (or plain JSON)."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        body: dict[str, Any] = response.json()
    else:
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        body = json.loads(data[-1])
    result: dict[str, Any] = body["result"]
    return result


@pytest.fixture
def owner_and_others() -> tuple[str, list[str | None]]:
    """Mission control's token, and callers who are someone else: the observer, no token at all,
    and a forged token of mission control (its signature broken)."""
    owner = ISSUER.token()
    return owner, [ISSUER.token("observer", scope="mission:read"), None, ISSUER.forged(owner)]


async def _status_of_get(http: httpx.AsyncClient, headers: dict[str, str]) -> int:
    """The status of a GET stream's answer (the stream closed at once: a client gone)."""
    async with http.stream("GET", "/mcp", headers=headers) as stream:
        return stream.status_code


async def _assert_owned(http: httpx.AsyncClient, owner: str, others: list[str | None]) -> None:
    session = await _open_session(http, owner)
    for other in others:
        assert (await http.post("/mcp", headers=_on(session, other), json=LAUNCH)).status_code == 404
        assert await _status_of_get(http, _on(session, other)) == 404
        assert (await http.delete("/mcp", headers=_on(session, other))).status_code == 404
    # The owner's session is untouched: its call runs as mission control's.
    launched = _result(await http.post("/mcp", headers=_on(session, owner), json=LAUNCH))
    assert launched["isError"] is False, launched
    assert await _status_of_get(http, _on(session, owner)) == 200
    refreshed = ISSUER.token()  # the same principal, a new token: its session still
    assert refreshed != owner
    listed = _result(await http.post("/mcp", headers=_on(session, refreshed), json=LISTING))["tools"]
    assert "launch_rocket" in [t["name"] for t in listed]
    assert (await http.delete("/mcp", headers=_on(session, refreshed))).status_code == 200
    assert (await http.post("/mcp", headers=_on(session, owner), json=LISTING)).status_code == 404


@asynccontextmanager
async def serve_http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """Plain httpx on `serve --transport http` (mission control's policy, verifying `ISSUER`)."""
    async with serving("--policy", str(local_policy(tmp_path)), "--transport", "http") as served, \
            served.http(headers=ACCEPT) as http:
        yield http


async def test_serve_over_http_keeps_a_session_to_the_principal_that_opened_it(
        tmp_path: Path, owner_and_others: tuple[str, list[str | None]]) -> None:
    async with serve_http(tmp_path) as http:
        await _assert_owned(http, *owner_and_others)


async def _refused(http: httpx.AsyncClient) -> dict[str, float]:
    page = (await http.get("/metrics")).text
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^mcp_preconditions_http_refused_total\{reason="(\w+)"\} (\S+)$', page, re.MULTILINE)}


async def test_serve_counts_its_refusals_before_a_decision_as_the_gateway_does(
        tmp_path: Path, owner_and_others: tuple[str, list[str | None]]) -> None:
    """Another's session (and an ended one) is a `session` refusal, a rebound Host a `host` one,
    in the same series and by the same reasons as the gateway's (issue 29)."""
    async with serve_http(tmp_path) as http:
        before = await _refused(http)
        await _assert_owned(http, *owner_and_others)  # 3 others x 3 verbs, 1 ended session
        rebound = await http.post("/mcp", headers={"host": "rebound.attacker.test"}, json=LISTING)
        after = await _refused(http)
    assert rebound.status_code == 421
    assert {r: after[r] - before[r] for r in after} == {
        "token_missing": 0, "token_invalid": 0, "session": 10, "host": 1, "over_cap": 0}


@pytest.fixture
def guard(tmp_path_factory: pytest.TempPathFactory) -> Guard:
    """Mission control's guard, verifying the issuer's tokens itself."""
    return Guard(load_policy(local_policy(tmp_path_factory.mktemp("owned"))))


def _mcpserver_app(guard: Guard) -> Any:
    """`GuardedMCPServer.streamable_http_app()`: binds its sessions itself."""
    return build_server(guard).streamable_http_app()


def _lowlevel_app(guard: Guard) -> Any:
    """A lowlevel `Server` guarded by `guard_server`, served by the SDK's own streamable HTTP app
    with the one line docs/mcp.md asks for."""
    tool = mcp_types.Tool(name="launch_rocket", input_schema={
        "type": "object", "properties": {"vehicle": {"type": "string"}}})

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="launched")])

    server: Server[Any] = Server("mission-control", on_list_tools=list_tools, on_call_tool=call_tool)
    guard_server(server, guard, requirements={"launch_rocket": LAUNCH_REQUIREMENTS})
    app = server.streamable_http_app()
    app.add_middleware(SessionOwners, guard=guard)
    return app


def _fastmcp(guard: Guard) -> FastMCP[Any]:
    app: FastMCP[Any] = FastMCP("mission-control")
    pre = guard_fastmcp(app, guard)

    @app.tool(output_schema=None)
    @pre.requires(*LAUNCH_REQUIREMENTS)
    def launch_rocket(vehicle: str) -> str:
        return f"{vehicle} has cleared the tower."

    return app


def _fastmcp_app(guard: Guard, transport: Literal["http", "sse"] = "http") -> Any:
    """A `guard_fastmcp` app's `http_app()`, with the middleware docs/mcp.md asks for."""
    return _fastmcp(guard).http_app(transport=transport,
                                    middleware=[Middleware(SessionOwners, guard=guard)])


@pytest.mark.parametrize("hosted", [_mcpserver_app, _lowlevel_app, _fastmcp_app],
                         ids=["MCPServer", "lowlevel", "fastmcp"])
async def test_the_streamable_http_app_keeps_sessions_to_their_principal(
        hosted: Callable[[Guard], Any], guard: Guard,
        owner_and_others: tuple[str, list[str | None]]) -> None:
    async with AsgiBridge(hosted(guard), base_url=BASE_URL) as bridge, \
            bridge.httpx(headers=ACCEPT) as http:
        await _assert_owned(http, *owner_and_others)


@pytest.mark.parametrize("hosted", [lambda guard: build_server(guard).sse_app(),
                                    lambda guard: _fastmcp_app(guard, "sse")],
                         ids=["MCPServer", "fastmcp"])
async def test_the_sse_app_keeps_sessions_to_their_principal(
        hosted: Callable[[Guard], Any], guard: Guard,
        owner_and_others: tuple[str, list[str | None]]) -> None:
    owner, others = owner_and_others
    async with AsgiBridge(hosted(guard), base_url=BASE_URL) as bridge, bridge.httpx() as http, \
            http.stream("GET", "/sse", headers={"authorization": f"Bearer {owner}"}) as stream:
        assert stream.status_code == 200
        lines = stream.aiter_lines()
        endpoint = await anext(line[5:].strip() async for line in lines if line.startswith("data:"))
        for other in others:
            headers = {"authorization": f"Bearer {other}"} if other else {}
            assert (await http.post(endpoint, headers=headers, json=LISTING)).status_code == 404
        mine = await http.post(endpoint, headers={"authorization": f"Bearer {owner}"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw-sse", "version": "1"}}})
        assert mine.status_code == 202
        answer = await anext(line async for line in lines if line.startswith("data:"))
        assert json.loads(answer[5:])["id"] == 1
