"""Malformed JSON-RPC never becomes a tool call (SPEC §10): a batch, a method in another case, a
request with no id or `"id": null`, params that are not an object, a name or arguments of the wrong
type, and a 2026-07-28 envelope on a 2025-11-25 stdio connection are each answered with the error a
client can act on (or, with no id to answer, nothing), and the upstream (the oracle: it logs every
message it receives) sees no tools/call. Over stdio and over HTTP.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the logging upstream in memory; the stdio listener reads the test's lines and writes its answers
line by line (tests/fixtures/stdio_pipe.py), the HTTP one is its app over the streaming bridge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gateway_upstream import tool_calls
from tests.fixtures.inprocess import logging_gateway
from tests.fixtures.stdio_pipe import stdio_pipe

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALL = {"name": "echo", "arguments": {"text": "hi"}}
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}


def call(rid: Any, params: Any = CALL, method: str = "tools/call") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


NO_ID = {"jsonrpc": "2.0", "method": "tools/call", "params": CALL}
# (what is sent, over stdio: the error code answered, None for no answer)
STDIO_CASES: list[tuple[str, Any, int | None]] = [
    ("batch", [call(1)], None),
    ("method case", call(2, method="Tools/Call"), -32601),
    ("no id", NO_ID, None),
    ("id null", call(None), None),
    ("params a list", call(4, ["echo", {}]), -32600),
    ("params a string", call(5, "echo"), -32600),
    ("name a number", call(6, {"name": 7, "arguments": {}}), -32602),
    ("arguments a string", call(7, {"name": "echo", "arguments": "text=hi"}), -32602),
    ("2026 envelope on a 2025 connection", call(8, {**CALL, "_meta": MODERN_META}), -32600),
]


async def test_malformed_requests_over_stdio_are_refused_and_never_reach_the_upstream(
        tmp_path: Path) -> None:
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text("# every tool open\n", encoding="utf-8")
    answers: dict[str, list[dict[str, Any]]] = {}
    async with logging_gateway(policy, log) as gw, stdio_pipe(gw.gateway) as pipe:
        pipe.send(call("init", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "raw", "version": "1"}}, "initialize"))
        assert "result" in (await pipe.until("init"))[-1]
        pipe.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for label, message, _code in STDIO_CASES:
            pipe.send(message)  # then a ping: what came back before its answer is this one's
            pipe.send({"jsonrpc": "2.0", "id": f"ping {label}", "method": "ping"})
            answers[label] = (await pipe.until(f"ping {label}"))[:-1]
        pipe.send(call("last"))  # the channel still works, and the oracle logs what reaches it
        last = (await pipe.until("last"))[-1]
    for label, message, code in STDIO_CASES:
        got = answers[label]
        if code is None:
            assert got == [], label
        else:
            assert [(a["id"], a["error"]["code"]) for a in got] == [(message["id"], code)], (label, got)
    assert last["result"]["content"][0]["text"] == "echo: hi"
    assert tool_calls(log) == ["echo"]  # the last call only


# (what is sent to the 2026-07-28 endpoint: the HTTP status, the error code or None for no body)
HTTP_CASES: list[tuple[str, Any, int, int | None]] = [
    ("batch", [call(1, {**CALL, "_meta": MODERN_META})], 400, -32600),
    ("method case", call(2, {**CALL, "_meta": MODERN_META}, "Tools/Call"), 404, -32601),
    ("no id", {**NO_ID, "params": {**CALL, "_meta": MODERN_META}}, 202, None),
    ("id null", call(None, {**CALL, "_meta": MODERN_META}), 400, -32600),
    ("params a list", call(4, ["echo", {}]), 400, -32600),
    # Its Mcp-Name header cannot repeat a number: refused as a mismatch before the body's schema.
    ("name a number", call(6, {"name": 7, "arguments": {}, "_meta": MODERN_META}), 400, -32020),
    ("arguments a string", call(7, {"name": "echo", "arguments": "text=hi", "_meta": MODERN_META}),
     400, -32602),
]


async def test_malformed_requests_over_http_are_refused_and_never_reach_the_upstream(
        tmp_path: Path) -> None:
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text("# every tool open\n", encoding="utf-8")
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
    got = {}
    async with logging_gateway(policy, log, "--listen", "http://127.0.0.1:0") as gw, \
            gw.http() as http:
        http.headers.update(headers)
        for label, message, _status, _code in HTTP_CASES:
            method = message["method"] if isinstance(message, dict) else "tools/call"
            response = await http.post("/mcp", content=json.dumps(message),
                                       headers={"mcp-method": method})
            body = response.json() if response.content else None
            got[label] = (response.status_code, body["error"]["code"] if body else None)
        last = await http.post("/mcp", json=call("last", {**CALL, "_meta": MODERN_META}))
    assert got == {label: (status, code) for label, _m, status, code in HTTP_CASES}
    assert "echo: hi" in last.text
    assert tool_calls(log) == ["echo"]  # the last call only
