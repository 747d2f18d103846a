"""At 2026-07-28 the gateway sends the `Mcp-Param-*` headers a server's tools declare, as the SDK's
client does: a real 2026-07-28-only SDK server (tests/fixtures/gateway_upstream.py over HTTP) lists a
tool whose `region` argument declares `x-mcp-header`, and checks every call's headers against its
body (the SDK's own check refuses a call without them). A tool whose annotation is unusable is left
out of the gateway's listing and never called (SEP-2243: a client excludes it; the conformance
suite's `http-invalid-tool-headers`); a value that is not a plain token goes in the SDK's base64
sentinel. And as a server, the
gateway checks a 2026-07-28 caller's headers against the call's body as the SDK's server does.

In-process (tests/fixtures/inprocess.py): the server's SDK app on a socket of the test's event loop
(`asgi_served`: the gateway's HTTP link is a real client, its headers on the wire), the gateway wired
from its command line in that loop, the SDK client and the raw 2026-07-28 caller on its app over the
streaming bridge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

from tests.fixtures.gateway_upstream import LoggingUpstream, read_log
from tests.fixtures.inprocess import asgi_served, cli_gateway

TOOLS = [
    {"name": "regional", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "shard": {"type": "integer", "x-mcp-header": "Shard"},
        "note": {"type": "string"}}}},
    {"name": "unusable", "inputSchema": {"type": "object", "properties": {  # a number: not allowed
        "size": {"type": "number", "x-mcp-header": "Size"}}}},
]


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


CALLERS: dict[str, list[tuple[str, str]]] = {
    "agreeing": [("Mcp-Param-Region", "us"), ("Mcp-Param-Shard", "3")],
    "another region": [("Mcp-Param-Region", "eu"), ("Mcp-Param-Shard", "3")],
    "no header": [("Mcp-Param-Shard", "3")],
    "given twice": [("Mcp-Param-Region", "us"), ("mcp-param-region", "us"), ("Mcp-Param-Shard", "3")],
}


async def post_2026(http: httpx.AsyncClient, params_headers: list[tuple[str, str]]
                    ) -> tuple[int, str | None]:
    """A raw 2026-07-28 `tools/call` of `regional` (region us, shard 3) with these headers: the
    HTTP status and the JSON-RPC error message, if any."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "regional", "arguments": {"region": "us", "shard": 3}, "_meta": meta}}
    headers = [("accept", "application/json, text/event-stream"), ("content-type", "application/json"),
               ("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"),
               ("mcp-name", "regional"), *params_headers]
    response = await http.post("/mcp", json=body, headers=headers)
    error = response.json().get("error")
    return response.status_code, error["message"] if error else None


def headers_of(log: Path, name: str) -> list[dict[str, str]]:
    return [{k: v for k, v in e["headers"].items() if k.startswith("mcp-")}
            for e in read_log(log) if e["method"] == "tools/call" and e["params"]["name"] == name]


async def test_the_headers_a_tool_declares_are_sent_and_the_sdk_server_accepts_the_call(
        tmp_path: Path) -> None:
    log, tools = tmp_path / "upstream.jsonl", tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    policy = tmp_path / "open.toml"
    policy.write_text("# every tool open\n", encoding="utf-8")
    env = {"GATEWAY_UPSTREAM_LOG": str(log), "GATEWAY_UPSTREAM_MODERN_ONLY": "1",
           "GATEWAY_UPSTREAM_TOOLS_FILE": str(tools)}
    app = LoggingUpstream(env).build().streamable_http_app(host="127.0.0.1")
    async with asgi_served(app) as base, \
            cli_gateway(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                         "--upstream-url", f"{base}/mcp"]) as gw:
        await gw.until_ready()
        async with gw.client("legacy") as client:
            plain = await call(client, "regional", {"region": "eu-west", "shard": 7, "note": "x"})
            sentinel = await call(client, "regional", {"region": "été ", "note": "y"})
            listed = [t.name for t in (await client.list_tools()).tools]
            unusable = await call(client, "unusable", {"size": 1.5})
        async with gw.http() as http:
            checked = {case: await post_2026(http, headers) for case, headers in CALLERS.items()}
    assert checked == {
        "agreeing": (200, None),
        "another region": (400, "Mcp-Param-Region header does not match the request body's 'region' "
                                "argument"),
        "no header": (400, "Mcp-Param-Region header is missing but the request body's 'region' "
                           "argument is present"),
        "given twice": (400, "Mcp-Param-Region header appears more than once"),
    }
    assert plain["content"] == [{"type": "text", "text": "regional done"}]
    assert plain["isError"] is False
    assert sentinel["isError"] is False
    assert "regional" in listed and "unusable" not in listed  # `unusable` left out
    assert unusable["isError"] is True  # refused by the gateway: never sent
    sent = headers_of(log, "regional")
    assert [{k: v for k, v in h.items() if k.startswith("mcp-param-")} for h in sent] == [
        {"mcp-param-region": "eu-west", "mcp-param-shard": "7"},
        {"mcp-param-region": "=?base64?w6l0w6kg?="},
        {"mcp-param-region": "us", "mcp-param-shard": "3"}]  # the agreeing caller's only
    assert all(h["mcp-method"] == "tools/call" and h["mcp-name"] == "regional" for h in sent)
    assert headers_of(log, "unusable") == []
