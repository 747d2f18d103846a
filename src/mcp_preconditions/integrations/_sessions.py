"""Connected sessions of a hosted server: whose they are, and how a change of tool list reaches one
subscriber (which sessions to tell is `toolset.Views`'s).

An HTTP session belongs to the verified caller that opened it: `SessionOwners` tells the MCP SDK's
session managers who that is, so another principal (or an anonymous caller) gets 404 for it.
Handshake-era (2025-11-25) connections get the notification on their standalone channel. At
2026-07-28 change notifications travel only on `subscriptions/listen` streams, so a listen stream is
the session there, and `TargetedBus` delivers to the streams of one subscriber only.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import anyio.lowlevel
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.subscriptions import ServerEvent
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.header import credentials_from_authorization_header
from ..guard import Guard
from ..owner import Owner
from ..principal import Credentials, Principal
from ..telemetry.metrics import Metrics, RefusalReason

log = logging.getLogger(__name__)

# The listen stream being opened in this task: set by the guard's middleware around the SDK's
# ListenHandler, read by TargetedBus.subscribe (both run in the request's task).
LISTENER: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "mcp_preconditions_listener", default=None)


class SessionOwner(AuthenticatedUser):
    """A caller whose bearer token the guard verified, handed to the MCP SDK's session managers in
    the form they compare (an `AccessToken`'s client id, issuer claim and subject), built from the
    one session-owner type the gateway uses too (`owner.Owner`). It carries no token and no scopes;
    `credentials` are what the request carried, for the guard to decide its calls."""

    def __init__(self, principal: Principal, credentials: Credentials) -> None:
        owner = self.owner = Owner.of(principal)
        super().__init__(AccessToken(
            token="", client_id=owner.client, scopes=[], subject=owner.subject,
            claims={"iss": owner.issuer} if owner.issuer is not None else None))
        self.credentials = credentials


class SessionOwners:
    """ASGI middleware for a hosted server whose guard verifies bearer tokens itself: a request
    whose token the guard accepts is made the request of that principal (`scope["user"]`), so the
    SDK binds the sessions it opens to it and answers anyone else 404. A request without a token,
    or with one the guard refuses, is anonymous to the SDK: it reaches no verified caller's session.
    A `user` already set (the SDK's or fastmcp's own auth) is left alone.

    `GuardedMCPServer`'s HTTP apps add it themselves. Elsewhere it is one line: a lowlevel
    `Server`'s `app.add_middleware(SessionOwners, guard=guard)`, or fastmcp's
    `app.http_app(middleware=[Middleware(SessionOwners, guard=guard)])`.

    `metrics` (read per request: None counts nothing) counts the SDK's refusals made before any
    decision as the gateway counts its own (`http_refused_total{reason}`): a session that does not
    exist or is another's (`session`), a Host or Origin of DNS rebinding (`host`)."""

    def __init__(self, app: ASGIApp, guard: Guard,
                 metrics: Callable[[], Metrics | None] = lambda: None) -> None:
        self.app = app
        self.guard = guard
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope.get("user") is None:
                header = next((value.decode("latin-1") for name, value in scope["headers"]
                               if name == b"authorization"), None)
                if header is not None:
                    credentials = credentials_from_authorization_header(header)
                    principal = (await self.guard.authenticate(credentials)).principal
                    if principal is not None:
                        scope["user"] = SessionOwner(principal, credentials)
            metrics = self.metrics()
            if metrics is not None:
                send = _counting_refusals(send, metrics)
        await self.app(scope, receive, send)


# The MCP SDK's refusals before any decision, told apart by status and the text it answers with
# (mcp/server/transport_security.py, streamable_http_manager.py, streamable_http.py).
_REFUSALS: dict[int, tuple[tuple[bytes, RefusalReason], ...]] = {
    421: ((b"Invalid Host header", "host"),),
    403: ((b"Invalid Origin header", "host"),),
    404: ((b"Session not found", "session"), (b"Session has been terminated", "session"))}


def _counting_refusals(send: Send, metrics: Metrics) -> Send:
    """`send`, counting a response that is one of the SDK's refusals (`_REFUSALS`)."""
    status = 0

    async def counted(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif status in _REFUSALS:
            body = bytes(message.get("body", b""))
            reason = next((r for text, r in _REFUSALS[status] if text in body), None)
            if reason is not None:
                metrics.http_refused(reason)
            status = 0  # its first part says it; the rest is not looked at
        await send(message)
    return counted


class TargetedBus:
    """An in-process `SubscriptionBus` (mcp.server.subscriptions) that can also publish to the
    listen streams of one subscriber, so a change for one principal is not broadcast to all."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[object | None, Callable[[ServerEvent], None]]] = {}

    async def publish(self, event: ServerEvent) -> None:
        self._deliver(None, event)
        await anyio.lowlevel.checkpoint()

    async def publish_to(self, subscriber: object, event: ServerEvent) -> None:
        self._deliver(subscriber, event)
        await anyio.lowlevel.checkpoint()

    def _deliver(self, subscriber: object | None, event: ServerEvent) -> None:
        for owner, listener in list(self._listeners.values()):
            if subscriber is not None and owner is not subscriber:
                continue
            try:
                listener(event)
            except Exception:  # one broken listener must not starve the others
                log.exception("subscription listener raised; continuing")

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = (LISTENER.get(), listener)

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe
