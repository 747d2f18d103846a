"""A gateway is an intermediary (SPEC §15): it adds envelopes to its own denials only. A real MCP SDK
server (tests/fixtures/envelope_server.py, whose tools deny with hand-built SEP-2643 envelopes)
behind the gateway: the server's denial, its envelope (hints and context ID) and its
JSON-RPC denial reach the client as the server sent them (the same bytes on the wire), a malformed
one is not mended, the gateway adds no hint and no envelope of its own to them; a retry echoing the
server's context ID reaches the server, and the gateway's record names it; a call the gateway
itself refuses carries the gateway's envelope and never reaches the server.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the envelope server in memory (each message crosses as the SDK's stdio transport writes it), a
raw HTTP session and the SDK's client on the gateway's app over the streaming bridge.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, CONTEXT_ID_META_KEY, AuthorizationDenial
from tests.fixtures import envelope_server
from tests.fixtures.envelope_server import envelope, payload
from tests.fixtures.inprocess import InProcess, cli_gateway
from tests.fixtures.memory_upstream import Die, MemoryServers, Serving
from tests.integration.test_gateway_calls import VERSIONS

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The gateway's own policy: the server's tools are open (it declares none), but for `garbage`.
POLICY = 'environment = ["staging"]\n[tools.garbage]\nrequirements = ["env:production"]\n'
DECISIONS = "mcp_preconditions.decisions: "


def compact(value: Any) -> str:
    """A JSON value as the MCP SDK's server writes it (no spaces, members in order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] \
        if log.exists() else []


def records(output: str) -> list[dict[str, Any]]:
    return [json.loads(line.split(DECISIONS, 1)[1]) for line in output.splitlines()
            if DECISIONS in line]


def envelope_server_in_memory(log: Path) -> Callable[[Mapping[str, str], Die], Serving]:
    """tests/fixtures/envelope_server.py's server as its stdio process runs it (ENVELOPE_BARE,
    recording in `log`), one per start."""
    return lambda _env, _die: envelope_server.build([], str(log), bare=True)


@asynccontextmanager
async def gateway(tmp_path: Path, policy_text: str, *options: str
                  ) -> AsyncIterator[tuple[InProcess, Path]]:
    """`gateway --policy P OPTIONS -- ENVELOPE_SERVER` in-process, once the server is listed."""
    policy, log = tmp_path / "policy.toml", tmp_path / "calls.jsonl"
    policy.write_text(policy_text, encoding="utf-8")
    servers = MemoryServers()
    with servers.installed():
        server = servers.add("envelope", envelope_server_in_memory(log))
        async with cli_gateway(["--policy", str(policy), *options, "--", *server]) as gw:
            await gw.until_ready()
            yield gw, log


class RawSession:
    """A 2025-11-25 session over plain HTTP: each answer's bytes exactly as the gateway wrote them
    (the `data:` of its SSE event)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.headers = {"Accept": "application/json, text/event-stream",
                        "Content-Type": "application/json"}

    async def open(self) -> RawSession:
        opened = await self.http.post("/mcp", headers=self.headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
        self.headers |= {"mcp-session-id": opened.headers["mcp-session-id"],
                         "mcp-protocol-version": "2025-11-25"}
        await self.http.post("/mcp", headers=self.headers,
                             json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def call(self, name: str, meta: dict[str, Any] | None = None) -> str:
        params: dict[str, Any] = {"name": name, "arguments": {}}
        if meta is not None:
            params["_meta"] = meta
        answer = await self.http.post("/mcp", headers=self.headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        assert answer.status_code == 200, answer.text
        return next(line[len("data: "):] for line in answer.text.splitlines()
                    if line.startswith("data: ") and line != "data: ")  # (not the priming event)


async def test_a_servers_own_denials_reach_the_client_as_it_sent_them(tmp_path: Path) -> None:
    async with gateway(tmp_path, POLICY, "--listen", "http://127.0.0.1:0") as (gw, log), \
            gw.http() as http:
        session = await RawSession(http).open()
        deploy = await session.call("deploy")
        rpc = await session.call("deploy_rpc")
        own_denial = await session.call("garbage")  # refused by the gateway's own policy
        retried = await session.call("deploy", {CONTEXT_ID_META_KEY: "ctx-1"})
        output = gw.output()
    sent = envelope("ctx-1")  # what the server sent: an envelope with a url hint
    assert compact({AUTHORIZATION_META_KEY: sent}) in deploy  # the same bytes
    result = json.loads(deploy)["result"]
    assert result["_meta"] == {AUTHORIZATION_META_KEY: sent}  # nothing added: no hint, no ID
    assert (result["isError"], result["structuredContent"]) == (True, payload("deploy"))
    error = json.loads(rpc)["error"]  # the server's JSON-RPC denial, passed on as it is
    assert compact(error["data"]) in rpc
    assert error["data"] == {**payload("deploy_rpc"), "_meta": {AUTHORIZATION_META_KEY: envelope("ctx-2")}}
    # The gateway's own denial carries the gateway's envelope; the server never saw the call.
    own = AuthorizationDenial.from_meta(json.loads(own_denial)["result"]["_meta"])
    assert own is not None and own.remediation.value == "unavailable"
    assert own.context_id.startswith("authzctx_") and own.hints == ()
    # The retry's echo reached the server (it deploys once echoed), and the gateway recorded it.
    assert json.loads(retried)["result"]["content"][0]["text"] == "deployed after ctx-1"
    assert [(c["tool"], c["echoed"]) for c in calls(log)] == [
        ("deploy", None), ("deploy_rpc", None), ("deploy", "ctx-1")]
    mine = [(r["tool"], r["allowed"], r.get("context_id"), r.get("echoed_context_id"))
            for r in records(output)]
    assert mine == [("deploy", True, None, None), ("deploy_rpc", True, None, None),
                    ("garbage", False, own.context_id, None), ("deploy", True, None, "ctx-1")]


@pytest.mark.parametrize("version", VERSIONS)
async def test_through_the_sdks_client_the_servers_envelope_is_untouched(
        version: str, tmp_path: Path) -> None:
    async with gateway(tmp_path, '[tools.garbage]\nrequirements = []\n') as (gw, log), \
            gw.client(VERSIONS[version]) as client:
        deploy = await client.call_tool("deploy", {"n": 1})
        garbage = await client.call_tool("garbage", {})
        with pytest.raises(MCPError) as rpc:
            await client.call_tool("deploy_rpc", {})
    assert deploy.meta == {AUTHORIZATION_META_KEY: envelope("ctx-1")}
    assert deploy.structured_content == payload("deploy")
    # A malformed envelope is the server's: the gateway neither mends nor replaces it.
    assert garbage.meta == {AUTHORIZATION_META_KEY: {**envelope("ctx-2"), "remediation": "perhaps"}}
    assert rpc.value.error.data == {**payload("deploy_rpc"),
                                    "_meta": {AUTHORIZATION_META_KEY: envelope("ctx-3")}}
    assert [c["tool"] for c in calls(log)] == ["deploy", "garbage", "deploy_rpc"]
