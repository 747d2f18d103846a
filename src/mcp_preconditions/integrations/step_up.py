"""The transport's own answers for hosted apps over HTTP (MCP authorization spec, SEP-2643, SPEC
§15), each one line around the streamable-HTTP ASGI app, and each decided by the rule the gateway's
HTTP listener follows (denials.py):

- `InsufficientScopeChallenge`: a `tools/call` that fails only for want of scopes is answered `403`
  with `WWW-Authenticate: Bearer error="insufficient_scope", scope="..."` (SEP-2643's case 5), so an
  OAuth client can ask for every missing scope at once (`denials.step_up`).
- `SignInChallenge`: a `tools/call` by a caller without an accepted token whose only unmet
  requirement is `auth:oauth2` is answered `401` with `WWW-Authenticate: Bearer
  resource_metadata="..."`, and the RFC 9728 metadata is served (`denials.needs_sign_in`).

`serve --transport http` wraps its app in both. The guard inside the MCP handler still decides
every other call; a call answered here is recorded as its one decision.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

from ..denials import StepUp, needs_sign_in, send_step_up, step_up
from ..envelope import echo_of
from ..outcomes import Decision
from ..principal import Credentials, Identity
from ..protected_resource import METADATA_PATH, metadata_url, resource_metadata, sign_in_challenge
from ._server import Preconditions

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["MAX_BODY", "InsufficientScopeChallenge", "SignInChallenge"]

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
        call's one decision (the app never sees the call); None: the app decides it. A call
        without a token is no step-up (that is the sign-in's 401)."""
        credentials = self.preconditions.credentials(Request(scope))
        if credentials.anonymous:
            return None
        found = await _decided(self.preconditions, credentials, body, verified=True)
        if found is None:
            return None
        decision, identity = found
        answer = step_up(decision, identity)
        if answer is not None:
            _record(self.preconditions, decision)
        return answer


class SignInChallenge:
    """ASGI middleware: 401 with `WWW-Authenticate: Bearer resource_metadata="..."` for a call by
    a caller without an accepted token whose only unmet requirement is `auth:oauth2`, and the RFC
    9728 metadata of `resource_url` (the endpoint's public URL, ending in `path`) at
    `/.well-known/oauth-protected-resource[path]`. While the policy verifies no tokens (no `[auth]`
    issuer, keys or introspection) there is nothing to sign in with: everything goes to the app."""

    def __init__(self, app: ASGIApp, preconditions: Preconditions, resource_url: str, *,
                 path: str = "/mcp") -> None:
        self.app = app
        self.preconditions = preconditions
        self.path = path
        self.resource_url = resource_url
        self.metadata_url = metadata_url(resource_url, path)
        self._metadata_of: tuple[object, dict[str, Any] | None] | None = None

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The metadata under the policy in force (read per request: a reload may add `[auth]`)."""
        policy = self.preconditions.guard.snapshot.source.policy
        if self._metadata_of is None or self._metadata_of[0] is not policy:
            self._metadata_of = (policy, resource_metadata(policy, self.resource_url))
        return self._metadata_of[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metadata = self.metadata if scope["type"] == "http" else None
        if metadata is None:
            await self.app(scope, receive, send)
            return
        method, path = scope.get("method"), scope.get("path")
        if path in (METADATA_PATH, METADATA_PATH + self.path) and method in ("GET", "HEAD"):
            data = json.dumps(metadata).encode()
            await _respond(send, 200, b"" if method == "HEAD" else data, [
                (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                (b"cache-control", b"public, max-age=3600")])
            return
        if method != "POST" or path != self.path:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        refused = await self._refused(scope, body) if complete else None
        if refused is not None:
            challenge = sign_in_challenge(self.metadata_url, refused)
            await _respond(send, 401, challenge.body, [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(challenge.body)).encode()),
                (b"www-authenticate", challenge.header.encode("latin-1"))])
            return
        await self.app(scope, _replay(body, complete, receive), send)

    async def _refused(self, scope: Scope, body: bytes) -> bool | None:
        """Whether this call is the 401 (True: a token was given and refused; False: none was),
        its decision recorded and counted as the call's one decision; None: the app decides it."""
        pre = self.preconditions
        credentials = pre.credentials(Request(scope))
        if credentials.principal is not None:  # a caller the host's own auth verified
            return None
        found = await _decided(pre, credentials, body, verified=False)
        if found is None or not needs_sign_in(*found):
            return None
        _record(pre, found[0])
        return not credentials.anonymous


async def _decided(pre: Preconditions, credentials: Credentials, body: bytes, *, verified: bool
                   ) -> tuple[Decision, Identity] | None:
    """The decision on the `tools/call` in `body`, not recorded, and the caller's identity; None
    when the body is no such call, the tool is unknown, the caller's token was accepted or not
    as `verified` wants, or the requirements decided before the last ones (quotas) all hold:
    such a call is the app's to decide, once (a quota takes its unit only when every other
    requirement holds, and none is taken here)."""
    call = _tool_call(body)
    if call is None:
        return None
    name, arguments, echo = call
    guard = pre.guard
    snapshot, identity = guard.snapshot, await guard.authenticate(credentials)
    compiled = snapshot.tools.get(name)
    if compiled is None or (identity.principal is not None) is not verified:
        return None
    ruled = snapshot.evaluate(compiled if compiled.late is None else compiled.late.rest,
                              identity, arguments)
    _, outcomes = ruled if isinstance(ruled, tuple) else await ruled
    if all(o.ok for o in outcomes):  # (none at all: a tool of quotas alone)
        return None
    return await guard.check(name, credentials, arguments, record=False, echo=echo), identity


def _record(pre: Preconditions, decision: Decision) -> None:
    """A call answered here: its decision is the call's one, recorded and counted."""
    pre.guard.recorder.record(decision)
    if pre.telemetry is not None:
        pre.telemetry.observe(decision)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
