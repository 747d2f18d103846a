"""An input round belongs to the tool and the server its call went to (SPEC §10): a 2026-07-28 retry
that names another server's tool of the same original name cannot continue it, through a gateway
(`--config`, two servers listing `ask`) in front of two asking upstreams.

In-process (tests/fixtures/inprocess.py): `gateway --config` wired in the test's event loop, the two
asking upstreams (tests/fixtures/asking_upstream.py) in memory, the raw 2026-07-28 requests async
httpx on the gateway's app over the streaming bridge; the policy's change is awaited as the
gateway's "reloaded" log line (no tools/list polled every 0.1 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures import asking_upstream
from tests.fixtures.fleet import command, write_gateway_toml
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.memory_upstream import MemoryServers

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}
ANSWER = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "4"}}


async def post(http: httpx.AsyncClient, rid: int, method: str, params: dict[str, Any]
               ) -> dict[str, Any]:
    headers = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    response = await http.post("/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": META}})
    body = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        body = next(line[5:] for line in body.splitlines() if line.startswith("data:"))
    message: dict[str, Any] = json.loads(body)
    return message


async def requirements_of(http: httpx.AsyncClient, name: str) -> list[str]:
    tools = (await post(http, 90, "tools/list", {}))["result"]["tools"]
    [tool] = [t for t in tools if t["name"] == name]
    return list((tool.get("execution") or {}).get("requirements") or [])


async def test_a_retry_naming_another_servers_tool_cannot_continue_a_round(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("# every tool open\n", encoding="utf-8")
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    memory = MemoryServers()
    with memory.installed():
        servers = {key: command(memory.asking_upstream(key, ASKING_UPSTREAM_LOG=str(log)))
                   for key, log in logs.items()}
        config = write_gateway_toml(tmp_path / "gateway.toml", policy, servers)
        async with cli_gateway(["--config", str(config), "--listen", "http://127.0.0.1:0",
                                "--policy-poll-seconds", "0.2"]) as gw, gw.http() as http:
            await gw.until_ready()
            first = (await post(http, 1, "tools/call", {"name": "a__ask", "arguments": {}}))["result"]
            assert first["resultType"] == "input_required"
            [key] = first["inputRequests"]
            # Server a's tool is now denied to this caller (the policy changed while it waited).
            seen = len(gw.log.lines)
            policy.write_text('[tools.a__ask]\nrequirements = ["auth:claim:role:admin"]\n',
                              encoding="utf-8")
            await gw.logged(r"policy .* reloaded", after=seen)
            assert await requirements_of(http, "a__ask") == ["auth:claim:role:admin"]
            answers = {"arguments": {}, "requestState": first["requestState"],
                       "inputResponses": {key: ANSWER}}
            denied = (await post(http, 2, "tools/call", {"name": "a__ask", **answers}))["result"]
            smuggled = await post(http, 3, "tools/call", {"name": "b__ask", **answers})
    assert denied["isError"] is True and denied["structuredContent"]["error"] == "unmet_requirements"
    assert smuggled["error"]["message"] == "Invalid or expired requestState"
    # Server a's question was never answered: its call ended without one.
    assert not [e for e in asking_upstream.read_log(logs["a"]) if e.get("asked") == "answer"]
    assert not [e for e in asking_upstream.read_log(logs["b"]) if "asked" in e]
