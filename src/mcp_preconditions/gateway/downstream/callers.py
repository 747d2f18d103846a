"""The gateway's clients, as the servers behind it need them: where their notifications go
(2025-11-25 connections directly, 2026-07-28 clients through `subscriptions/listen`), which
resource URIs each client subscribed to, and who can answer a server's own requests (sampling,
elicitation, roots): the one client whose calls to *that* server are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .. import jsonrpc
from ..jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError
from ..rounds import PendingCall, Rounds
from ..schemas import SERVER_REQUESTS, SERVER_RESULTS
from ..subscriptions import Subscriptions
from .clients import LEVELS, Call, Client
from .listen import Listeners

log = logging.getLogger("mcp_preconditions.gateway")

_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
               "roots/list": "roots"}

Exchange = Call | PendingCall


def _owner(item: Exchange) -> int:
    """Which client an upstream exchange belongs to: a 2025-11-25 connection, or the one request
    (2026-07-28 requests stand alone)."""
    if isinstance(item, PendingCall):
        return id(item)
    if item.client is not None and not item.modern:
        return id(item.client)
    return id(item)


def _declared(item: Exchange, method: str) -> bool:
    return _CAPABILITY[method] in item.capabilities


def _valid(method: str, params: dict[str, Any] | None = None, result: Any = None) -> None:
    """A server's request, or a client's answer to it, in the spec's shape (ValidationError)."""
    if result is None:
        SERVER_REQUESTS[method].model_validate(
            {"method": method, **({"params": params} if params is not None else {})})
    else:
        adapter: TypeAdapter[Any] = TypeAdapter(SERVER_RESULTS[method])
        adapter.validate_python(result, by_name=False)


