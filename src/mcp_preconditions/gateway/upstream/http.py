"""A server the gateway reaches over streamable HTTP: each message POSTed on a pool of keep-alive
connections, answers read as JSON or as an SSE stream, the session's GET stream for what the server
sends unasked (2025-11-25), the routing headers of 2026-07-28, and DELETE when the gateway stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from .. import jsonrpc
from ..downstream.wire import encode_header_value
from ..jsonrpc import Message
from .client import Pool, Response

log = logging.getLogger("mcp_preconditions.gateway")

ACCEPT = "application/json, text/event-stream"
GET_RETRY_SECONDS = 1.0
GET_ATTEMPTS = 3  # consecutive failed GET streams before the gateway stops asking for one
# 2026-07-28 requests name their target in a header too (the params key of each such method).
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class HttpLink:
    """One session (2025-11-25) or one series of self-contained requests (2026-07-28) with a server."""

    def __init__(self, url: str, headers: Mapping[str, str], received: Callable[[Any], None],
                 label: str) -> None:
        self._pool = Pool(url)
        self._headers = {"accept": ACCEPT, "content-type": "application/json", **headers}
        self._received = received
        self._label = label
        self.session_id: str | None = None
        self.protocol_version: str | None = None  # sent as a header once negotiated
        self.modern = False  # 2026-07-28: no session, every request names itself in headers
        self.lost = asyncio.Event()
        self._streams: dict[jsonrpc.RequestId, Response] = {}
        self._listening: asyncio.Task[None] | None = None

    def _with_session(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers

    async def send(self, message: Message, *, modern: bool = False) -> None:
        headers = self._with_session()
        method = message.get("method")
        if modern and isinstance(method, str):
            headers["mcp-protocol-version"] = "2026-07-28"
            headers["mcp-method"] = method
            named = (message.get("params") or {}).get(_NAMED.get(method, ""))
            if isinstance(named, str):
                headers["mcp-name"] = encode_header_value(named)
        meta = (message.get("params") or {}).get("_meta")
        if isinstance(meta, dict) and "traceparent" in meta:  # the trace context in a header too,
            from ...telemetry.propagation import carrier  # as HTTP servers and proxies read it

            headers.update(carrier({"_meta": meta}))
        response = await self._pool.request("POST", headers, jsonrpc.dumps(message))
        if method == "initialize" and "mcp-session-id" in response.headers:
            self.session_id = response.headers["mcp-session-id"]
        rid = message.get("id") if "method" in message else None
        if response.status == 404 and self.session_id is not None and not modern:
            response.close()
            self.lost.set()  # the server ended the session (restarted, expired)
            raise ConnectionError("the server ended the session")
        kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind == "text/event-stream":
            if rid is not None:
                self._streams[rid] = response
            try:
                async for event in events(response.stream()):
                    self._deliver(event)
            finally:
                self._streams.pop(rid, None)  # type: ignore[arg-type]
            return
        body = await response.read()
        if kind == "application/json" and body:
            self._deliver(body)
        elif rid is not None and response.status >= 400:
            self._received(jsonrpc.error(rid, jsonrpc.RpcError(
                jsonrpc.INTERNAL_ERROR, f"the server answered HTTP {response.status}")))

    def _deliver(self, data: bytes) -> None:
        try:
            message = jsonrpc.loads(data)
        except ValueError as exc:
            log.warning("upstream %s: unreadable message: %s", self._label, str(exc)[:200])
            return
        for one in message if isinstance(message, list) else [message]:
            self._received(one)

    def abandon(self, request_id: jsonrpc.RequestId) -> bool:
        """A 2026-07-28 request is cancelled by closing its stream (its POST's task ends, which
        closes the connection); a 2025-11-25 server is told with a notification instead."""
        return self.modern

    def listen(self) -> None:
        """Open the session's GET stream (what the server sends outside any request)."""
        if self._listening is None:
            self._listening = asyncio.get_running_loop().create_task(self._get_stream())

    async def _get_stream(self) -> None:
        failures = 0
        while failures < GET_ATTEMPTS and not self.lost.is_set():
            headers = self._with_session()
            headers["accept"] = "text/event-stream"
            try:
                response = await self._pool.request("GET", headers)
                if response.status == 405:  # the server offers no GET stream
                    response.close()
                    return
                if response.status == 404:
                    response.close()
                    self.lost.set()
                    return
                if response.status != 200:
                    response.close()
                    failures += 1
                else:
                    failures = 0
                    async for event in events(response.stream()):
                        self._deliver(event)
            except (OSError, ConnectionError) as exc:
                failures += 1
                log.debug("upstream %s: GET stream: %s", self._label, exc)
            await asyncio.sleep(GET_RETRY_SECONDS)

    async def close(self) -> None:
        """End the session (DELETE) and every connection."""
        if self._listening is not None:
            self._listening.cancel()
        if self.session_id is not None and not self.lost.is_set():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    response = await self._pool.request("DELETE", self._with_session())
                    await response.read()
        for response in list(self._streams.values()):
            response.close()
        self._pool.close()


async def events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` of each SSE event of type `message` (or untyped), as it completes."""
    pending = b""
    data: list[bytes] = []
    kind = b""
    async for chunk in chunks:
        pending += chunk
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            line, pending = pending[:end].rstrip(b"\r"), pending[end + 1:]
            if not line:
                if data and kind in (b"", b"message"):
                    yield b"\n".join(data)
                data, kind = [], b""
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
            elif line.startswith(b"event:"):
                kind = line[6:].strip()
