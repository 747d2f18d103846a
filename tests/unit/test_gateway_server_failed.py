""""The server failed" and "the server answered an error" are told apart by type, not by code (issue
42 item 4): a server's JSON-RPC error answer is typed where it is read (`errors.answered`, at
upstream/peer.py; downstream/clients.py for a client the gateway asks), and a tool call that ends in
`PeerFailed` is a tool error while one that ends in `PeerAnswered` gets that answer as is.

Each case is run through the gateway in-process (tests/fixtures/inprocess.py), its server a raw
JSON-RPC stand-in in memory (tests/fixtures/memory_upstream.py) that answers each tool as its name
says: -32603, -32602, a code of its own, the connection closed mid-call, no answer (past the call
timeout), an invalid result. What the caller gets is the same as before the types (the first test);
the type is made at the boundary (the others).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import TypeAdapter

from mcp_preconditions.gateway.clients import Client as Downstream
from mcp_preconditions.gateway.errors import (
    PeerAnswered,
    PeerFailed,
    UpstreamClosed,
    UpstreamTimeout,
    answered,
)
from mcp_preconditions.gateway.jsonrpc import Message
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway
from tests.fixtures.memory_upstream import MemoryServers

RAW: Any = TypeAdapter(dict[str, Any])
TOOLS = ("internal", "invalid_params", "custom", "close", "hang", "invalid")
SHORT_TIMEOUT = 1.0  # the call timeout where a case waits it out ("hang"); else WAIT_SECONDS
CUSTOM = {"code": 4711, "message": "quota spent", "data": {"left": 0}}
ERRORS: dict[str, dict[str, Any]] = {
    "internal": {"code": -32603, "message": "disk on fire"},
    "invalid_params": {"code": -32602, "message": "bad argument", "data": {"field": "x"}},
    "custom": CUSTOM,
}


class Raw:
    """A server that speaks JSON-RPC by hand: `initialize`, `tools/list` (TOOLS), and `tools/call`
    answered as the tool's name says."""

    def create_initialization_options(self, notification_options: Any) -> Any:
        return None

    async def run(self, read: Any, write: Any, options: Any) -> None:
        async for item in read:
            if not isinstance(item, SessionMessage):
                continue
            message = item.message.model_dump(by_alias=True, exclude_unset=True)
            if "id" not in message or "method" not in message:
                continue
            rid, method = message["id"], message["method"]
            name = (message.get("params") or {}).get("name")
            if method == "tools/call" and name == "close":
                return  # the server ends mid-call (as a process that exits)
            if method == "tools/call" and name == "hang":
                continue  # never answered
            await write.send(SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(
                _answer(rid, method, name), by_name=False)))


def _answer(rid: Any, method: str, name: Any) -> Message:
    if method == "initialize":
        return {"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"}}}
    if method == "tools/list":
        return {"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}}
    if method == "tools/call" and name in ERRORS:
        return {"jsonrpc": "2.0", "id": rid, "error": ERRORS[name]}
    if method == "tools/call" and name == "invalid":  # an input round whose requests are no map
        return {"jsonrpc": "2.0", "id": rid,
                "result": {"resultType": "input_required", "inputRequests": 5}}
    return {"jsonrpc": "2.0", "id": rid, "result": {}}


@asynccontextmanager
async def raw_gateway(tmp_path: Path, timeout: float = WAIT_SECONDS) -> AsyncIterator[InProcess]:
    policy, claims = tmp_path / "policy.toml", tmp_path / "claims.json"
    policy.write_text(f"[gateway]\ncall_timeout_seconds = {timeout}\n", encoding="utf-8")
    claims.write_text('{"sub": "olga"}', encoding="utf-8")
    servers = MemoryServers()
    with servers.installed():
        command = servers.add("raw", lambda _env, _die: Raw())
        async with cli_gateway(["--policy", str(policy), "--claims", str(claims), "--",
                                *command]) as gateway:
            await gateway.until_ready()
            yield gateway


async def raw_call(client: Client, name: str) -> dict[str, Any]:
    request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams(name=name,
                                                                                arguments={}))
    async with asyncio.timeout(WAIT_SECONDS):
        result: dict[str, Any] = await client.session.send_request(request, RAW)
    return result


def tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


@dataclass(frozen=True)
class Case:
    tool: str
    caller_gets: dict[str, Any]  # a tool result, or {"error": the JSON-RPC error}
    upstream_raises: type[Exception] | None  # what upstream.request raises (None: a result)


