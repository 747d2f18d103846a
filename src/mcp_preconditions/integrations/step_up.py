"""Optional HTTP step-up (MCP authorization spec): a `tools/call` that fails only for want of scopes
is answered `403` with `WWW-Authenticate: Bearer error="insufficient_scope", scope="..."`, so an
OAuth client can ask for every missing scope at once. Wrap a streamable-HTTP ASGI app with it.

The guard inside the MCP handler still decides every call; this wrapper only answers earlier.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

from ._calls import insufficient_scope_challenge, missing_scopes
from ._server import Preconditions

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["MAX_BODY", "InsufficientScopeChallenge"]

MAX_BODY = 1 << 20  # larger bodies pass through unchecked (the in-handler guard still decides)


class InsufficientScopeChallenge:
    """ASGI middleware: 403 + `insufficient_scope` challenge for a call by an authenticated caller
    that more scopes alone would allow (every unmet requirement is a disclosed `auth:scope:`)."""

    def __init__(self, app: ASGIApp, preconditions: Preconditions, *, path: str = "/mcp") -> None:
        self.app = app
        self.preconditions = preconditions
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if complete:
            challenge = await self._challenge(scope, body)
            if challenge is not None:
                await _forbidden(send, *challenge)
                return
        await self.app(scope, _replay(body, complete, receive), send)

    async def _challenge(self, scope: Scope, body: bytes) -> tuple[str, str] | None:
        call = _tool_call(body)
        if call is None:
            return None
        credentials = self.preconditions.credentials(Request(scope))
        if credentials.anonymous:
            return None  # no token at all: that is a 401 for the auth layer, not a step-up
        decision = await self.preconditions.guard.check(call[0], credentials, call[1], record=False)
        if decision.allowed:
            return None
        header = insufficient_scope_challenge(decision)
        return (header, " ".join(missing_scopes(decision))) if header else None


def _tool_call(body: bytes) -> tuple[str, dict[str, Any]] | None:
    """(tool name, arguments) of a single JSON-RPC `tools/call` request, else None."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    if not isinstance(name, str):
        return None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    return name, arguments if isinstance(arguments, dict) else {}


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body, and whether all of it was read (False past MAX_BODY or a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_BODY:
            return b"".join(chunks), False


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _forbidden(send: Send, challenge: str, scopes: str) -> None:
    body = json.dumps({"error": "insufficient_scope", "scope": scopes,
                       "error_description": "the call needs more scopes"}).encode()
    await send({"type": "http.response.start", "status": 403, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode("latin-1"))]})
    await send({"type": "http.response.body", "body": body})
