"""An input round belongs to the tool and the server its call went to (SPEC §10): a 2026-07-28 retry
that names another server's tool of the same original name cannot continue it, through a real
gateway (`--config`, two servers listing `ask`) in front of two real asking upstreams.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import asking_upstream
from tests.fixtures.fleet import base_url, command, fleet_http, write_gateway_toml

pytestmark = pytest.mark.integration

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}
ANSWER = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "4"}}


def post(http: httpx.Client, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    response = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": rid, "method": method,
                                                        "params": {**params, "_meta": META}})
    body = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        body = next(line[5:] for line in body.splitlines() if line.startswith("data:"))
    message: dict[str, Any] = json.loads(body)
    return message


def requirements_of(http: httpx.Client, name: str) -> list[str]:
    tools = post(http, 90, "tools/list", {})["result"]["tools"]
    [tool] = [t for t in tools if t["name"] == name]
    return list((tool.get("execution") or {}).get("requirements") or [])


def test_a_retry_naming_another_servers_tool_cannot_continue_a_round(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("# every tool open\n", encoding="utf-8")
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    servers = {key: command(asking_upstream.command(), {"ASKING_UPSTREAM_LOG": str(log)})
               for key, log in logs.items()}
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, servers)
    with fleet_http(config, "--policy-poll-seconds", "0.2") as gw, \
            httpx.Client(base_url=base_url(gw), headers=ACCEPT, timeout=30) as http:
        first = post(http, 1, "tools/call", {"name": "a__ask", "arguments": {}})["result"]
        assert first["resultType"] == "input_required"
        [key] = first["inputRequests"]
        # Server a's tool is now denied to this caller (the policy changed while it waited).
        policy.write_text('[tools.a__ask]\nrequirements = ["auth:claim:role:admin"]\n', encoding="utf-8")
        for _ in range(300):
            if requirements_of(http, "a__ask") == ["auth:claim:role:admin"]:
                break
            time.sleep(0.1)
        answers = {"arguments": {}, "requestState": first["requestState"],
                   "inputResponses": {key: ANSWER}}
        denied = post(http, 2, "tools/call", {"name": "a__ask", **answers})["result"]
        smuggled = post(http, 3, "tools/call", {"name": "b__ask", **answers})
    assert denied["isError"] is True and denied["structuredContent"]["error"] == "unmet_requirements"
    assert smuggled["error"]["message"] == "Invalid or expired requestState"
    # Server a's question was never answered: its call ended without one.
    assert not [e for e in asking_upstream.read_log(logs["a"]) if e.get("asked") == "answer"]
    assert not [e for e in asking_upstream.read_log(logs["b"]) if "asked" in e]
