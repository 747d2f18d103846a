"""The decision point over HTTP, a bare ASGI app (AuthZEN 1.0's HTTPS JSON binding): `POST
/access/v1/evaluation`, `POST /access/v1/evaluations`, `GET /.well-known/authzen-configuration`.

Served alone by `mcp-preconditions pdp`, and mountable in another app at its `PATHS` (the gateway's
listener). A request body is bounded and parsed strictly; a malformed one is 400 with one line of
text. When the policy's `[auth]` verifies tokens, an evaluation needs the calling enforcement point's
bearer token (401 otherwise); the metadata document is public. `X-Request-ID` is echoed. On a
loopback listener the Host and Origin are checked first (DNS rebinding, `rebinding.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from ..errors import Malformed, TooLarge
from ..pdp.wire import (
    EVALUATION_PATH,
    EVALUATIONS_PATH,
    METADATA_PATH,
    Metadata,
    evaluation_of,
    evaluations_of,
)
from ..rebinding import Security
from .point import DecisionPoint, batch_json

MAX_BODY = 1024 * 1024
PATHS = (EVALUATION_PATH, EVALUATIONS_PATH, METADATA_PATH)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_JSON = (b"content-type", b"application/json")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")


class AuthzenApp:
    """The ASGI app of a decision point whose identifier (metadata's `policy_decision_point`) is
    `identifier`, e.g. `https://pdp.example.com`; `security` checks Host and Origin (None: none)."""

    def __init__(self, point: DecisionPoint, identifier: str, security: Security | None = None) -> None:
        self.point = point
        self.security = security
        self._identifier = identifier.rstrip("/")
        self._metadata: tuple[str, bytes] | None = None

    def metadata(self) -> bytes:
        """The metadata document: the policy's `[pdp_server] url` when set, else `identifier`."""
        base = self.point.guard.snapshot.source.policy.pdp_server.url or self._identifier
        if self._metadata is None or self._metadata[0] != base:
            self._metadata = (base, orjson.dumps(Metadata.at(base).to_json()))
        return self._metadata[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)
        echo = [(b"x-request-id", headers[b"x-request-id"])] if b"x-request-id" in headers else []
        status, body, extra = await self._answer(scope, receive, headers)
        await send({"type": "http.response.start", "status": status,
                    "headers": [*extra, (b"content-length", str(len(body)).encode()), *echo]})
        await send({"type": "http.response.body",
                    "body": b"" if scope["method"] == "HEAD" else body})

    async def _answer(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]
                      ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """(status, body, headers) of one request."""
        path, method = scope["path"], scope["method"]
        if self.security is not None:
            refused = self.security.refuse(_text(headers.get(b"host")), _text(headers.get(b"origin")))
            if refused is not None:
                return refused[0], refused[1], [_TEXT]
        if path not in PATHS:
            return 404, b"Not Found", [_TEXT]
        allowed = b"GET, HEAD" if path == METADATA_PATH else b"POST"
        if method.encode() not in allowed.split(b", "):
            return 405, b"Method Not Allowed", [_TEXT, (b"allow", allowed)]
        if path == METADATA_PATH:
            return 200, self.metadata(), [_JSON]
        if not await self.point.caller_accepted(_text(headers.get(b"authorization"))):
            return 401, b"this decision point needs a valid bearer token", [
                _TEXT, (b"www-authenticate", b'Bearer error="invalid_token"' if b"authorization"
                        in headers else b"Bearer")]
        try:
            request = await _json_body(receive, headers)
            if path == EVALUATION_PATH:
                decided: Any = (await self.point.evaluation(evaluation_of(request))).to_json()
            else:
                decided = await self._evaluations(request)
        except Malformed as problem:
            return 400, str(problem).encode(), [_TEXT]
        except TooLarge:
            return 413, f"the request body is over {MAX_BODY} bytes".encode(), [_TEXT]
        return 200, orjson.dumps(decided), [_JSON]

    async def _evaluations(self, request: Any) -> Any:
        batch = evaluations_of(request)
        if batch.single is not None:  # no items: the Access Evaluation request, answered as one
            if isinstance(batch.single, Malformed):
                raise batch.single
            return (await self.point.evaluation(batch.single)).to_json()
        return batch_json(await self.point.evaluations(batch))


async def _json_body(receive: Receive, headers: dict[bytes, bytes]) -> Any:
    """The request's JSON body: `application/json`, at most MAX_BODY bytes, one JSON object."""
    kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if kind != b"application/json":
        raise Malformed("content-type: must be application/json")
    declared = headers.get(b"content-length", b"")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise TooLarge
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Malformed("(request): the body ended early")
        part = message.get("body", b"")
        size += len(part)
        if size > MAX_BODY:
            raise TooLarge
        parts.append(part)
        if not message.get("more_body", False):
            break
    try:
        return orjson.loads(parts[0] if len(parts) == 1 else b"".join(parts))
    except orjson.JSONDecodeError as exc:
        raise Malformed(f"(request): not JSON: {str(exc).splitlines()[0]}") from None


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