CASES = [
    Case("internal", tool_error("server upstream failed: disk on fire"), PeerFailed),
    Case("invalid_params", {"error": ERRORS["invalid_params"]}, PeerAnswered),
    Case("custom", {"error": CUSTOM}, PeerAnswered),
    Case("close", tool_error("server upstream closed the connection"), UpstreamClosed),
    Case("hang", tool_error("server upstream timed out"), UpstreamTimeout),
    Case("invalid", tool_error("server upstream sent an invalid result"), None),
]


def _timeout(case: Case) -> float:
    return SHORT_TIMEOUT if case.tool == "hang" else WAIT_SECONDS


@pytest.mark.parametrize("case", CASES, ids=[c.tool for c in CASES])
async def test_what_the_caller_gets_when_the_server_fails_or_answers_an_error(
        tmp_path: Path, case: Case) -> None:
    async with raw_gateway(tmp_path, _timeout(case)) as gateway, gateway.client() as client:
        try:
            got = await raw_call(client, case.tool)
        except MCPError as exc:
            got = {"error": exc.error.model_dump(mode="json", exclude_none=True)}
    assert got == case.caller_gets


@pytest.mark.parametrize("case", [c for c in CASES if c.upstream_raises is not None],
                         ids=[c.tool for c in CASES if c.upstream_raises is not None])
async def test_the_upstream_layer_raises_the_type_the_gateway_decides_by(
        tmp_path: Path, case: Case) -> None:
    assert case.upstream_raises is not None
    async with raw_gateway(tmp_path) as gateway:
        upstream = gateway.gateway.fleet.members["upstream"].upstream
        with pytest.raises(case.upstream_raises) as raised:
            await upstream.request("tools/call", {"name": case.tool}, timeout=_timeout(case))
    if isinstance(raised.value, PeerFailed | PeerAnswered):  # the server's own answer, kept
        assert raised.value.wire() == ERRORS[case.tool]


@pytest.mark.parametrize(("error", "kind"), [
    ({"code": -32603, "message": "m"}, PeerFailed),
    ({"code": -32000, "message": "m"}, PeerFailed),  # the SDK's "connection closed"
    ({"code": -32001, "message": "m"}, PeerFailed),  # the SDK's "request timed out"
    ({"code": -32602, "message": "m", "data": 1}, PeerAnswered),
    ({"code": -32601, "message": "m"}, PeerAnswered),
    ({"code": 4711, "message": "m"}, PeerAnswered),
    ({"code": "-32603", "message": "m"}, PeerFailed),  # malformed: a failure
    ("not an object", PeerFailed),
])
def test_an_error_answer_is_typed_by_its_code_once(error: Any, kind: type[Exception]) -> None:
    typed = answered(error)
    assert type(typed) is kind
    if isinstance(error, Mapping) and isinstance(error["code"], int):
        assert typed.wire() == error  # the answer itself is kept as it came


class _Sink:
    open = True

    def __init__(self) -> None:
        self.pushed: list[Message] = []
        self.arrived = asyncio.Event()

    def push(self, message: Message) -> None:
        self.pushed.append(message)
        self.arrived.set()


@pytest.mark.parametrize(("answer", "kind"), [
    ({"code": -32603, "message": "m"}, PeerFailed),
    ({"code": -32602, "message": "m"}, PeerAnswered),
    (None, PeerFailed),  # closed before it answered
])
async def test_a_client_the_gateway_asks_is_typed_at_its_boundary_too(
        answer: dict[str, Any] | None, kind: type[Exception]) -> None:
    client, sink = Downstream(None, http=False), _Sink()
    asked = asyncio.create_task(client.ask("elicitation/create", {}, WAIT_SECONDS, sink))
    await asyncio.wait_for(sink.arrived.wait(), WAIT_SECONDS)  # the question went to the client
    if answer is None:
        client.close()
    else:
        client.answered({"jsonrpc": "2.0", "id": sink.pushed[0]["id"], "error": answer})
    with pytest.raises(kind):
        await asked


async def test_a_client_that_does_not_answer_in_time_is_a_failure() -> None:
    client = Downstream(None, http=False)
    with pytest.raises(PeerFailed, match="timed out"):
        await client.ask("elicitation/create", {}, 0.0, _Sink())
