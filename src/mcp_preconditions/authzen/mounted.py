"""The decision point on the gateway's own HTTP listener (SPEC §16, "so one deployment is both"):
the gateway's policy answers AuthZEN requests at `app.PATHS` beside `/mcp` while its policy has a
`[pdp_server]` table, and those paths are 404 while it has none (a reload adds or removes it without
a restart). The requests are decided by the gateway's own guard, exactly as its calls are: a
`resource.id` of type `tool` is a tool's visible name, as the gateway lists it.

The gateway's app checks Host and Origin before any path but `/healthz`; the decision point checks
the calling enforcement point's bearer token by the policy's `[auth]` (authzen/app.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..guard import Guard
from ..policy.model import Policy
from .app import PATHS, AuthzenApp
from .point import DecisionPoint

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_NOT_FOUND = b"Not Found"

__all__ = ["PATHS", "MountedDecisionPoint", "serves_pdp"]


def serves_pdp(policy: Policy) -> bool:
    """Whether the policy says its gateway answers as a decision point: it has `[pdp_server]`."""
    return "pdp_server" in policy.model_fields_set


class MountedDecisionPoint:
    """An ASGI app for `PATHS`: the decision point of `guard`'s policy while that policy serves one
    (`serves_pdp`), 404 otherwise. `public_url`: where callers reach the gateway (`--public-url`),
    the metadata's identifier unless `[pdp_server] url` names another; None: the listener's own
    `http://HOST:PORT`, read from the first request (the port may have been picked at bind)."""

    def __init__(self, guard: Guard, public_url: str | None) -> None:
        self.guard = guard
        self.public_url = public_url.rstrip("/") if public_url else None
        self._app: AuthzenApp | None = None

    def _point(self, scope: Scope) -> AuthzenApp:
        if self._app is None:
            base = self.public_url
            if base is None:
                host, port = scope.get("server") or ("127.0.0.1", 80)
                base = f"http://{f'[{host}]' if ':' in str(host) else host}:{port}"
            # (Host and Origin are checked by the gateway's app before any path of it)
            self._app = AuthzenApp(DecisionPoint(self.guard), base)
        return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if serves_pdp(self.guard.snapshot.source.policy):
            await self._point(scope)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 404, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(_NOT_FOUND)).encode())]})
        await send({"type": "http.response.body", "body": _NOT_FOUND})
