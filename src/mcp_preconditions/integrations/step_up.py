"""HTTP step-up for hosted apps (MCP authorization spec, SEP-2643's case 5): a `tools/call` that
fails only for want of scopes is answered `403` with `WWW-Authenticate: Bearer
error="insufficient_scope", scope="..."`, so an OAuth client can ask for every missing scope at
once. The one line to add: wrap the streamable-HTTP ASGI app with `InsufficientScopeChallenge`
(`serve --transport http` does; the gateway's HTTP listener answers the same, by the same rule:
`denials.step_up`). The guard inside the MCP handler still decides every other call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

from ..denials import StepUp, send_step_up, step_up
from ..envelope import echo_of
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
            answer = await self._step_up(scope, body)
            if answer is not None:
                await send_step_up(send, answer)
                return
        await self.app(scope, _replay(body, complete, receive), send)

    async def _step_up(self, scope: Scope, body: bytes) -> StepUp | None:
        """The 403 for this call (`denials.step_up`), its decision recorded and counted as the
        call's one decision (the app never sees the call); None: the app decides it. Whether to
        answer is first asked of the requirements decided before the last ones (quotas), which
        take a unit only when every other requirement holds: a call they allow is the app's to
        decide, once, and no unit is taken here."""
        call = _tool_call(body)
        if call is None:
            return None
        pre = self.preconditions
        credentials = pre.credentials(Request(scope))
        if credentials.anonymous:
            return None  # no token at all: that is a 401 for the auth layer, not a step-up
        name, arguments, echo = call
        guard = pre.guard
        snapshot, identity = guard.snapshot, await guard.authenticate(credentials)
        compiled = snapshot.tools.get(name)
        if compiled is None or identity.principal is None:
            return None
        ruled = snapshot.evaluate(compiled if compiled.late is None else compiled.late.rest,
                                  identity, arguments)
        _, outcomes = ruled if isinstance(ruled, tuple) else await ruled
        if all(o.ok for o in outcomes):  # (none at all: a tool of quotas alone)
            return None
        decision = await guard.check(name, credentials, arguments, record=False, echo=echo)
        answer = step_up(decision, identity)
        if answer is not None:
            guard.recorder.record(decision)
            if pre.telemetry is not None:
                pre.telemetry.observe(decision)
        return answer


def _tool_call(body: bytes) -> tuple[str, dict[str, Any], object] | None:
    """(tool name, arguments, echoed context ID) of a single JSON-RPC `tools/call`, else None."""
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
    return (name, arguments if isinstance(arguments, dict) else {},
            echo_of(params.get("_meta") if isinstance(params, dict) else None))


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