class Downstream:
    """Connected clients and their in-flight requests."""

    def __init__(self, rounds: Rounds, holders: Callable[[], Iterable[Subscriptions]]) -> None:
        self.listeners = Listeners()
        self._rounds = rounds
        self._holders = holders  # every server's subscriptions
        self._connections: dict[int, Client] = {}  # handshake-era connections with a channel
        self._subscribed: dict[int, set[str]] = {}  # connection -> resource URIs it subscribed to
        # Requests forwarded to a server, with the server's key; newest last.
        self._active: list[tuple[Call, str]] = []
        self._stdio: int | None = None  # the stdio listener's connection

    # -- bookkeeping -----------------------------------------------------------------------------
    def seen(self, call: Call) -> None:
        """Remember a handshake-era connection, to send it the upstream's notifications."""
        client = call.client
        if client is None or call.modern or id(client) in self._connections:
            return
        key = id(client)
        self._connections[key] = client
        if not client.http:  # the stdio listener's one client
            self._stdio = key
        client.on_close.append(lambda: self._drop(key))

    def _drop(self, key: int) -> None:
        self._connections.pop(key, None)
        self._subscribed.pop(key, None)
        asyncio.get_running_loop().create_task(self._release(key))

    async def _release(self, key: int) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                for subscriptions in self._holders():
                    await subscriptions.release_all(key)

    @contextlib.contextmanager
    def in_flight(self, call: Call, server: str) -> Iterator[None]:
        """A client request being forwarded to `server`: that server's requests meanwhile may be
        this caller's (2026-07-28 calls that can take input rounds are tracked by `Rounds`)."""
        entry = (call, server)
        self._active.append(entry)
        try:
            yield
        finally:
            self._active.remove(entry)

    async def subscription(self, call: Call, subscriptions: Subscriptions,
                           forward: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """A 2025-11-25 client's `resources/subscribe` or `unsubscribe`: held upstream once per
        URI for all clients. A 2025-11-25 upstream is sent the client's own request (`forward`),
        except an unsubscribe while other clients still hold the URI; a 2026-07-28-only upstream,
        which has no such method, gets a listen stream naming the URI."""
        uri = (call.params or {}).get("uri")
        key = id(call.client) if call.client is not None else id(call)
        subscribe = call.method == "resources/subscribe"
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
        items: list[Exchange] = [*(call for call, s in self._active if s == server),
                                 *(c for c in self._rounds.calls() if c.server == server)]
        for item in items:
            owners[_owner(item)] = item  # the newest of each client's
        if len(owners) != 1:
            return None, len(owners)
        return next(iter(owners.values())), 1

    def log(self, server: str, params: dict[str, Any]) -> None:
        """A server's log message goes where a request from it would (see `ask`): to the one
        client whose calls to it are in flight, on that call's stream; else nowhere (a stdio
        listener's one client aside). Another client's call never sees it."""
        level = params.get("level")
        if level not in LEVELS:
            return
        item, clients = self._caller(server)
        call = item.current if isinstance(item, PendingCall) else item
        if call is not None:
            if not self._quieter(call.client, level) and call.logs(level):
                call.notify("notifications/message", params)
            return
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if clients == 0 and connection is not None and connection.standalone is not None:
            if not self._quieter(connection, level):
                connection.standalone.push(jsonrpc.notification("notifications/message", params))
            return
        log.debug("upstream log message for no certain client: not delivered")

    @staticmethod
    def _quieter(client: Client | None, level: str) -> bool:
        """Whether a 2025-11-25 client asked (`logging/setLevel`) for less than `level`."""
        wanted = client.level if client is not None else None
        return wanted is not None and LEVELS.index(level) < LEVELS.index(wanted)

    def set_level(self, call: Call) -> str | None:
        """Note a client's `logging/setLevel`; the level to set upstream: the most verbose any
        connected client asked for (the upstream session is shared; each client is filtered here)."""
        level = (call.params or {}).get("level")
        if level in LEVELS and call.client is not None:
            call.client.level = level
        levels = [c.level for c in self._connections.values() if c.level is not None]
        if call.client is not None and call.client.level is not None \
                and id(call.client) not in self._connections:
            levels.append(call.client.level)
        return min(levels, key=LEVELS.index, default=None)

    def notify(self, server: str, method: str, params: dict[str, Any]) -> None:
        """Pass a server's notification to every client that should see it."""
        if method == "notifications/message":
            self.log(server, params)
            return
        self.listeners.publish(method, params)
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        message = jsonrpc.notification(method, params)
        for key, client in list(self._connections.items()):
            if uri is not None and uri not in self._subscribed.get(key, ()):
                continue
            if client.standalone is not None:
                client.standalone.push(message)

    async def ask(self, server: str, method: str, params: dict[str, Any], timeout: float
                  ) -> dict[str, Any]:
        """Put a server's request to the client whose call caused it. The shared session to the
        server does not say which call that is, so it is only known when the calls of one client
        alone are in flight to that server; otherwise the server gets an error, never a guess."""
        if method not in _CAPABILITY:
            raise RpcError(METHOD_NOT_FOUND, "Method not found", method)
        item, clients = self._caller(server)
        if clients > 1:
            raise RpcError(INVALID_REQUEST, f"gateway: {method} not routed: calls of {clients} "
                           "clients are in flight and the upstream does not say whose call asks")
        try:
            _valid(method, params)
            if item is not None:
                if not _declared(item, method):  # a client that never said it can answer
                    raise RpcError(METHOD_NOT_FOUND,
                                   f"gateway: the calling client cannot answer {method}")
                if isinstance(item, PendingCall):
                    answer = await item.ask(method, params)
                else:
                    answer = await item.ask(method, params, timeout)
            else:
                answer = await self._ask_anyone(method, params, timeout)
            _valid(method, result=answer)
        except ValidationError as exc:  # a malformed question or answer reaches nobody
            raise RpcError(INTERNAL_ERROR, f"gateway: {exc.error_count()} validation error(s) "
                           f"in {method}") from None
        return answer

    async def _ask_anyone(self, method: str, params: dict[str, Any], timeout: float
                          ) -> dict[str, Any]:
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if connection is not None and connection.standalone is not None:
            # No call in flight: a stdio listener has one client only. It is asked only what it
            # declared it can answer (a client that did not would answer an error).
            if _CAPABILITY[method] in connection.capabilities:
                return await connection.ask(method, params, timeout, connection.standalone)
            if method != "roots/list":
                raise RpcError(METHOD_NOT_FOUND, f"gateway: the client cannot answer {method}")
        if method == "roots/list":
            # Nobody to ask (a server asking as it starts, before any client; a client without
            # roots): the gateway offers no roots of its own. An empty list never widens what a
            # server may touch, where an error makes servers log a failure at every clean start.
            return {"roots": []}
        raise RpcError(INVALID_REQUEST, f"gateway: {method} not routed: no client call is in "
                       "flight (over HTTP the gateway cannot tell which client it is for)")

    # -- 2026-07-28 listen streams ---------------------------------------------------------------
    async def listen(self, call: Call, owner: Callable[[str], Subscriptions | None]) -> None:
        """Serve a listen stream until the client goes; the resources it asks about are held,
        each at the server that lists it (`owner`), meanwhile."""
        notifications = (call.params or {}).get("notifications")
        uris = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
        uris = [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []
        held: list[Subscriptions] = []
        for uri in uris:
            subscriptions = owner(uri)
            if subscriptions is None:
                log.warning("resource subscription %s: no single server lists it", uri)
                continue
            try:
                await subscriptions.hold(uri, id(call))
                held.append(subscriptions)
            except Exception as exc:  # the stream is still served; updates may just not come
                log.warning("resource subscription %s failed: %s", uri, exc)
        try:
            await self.listeners.serve(call)
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    for subscriptions in dict.fromkeys(held):
                        await asyncio.shield(subscriptions.release_all(id(call)))
