"""A gateway is an intermediary (SPEC §15): it adds envelopes to its own denials only. A real MCP SDK
server (tests/fixtures/envelope_server.py, whose tools deny with hand-built SEP-2643 envelopes)
behind a real gateway process: the server's denial, its envelope (hints and context ID) and its
JSON-RPC denial reach the client as the server sent them (the same bytes on the wire), a malformed
one is not mended, the gateway adds no hint and no envelope of its own to them; a retry echoing the
server's context ID reaches the server, and the gateway's record names it; a call the gateway
itself refuses carries the gateway's envelope and never reaches the server.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, CONTEXT_ID_META_KEY, AuthorizationDenial
from tests.fixtures.envelope_server import envelope, payload
from tests.fixtures.gateway_upstream import Process, started
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, VERSIONS, server_env
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration

SERVER = [sys.executable, "-m", "tests.fixtures.envelope_server"]
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


@contextmanager
def gateway_http(tmp_path: Path) -> Iterator[tuple[Process, Path]]:
    policy, log = tmp_path / "policy.toml", tmp_path / "calls.jsonl"
    policy.write_text(POLICY, encoding="utf-8")
    base = f"http://127.0.0.1:{free_port()}"
    command = [*CLI, "gateway", "--policy", str(policy), "--listen", base, "--", *SERVER]
    with started(command, server_env(ENVELOPE_BARE="1", ENVELOPE_LOG=str(log)), f"{base}/mcp",
                 f"{base}/healthz") as process:
        yield process, log


class RawSession:
    """A 2025-11-25 session over plain HTTP: each answer's bytes exactly as the gateway wrote them
    (the `data:` of its SSE event)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=30)
        self.headers = {"Accept": "application/json, text/event-stream",
                        "Content-Type": "application/json"}
        opened = self.http.post(url, headers=self.headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
        self.headers |= {"mcp-session-id": opened.headers["mcp-session-id"],
                         "mcp-protocol-version": "2025-11-25"}
        self.http.post(url, headers=self.headers,
                       json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name: str, meta: dict[str, Any] | None = None) -> str:
        params: dict[str, Any] = {"name": name, "arguments": {}}
        if meta is not None:
            params["_meta"] = meta
        answer = self.http.post(self.url, headers=self.headers,
                                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        assert answer.status_code == 200, answer.text
        return next(line[len("data: "):] for line in answer.text.splitlines()
                    if line.startswith("data: "))


def test_a_servers_own_denials_reach_the_client_as_it_sent_them(tmp_path: Path) -> None:
    with gateway_http(tmp_path) as (gateway, log):
        session = RawSession(gateway.url)
        deploy = session.call("deploy")
        rpc = session.call("deploy_rpc")
        own_denial = session.call("garbage")  # refused by the gateway's own policy
        retried = session.call("deploy", {CONTEXT_ID_META_KEY: "ctx-1"})
        output = gateway.output()
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
    policy, log, errors = tmp_path / "policy.toml", tmp_path / "calls.jsonl", tmp_path / "gw.err"
    policy.write_text('[tools.garbage]\nrequirements = []\n', encoding="utf-8")
    command = [*CLI, "gateway", "--policy", str(policy), "--", *SERVER]
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=ROOT,
                                   env=server_env(ENVELOPE_BARE="1", ENVELOPE_LOG=str(log)))
    with errors.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=MODES[version]) as client:
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
