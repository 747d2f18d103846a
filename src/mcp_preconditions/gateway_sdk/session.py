"""The gateway's client sessions, as the servers behind it need them: where their notifications go
(2025-11-25 connections directly, 2026-07-28 clients through `subscriptions/listen`), which
resource URIs each client subscribed to, and who can answer a server's own requests (sampling,
elicitation, roots): the one client whose calls to *that* server are in flight.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, cast, get_args

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import event_from_wire
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.methods import MONOLITH_REQUESTS
from pydantic import BaseModel

from . import bridge
from .rounds import PendingCall, Rounds
from .subscriptions import Subscriptions

log = logging.getLogger("mcp_preconditions.gateway")

_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # least severe first
_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
               "roots/list": "roots"}
_RESULTS: dict[str, type[BaseModel]] = {"sampling/createMessage": types.CreateMessageResultWithTools,
                                        "elicitation/create": types.ElicitResult,
                                        "roots/list": types.ListRootsResult}

Exchange = ServerRequestContext[Any, Any] | PendingCall


def _owner(item: Exchange) -> int:
    """Which client an upstream exchange belongs to: a 2025-11-25 connection, or the one request
    (2026-07-28 requests stand alone)."""
    if isinstance(item, PendingCall):
        return id(item)
    connection = getattr(item.session, "_connection", None)
    if connection is not None and not bridge.is_modern(item.protocol_version):
        return id(connection)
    return id(item)


def http_headers(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any] | None:
    """The HTTP headers of the request that carried this message (None on stdio)."""
    headers = getattr(ctx.request, "headers", None)
    return headers if isinstance(headers, Mapping) else None


def client_capabilities(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    """What the client of this request declared it can do: in the request's `_meta` at
    2026-07-28, on its connection at 2025-11-25."""
    if bridge.is_modern(ctx.protocol_version):
        meta = (ctx.params or {}).get("_meta")
        caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
        return caps if isinstance(caps, dict) else {}
    connection = getattr(ctx.session, "_connection", None)
    declared = getattr(connection, "client_capabilities", None)
    if declared is None:
        return {}
    dumped: dict[str, Any] = declared.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _declared(item: Exchange, method: str) -> bool:
    caps = item.capabilities if isinstance(item, PendingCall) else client_capabilities(item)
    return _CAPABILITY[method] in caps


class Downstream:
    """Connected clients and their in-flight requests."""

    def __init__(self, bus: InMemorySubscriptionBus, rounds: Rounds,
                 holders: Callable[[], Iterable[Subscriptions]]) -> None:
        self._bus = bus
        self._rounds = rounds
        self._holders = holders  # every server's subscriptions
        self._connections: dict[int, Connection] = {}  # handshake-era connections with a channel
        self._subscribed: dict[int, set[str]] = {}  # connection -> resource URIs it subscribed to
        # Requests forwarded to a server, with the server's key; newest last.
        self._active: list[tuple[ServerRequestContext[Any, Any], str]] = []
        self._stdio: int | None = None  # the stdio listener's connection
        self._levels: dict[int, str] = {}  # connection -> the log level it asked for

    # -- bookkeeping -----------------------------------------------------------------------------
    def seen(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember a handshake-era connection, to send it the upstream's notifications."""
        # The SDK hands middleware a per-request session; the connection behind it is what the
        # client holds (mcp 2.3.0 keeps it as `ServerSession._connection`; see integrations/_server).
        connection = getattr(ctx.session, "_connection", None)
        if (not isinstance(connection, Connection) or bridge.is_modern(ctx.protocol_version)
                or not connection.has_standalone_channel or id(connection) in self._connections):
            return
        key = id(connection)
        self._connections[key] = connection
        if ctx.request is None:  # no HTTP request behind it: the stdio listener's one client
            self._stdio = key
        connection.exit_stack.push_async_callback(self._drop, key)

    async def _drop(self, key: int) -> None:
        self._connections.pop(key, None)
        self._levels.pop(key, None)
        self._subscribed.pop(key, None)
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            for subscriptions in self._holders():
                await subscriptions.release_all(key)

    @contextlib.contextmanager
    def in_flight(self, ctx: ServerRequestContext[Any, Any], server: str) -> Iterator[None]:
        """A client request being forwarded to `server`: that server's requests meanwhile may be
        this caller's (2026-07-28 calls that can take input rounds are tracked by `Rounds`)."""
        entry = (ctx, server)
        self._active.append(entry)
        try:
            yield
        finally:
            self._active.remove(entry)

    async def subscription(self, ctx: ServerRequestContext[Any, Any], subscriptions: Subscriptions,
                           forward: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """A 2025-11-25 client's `resources/subscribe` or `unsubscribe`: held upstream once per
        URI for all clients. A 2025-11-25 upstream is sent the client's own request (`forward`),
        except an unsubscribe while other clients still hold the URI; a 2026-07-28-only upstream,
        which has no such method, gets a listen stream naming the URI."""
        uri = (ctx.params or {}).get("uri")
        key = id(getattr(ctx.session, "_connection", None) or ctx)
        subscribe = ctx.method == "resources/subscribe"
        if not isinstance(uri, str):
            return await forward()
        result: dict[str, Any] = {}
        if subscriptions.modern:
            await (subscriptions.hold(uri, key) if subscribe else subscriptions.release(uri, key))
        elif subscribe or not subscriptions.held_by_others(uri, key):
            result = await forward()
            subscriptions.note(uri, key, subscribe)
        else:
            subscriptions.note(uri, key, False)
        uris = self._subscribed.setdefault(key, set())
        if subscribe:
            uris.add(uri)
        else:
            uris.discard(uri)
        return result

    # -- from the upstream -----------------------------------------------------------------------
    def _caller(self, server: str) -> tuple[Exchange | None, int]:
        """The newest exchange with `server` in flight when they all belong to one client, and how
        many clients have exchanges with it in flight."""
        owners: dict[int, Exchange] = {}
        items: list[Exchange] = [*(ctx for ctx, s in self._active if s == server),
                                 *(c for c in self._rounds.calls() if c.server == server)]
        for item in items:
            owners[_owner(item)] = item  # the newest of each client's
        if len(owners) != 1:
            return None, len(owners)
        return next(iter(owners.values())), 1

    async def log(self, server: str, params: dict[str, Any]) -> None:
        """A server's log message goes where a request from it would (see `ask`): to the one
        client whose calls to it are in flight, on that call's stream; else nowhere (a stdio
        listener's one client aside). Another client's call never sees it."""
        level = params.get("level")
        if level not in _LEVELS:
            return
        item, clients = self._caller(server)
        ctx = item.current if isinstance(item, PendingCall) else item
        if ctx is not None:
            connection = getattr(ctx.session, "_connection", None)
            if self._quieter(id(connection), level):
                return
            with contextlib.suppress(Exception):  # the call may have just been answered
                # At 2026-07-28 the SDK delivers only what this request opted in to.
                await ctx.session.send_log_message(level, params.get("data"), params.get("logger"),
                                                   related_request_id=ctx.request_id)
            return
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if clients == 0 and connection is not None:
            if not self._quieter(id(connection), level):
                await connection.notify("notifications/message", params)
            return
        log.debug("upstream log message for no certain client: not delivered")

    def _quieter(self, key: int, level: str) -> bool:
        """Whether a 2025-11-25 client asked (`logging/setLevel`) for less than `level`."""
        wanted = self._levels.get(key)
        return wanted is not None and _LEVELS.index(level) < _LEVELS.index(wanted)

    def set_level(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """Note a client's `logging/setLevel`; the level to set upstream: the most verbose any
        connected client asked for (the upstream session is shared; each client is filtered here)."""
        level = (ctx.params or {}).get("level")
        connection = getattr(ctx.session, "_connection", None)
        if level in _LEVELS and connection is not None:
            self._levels[id(connection)] = level
        return min(self._levels.values(), key=_LEVELS.index, default=None)

    async def notify(self, server: str, method: str, params: dict[str, Any]) -> None:
        """Pass a server's notification to every client that should see it."""
        if method == "notifications/message":
            await self.log(server, params)
            return
        event = event_from_wire(method, params)
        if event is not None:
            await self._bus.publish(event)
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        for key, connection in list(self._connections.items()):
            if uri is not None and uri not in self._subscribed.get(key, ()):
                continue
            await connection.notify(method, params)

    async def ask(self, server: str, method: str, params: dict[str, Any], timeout: float
                  ) -> dict[str, Any]:
        """Put a server's request to the client whose call caused it. The shared session to the
        server does not say which call that is, so it is only known when the calls of one client
        alone are in flight to that server; otherwise the server gets an error, never a guess."""
        if method not in _RESULTS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", method)
        item, clients = self._caller(server)
        if clients > 1:
            raise MCPError(types.INVALID_REQUEST, f"gateway: {method} not routed: calls of "
                           f"{clients} clients are in flight and the upstream does not say "
                           "whose call asks")
        if item is not None:
            if not _declared(item, method):  # a client that never said it can answer is not asked
                raise MCPError(types.METHOD_NOT_FOUND,
                               f"gateway: the calling client cannot answer {method}")
            if isinstance(item, PendingCall):
                return await item.ask(method, params)
            return await self.ask_caller(item, method, params, timeout)
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if connection is not None:  # no call in flight: a stdio listener has one client only
            raw: dict[str, Any] = await connection.send_raw_request(method, params,
                                                                     {"timeout": timeout})
            return raw
        if method == "roots/list":
            # Nobody to ask (a server asking as it starts, before any client): the gateway offers
            # no roots of its own. An empty list never widens what a server may touch, where an
            # error makes servers log a failure at every clean start.
            return {"roots": []}
        raise MCPError(types.INVALID_REQUEST, f"gateway: {method} not routed: no client call is "
                       "in flight (over HTTP the gateway cannot tell which client it is for)")

    async def ask_caller(self, ctx: ServerRequestContext[Any, Any], method: str,
                          params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """On the stream of the caller's request, else on its connection's own stream."""
        if bridge.is_modern(ctx.protocol_version):  # a request that cannot carry input_required
            raise MCPError(types.INVALID_REQUEST,
                           f"gateway: {method} cannot reach a 2026-07-28 client during {ctx.method}")
        request = MONOLITH_REQUESTS[method].model_validate({"method": method, "params": params})
        if ctx.session.can_send_request:
            with anyio.fail_after(timeout):
                answer = await ctx.session.send_request(
                    cast(Any, request), _RESULTS[method],
                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
            dumped: dict[str, Any] = answer.model_dump(by_alias=True, mode="json",
                                                       exclude_none=True)
            return dumped
        connection = self._connections.get(_owner(ctx))
        if connection is None:
            raise MCPError(types.INVALID_REQUEST, f"gateway: the caller cannot be asked {method}")
        raw: dict[str, Any] = await connection.send_raw_request(method, params, {"timeout": timeout})
        return raw

    # -- 2026-07-28 listen streams ---------------------------------------------------------------
    async def listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext,
                     owner: Callable[[str], Subscriptions | None]) -> HandlerResult:
        """Serve a listen stream; the resources it asks about are held, each at the server that
        lists it (`owner`), meanwhile."""
        notifications = (ctx.params or {}).get("notifications")
        uris = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
        uris = [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []
        held: list[Subscriptions] = []
        for uri in uris:
            subscriptions = owner(uri)
            if subscriptions is None:
                log.warning("resource subscription %s: no single server lists it", uri)
                continue
            try:
                await subscriptions.hold(uri, id(ctx))
                held.append(subscriptions)
            except Exception as exc:  # the stream is still served; updates may just not come
                log.warning("resource subscription %s failed: %s", uri, exc)
        try:
            return await call_next(ctx)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                for subscriptions in dict.fromkeys(held):
                    await subscriptions.release_all(id(ctx))
