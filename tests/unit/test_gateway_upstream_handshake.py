"""How the gateway opens its session with an HTTP server of either year (gateway/upstream/handshake.py,
session.py `_connect`), as the conformance suite's client scenarios judge it (SPEC §17, issue 43):
the 2025-11-25 `initialize` carries what every 2026-07-28 request carries (`MCP-Protocol-Version`
and `Mcp-Method` headers, `_meta` with version, capabilities and identity); a server that refuses it
with -32022, or answers it with 2026-07-28, is asked `server/discover` at 2026-07-28 and served as a
2026-07-28 peer; a -32022 to `server/discover` that names 2026-07-28 is asked once more, one that
names nothing the gateway speaks is said so. A 2025-11-25 server is still initialized as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_preconditions.gateway.upstream.session import HttpTarget, Upstream

WAIT = 10.0  # the safety net of every wait here (a connection, a listing, an answer): events decide
MODERN, LEGACY = "2026-07-28", "2025-11-25"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"


@dataclass
class Seen:
    method: str
    headers: dict[str, str]
    params: dict[str, Any]


Reply = tuple[int, dict[str, Any] | None]  # HTTP status, JSON-RPC message (None: no body)


class Double:
    """A streamable-HTTP server that answers each POST with `answer(seen, message)` and records
    what it was sent (method, lower-cased headers, params)."""

    def __init__(self, answer: Callable[[Seen, dict[str, Any]], Reply]) -> None:
        self.answer = answer
        self.seen: list[Seen] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, v in
                           (line.split(":", 1) for line in head[1:] if ":" in line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if head[0].startswith("POST"):
                    message = json.loads(body)
                    seen = Seen(message.get("method"), headers, message.get("params") or {})
                    self.seen.append(seen)
                    writer.write(_reply(*self.answer(seen, message)))
                else:  # GET (no stream offered), DELETE
                    writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _reply(status: int, message: dict[str, Any] | None) -> bytes:
    body = json.dumps(message).encode() if message is not None else b""
    kind = "content-type: application/json\r\n" if message is not None else ""
    return (f"HTTP/1.1 {status} X\r\n{kind}content-length: {len(body)}\r\n\r\n").encode() + body


def result(message: dict[str, Any], value: dict[str, Any]) -> Reply:
    return 200, {"jsonrpc": "2.0", "id": message["id"], "result": value}


def error(message: dict[str, Any], code: int, data: Any, status: int = 400) -> Reply:
    return status, {"jsonrpc": "2.0", "id": message.get("id"),
                    "error": {"code": code, "message": "no", "data": data}}


DISCOVERED = {"resultType": "complete", "supportedVersions": [MODERN], "capabilities": {"tools": {}},
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "1"}}}


def generic(seen: Seen, message: dict[str, Any]) -> Reply:
    if seen.method == "server/discover":
        return result(message, DISCOVERED)
    if "id" not in message:
        return 202, None
    if seen.method == "tools/list":
        return result(message, {"resultType": "complete", "tools": []})
    return result(message, {"resultType": "complete"})


@asynccontextmanager
async def connected(double: Double) -> AsyncIterator[Upstream]:
    """An upstream session to `double`, once connected (WAIT at most)."""
    listening = await asyncio.start_server(double.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"
    upstream = Upstream(HttpTarget(url), connect_timeout=lambda: WAIT)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream.run)
            assert await upstream.wait_connected(WAIT) is not None, upstream.last_error
            yield upstream
            tg.cancel_scope.cancel()
    finally:
        listening.close()


async def failing(double: Double) -> str:
    """What an upstream session to `double` fails with (its first failure)."""
    listening = await asyncio.start_server(double.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"
    upstream = Upstream(HttpTarget(url), connect_timeout=lambda: WAIT)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream.run)
            with anyio.fail_after(WAIT):
                while upstream.last_error is None:  # set when the first attempt has failed
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        listening.close()
    assert upstream.current is None and upstream.last_error is not None
    return upstream.last_error


async def test_a_server_refusing_the_handshake_with_32022_is_discovered_and_every_request_says_its_version(
) -> None:
    """request-metadata: the first request is refused (-32022, 2026-07-28 supported); every
    request, `initialize` included, carries the version header and `_meta` that agree."""
    refused: list[bool] = []

    def answer(seen: Seen, message: dict[str, Any]) -> Reply:
        if not refused:
            refused.append(True)
            return error(message, -32022, {"supported": [MODERN], "requested": LEGACY})
        return generic(seen, message)

    double = Double(answer)
    async with connected(double) as upstream:
        assert upstream.modern
        await upstream.list_all("tools/list", "tools", WAIT)
    methods = [s.method for s in double.seen]
    assert methods[:2] == ["initialize", "server/discover"] and "notifications/initialized" \
        not in methods
    opening = double.seen[0]
    assert opening.headers["mcp-protocol-version"] == LEGACY
    assert opening.headers["mcp-method"] == "initialize"
    assert opening.params["_meta"][META_VERSION] == LEGACY
    assert opening.params["_meta"][META_CAPABILITIES] == opening.params["capabilities"]
    assert opening.params["_meta"][META_INFO]["name"] == "mcp-preconditions-gateway"
    for seen in double.seen[1:]:
        assert seen.headers["mcp-protocol-version"] == MODERN == seen.params["_meta"][META_VERSION]
        assert seen.headers["mcp-method"] == seen.method
        assert isinstance(seen.params["_meta"][META_CAPABILITIES], dict)


async def test_a_server_answering_the_handshake_with_2026_07_28_is_served_as_a_2026_07_28_peer(
) -> None:
    """http-custom-headers, http-invalid-tool-headers, http-standard-headers: the server answers
    `initialize` with 2026-07-28 (the gateway used to refuse that version and never connect)."""
    def answer(seen: Seen, message: dict[str, Any]) -> Reply:
        if seen.method == "initialize":
            return result(message, {"resultType": "complete", "protocolVersion": MODERN,
                                    "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "modern", "version": "1"}})
        return generic(seen, message)

    double = Double(answer)
    async with connected(double) as upstream:
        assert upstream.modern
        assert upstream.current is not None
        assert upstream.current.server_info == {"name": "modern", "version": "1"}
        await upstream.request("tools/call", {"name": "t", "arguments": {}}, timeout=WAIT)
    methods = [s.method for s in double.seen]
    assert methods[:2] == ["initialize", "server/discover"]
    assert "notifications/initialized" not in methods
    call = next(s for s in double.seen if s.method == "tools/call")
    assert (call.headers["mcp-method"], call.headers["mcp-name"]) == ("tools/call", "t")


async def test_a_32022_to_discover_that_names_2026_07_28_is_asked_once_more() -> None:
    discovers: list[bool] = []

    def answer(seen: Seen, message: dict[str, Any]) -> Reply:
        if seen.method == "initialize":
            return error(message, -32601, None)
        if seen.method == "server/discover" and not discovers:
            discovers.append(True)
            return error(message, -32022, {"supported": [MODERN], "requested": MODERN})
        return generic(seen, message)

    double = Double(answer)
    async with connected(double) as upstream:
        assert upstream.modern
    methods = [s.method for s in double.seen]
    assert methods[:3] == ["initialize", "server/discover", "server/discover"]


async def test_a_32022_naming_no_version_the_gateway_speaks_is_said_so() -> None:
    def answer(seen: Seen, message: dict[str, Any]) -> Reply:
        return error(message, -32022, {"supported": ["2027-01-01"], "requested": "x"})

    assert await failing(Double(answer)) == (
        "the server supports no protocol version the gateway speaks: 2027-01-01")


async def test_a_2025_11_25_server_is_initialized_as_before() -> None:
    def answer(seen: Seen, message: dict[str, Any]) -> Reply:
        if seen.method == "initialize":
            return result(message, {"protocolVersion": LEGACY, "capabilities": {},
                                    "serverInfo": {"name": "old", "version": "1"}})
        return generic(seen, message)

    double = Double(answer)
    async with connected(double) as upstream:
        assert not upstream.modern
        await upstream.request("tools/list", None, timeout=WAIT)
    methods = [s.method for s in double.seen]
    assert methods == ["initialize", "notifications/initialized", "tools/list"]
    assert double.seen[2].headers["mcp-protocol-version"] == LEGACY
    assert "mcp-method" not in double.seen[2].headers  # 2025-11-25 requests are as they were
