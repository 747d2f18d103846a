"""The gateway's clients, as the servers behind it need them: where their notifications go
(2025-11-25 connections directly, 2026-07-28 clients through `subscriptions/listen`), which
resource URIs each client subscribed to, and who can answer a server's own requests (sampling,
elicitation, roots): the call whose request's stream it came on, else the one client whose calls
to *that* server are in flight.

What a server sends for one caller (on their own session, or on their request's stream: SPEC §14)
goes to that caller's connections, listen streams and in-flight calls only, whoever else is
connected; what a server with credentials sends on the gateway's own session goes to nobody
(`NOBODY`: that session serves no caller).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from . import jsonrpc
from .bridge import SERVER_REQUESTS, SERVER_RESULTS
from .clients import LEVELS, Call, Client, Pollable
from .jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError
from .listen import Listeners
from .rounds import PendingCall, Rounds
from .subscriptions import Subscriptions
from .upstream.caller_sessions import Sender

log = logging.getLogger("mcp_preconditions.gateway")

_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
               "roots/list": "roots"}

Exchange = Call | PendingCall
# Where a listen stream's resource is held, and as whom (listings.py `Listings.holder`).
Holder = Callable[[Call, str], Awaitable["tuple[Subscriptions, Sender | None] | None"]]
# The owner of what a server with credentials sends on the gateway's own session: no client.
NOBODY: Final = ("nobody",)


def _owner(item: Exchange) -> Hashable:
    """Which client an upstream exchange belongs to: a 2025-11-25 connection, the one request
    (2026-07-28 requests stand alone), or the person whose bridged calls these are (a bridged
    call waits for its client's retry between rounds: one person's calls are one client's)."""
    if isinstance(item, PendingCall):
        return ("caller", item.caller)
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
        # Requests forwarded to a server, with the server's key and whose they are (a caller's
        # owner key; None: on the gateway's own session); newest last.
        self._active: list[tuple[Call, str, Hashable | None]] = []
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
    def in_flight(self, call: Call, server: str, owner: Hashable | None = None) -> Iterator[None]:
        """A client request being forwarded to `server` (as the caller `owner`, or on the
        gateway's own session): that server's requests meanwhile may be this caller's (2026-07-28
        calls that can take input rounds are tracked by `Rounds`). A connection whose request
        goes as a caller is that caller's: what the server sends them reaches it."""
        entry = (call, server, owner)
        if owner is not None and call.client is not None:
            call.client.owner = owner
        self._active.append(entry)
        try:
            yield
        finally:
            self._active.remove(entry)

    async def subscription(self, call: Call, subscriptions: Subscriptions,
                           forward: Callable[[], Awaitable[dict[str, Any]]],
                           caller: Sender | None = None) -> dict[str, Any]:
        """A 2025-11-25 client's `resources/subscribe` or `unsubscribe`: held upstream once per
        URI for all clients (on a server with credentials, once per URI and `caller`, as them).
        A 2025-11-25 upstream is sent the client's own request (`forward`), except an unsubscribe
        while other clients still hold the URI; a 2026-07-28-only upstream, which has no such
        method, gets a listen stream naming the URI."""
        uri = (call.params or {}).get("uri")
        key = id(call.client) if call.client is not None else id(call)
        subscribe = call.method == "resources/subscribe"
        if not isinstance(uri, str):
            return await forward()
        result: dict[str, Any] = {}
        if subscriptions.modern:
            await (subscriptions.hold(uri, key, caller) if subscribe
                   else subscriptions.release(uri, key, caller))
        elif subscribe:
            subscriptions.note(uri, key, True, caller)  # (first: a caller's session then listens)
            try:
                result = await forward()
            except BaseException:
                subscriptions.note(uri, key, False, caller)
                raise
        elif not subscriptions.held_by_others(uri, key, caller):
            result = await forward()
            subscriptions.note(uri, key, False, caller)
        else:
            subscriptions.note(uri, key, False, caller)
        uris = self._subscribed.setdefault(key, set())
        if subscribe:
            uris.add(uri)
        else:
            uris.discard(uri)
        return result

    # -- from the upstream -----------------------------------------------------------------------
    def _caller(self, server: str, owner: Hashable | None = None) -> tuple[Exchange | None, int]:
        """For a server's message that came on no request's own stream: the exchange with `server`
        in flight (of `owner`'s: a caller's, or None: on the gateway's own session) when they all
        belong to one client, and how many clients have such exchanges in flight. Of one client's,
        the newest; of one person's bridged calls, the newest with a request waiting on it (one
        waiting for its retry is asked in its next round), and two of theirs with a request
        waiting are two clients (two anonymous callers' are one person's). A bridged call whose
        server call is over asks nothing more: it is not in flight."""
        owners: dict[Hashable, Exchange] = {}
        for call, s, o in self._active:
            if s == server and o == owner:
                owners[_owner(call)] = call  # the newest of each client's
        pending_calls = [p for p in self._rounds.calls()
                         if p.server == server and p.owner == owner and p.running]
        attached = Counter(_owner(p) for p in pending_calls if p.attached)
        for pending in pending_calls:
            key = _owner(pending)
            if attached[key] > 1 and pending.attached:
                key = id(pending)  # (never the newest of two requests that may be two clients')
            kept = owners.get(key)
            if not isinstance(kept, PendingCall) or pending.attached or not kept.attached:
                owners[key] = pending
        if len(owners) != 1:
            return None, len(owners)
        return next(iter(owners.values())), 1

    def log(self, server: str, params: dict[str, Any], owner: Hashable | None = None) -> None:
        """A server's log message goes where a request from it would (see `ask`): to the one
        client whose calls to it are in flight, on that call's stream; else nowhere (a stdio
        listener's one client aside, when it is `owner`'s). Another client's call never sees it."""
        level = params.get("level")
        if level not in LEVELS or owner is NOBODY:
            return
        item, clients = self._caller(server, owner)
        call = item.current if isinstance(item, PendingCall) else item
        if call is not None:
            if not self._quieter(call.client, level) and call.logs(level):
                call.notify("notifications/message", params)
            return
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if clients == 0 and connection is not None and connection.standalone is not None \
                and (owner is None or connection.owner == owner):
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

    def notify(self, server: str, method: str, params: dict[str, Any],
               owner: Hashable | None = None) -> None:
        """Pass a server's notification to every client that should see it: of `owner`'s alone
        when it came on a caller's session or stream (None: the gateway's own session, shared by
        every client; NOBODY: no client)."""
        if owner is NOBODY:
            log.debug("upstream %s: %s on the gateway's own session: for no caller", server, method)
            return
        if method == "notifications/message":
            self.log(server, params, owner)
            return
        self.listeners.publish(method, params, owner)
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        message = jsonrpc.notification(method, params)
        for key, client in list(self._connections.items()):
            if owner is not None and client.owner != owner:
                continue
            if uri is not None and uri not in self._subscribed.get(key, ()):
                continue
            if client.standalone is not None:
                client.standalone.push(message)

    async def ask(self, server: str, method: str, params: dict[str, Any], timeout: float,
                  owner: Hashable | None = None, origin: object | None = None) -> dict[str, Any]:
        """Put a server's request to the client whose call caused it. A request that came on a
        call's own stream (over HTTP) names it: `origin`, the call it was made for. Otherwise the
        shared session to the server does not say which call that is, so it is only known when the
        calls of one client alone are in flight to that server (`_caller`); else the server gets
        an error, never a guess. From a caller's session (`owner`), only that caller's calls are
        candidates; from the gateway's own session of a server with credentials (NOBODY), none is."""
        if method not in _CAPABILITY:
            raise RpcError(METHOD_NOT_FOUND, "Method not found", method)
        item: Exchange | None
        if isinstance(origin, Call | PendingCall):
            item, clients = origin, 1
        elif owner is NOBODY:
            return _nobody_asked(method)
        else:
            item, clients = self._caller(server, owner)
        if clients > 1:
            raise RpcError(INVALID_REQUEST, f"gateway: {method} not routed: calls of {clients} "
                           "clients are in flight and the upstream does not say whose call asks")
        try:
            _valid(method, params)
            if isinstance(item, PendingCall):  # (refuses, and notes, what its client lacks)
                answer = await item.ask(method, params)
            elif item is not None:
                if not _declared(item, method):  # a client that never said it can answer
                    raise RpcError(METHOD_NOT_FOUND,
                                   f"gateway: the calling client cannot answer {method}")
                answer = await item.ask(method, params, timeout)
            else:
                answer = await self._ask_anyone(method, params, timeout, owner)
            _valid(method, result=answer)
        except ValidationError as exc:  # a malformed question or answer reaches nobody
            raise RpcError(INTERNAL_ERROR, f"gateway: {exc.error_count()} validation error(s) "
                           f"in {method}") from None
        return answer

    @staticmethod
    def polled(origin: object, retry: float) -> None:
        """A server closed the stream of a request made for `origin` before its answer, for
        polling (SEP-1699): a 2025-11-25 client's own stream of that call is closed likewise, to
        be resumed (`sse.Reply.poll`); another client just waits for its answer."""
        if isinstance(origin, Call) and not origin.closed and isinstance(origin.stream, Pollable):
            origin.stream.poll(retry)

    async def _ask_anyone(self, method: str, params: dict[str, Any], timeout: float,
                          owner: Hashable | None) -> dict[str, Any]:
        connection = self._connections.get(self._stdio) if self._stdio is not None else None
        if connection is not None and connection.standalone is not None \
                and (owner is None or connection.owner == owner):
            # No call in flight: a stdio listener has one client only. It is asked only what it
            # declared it can answer (a client that did not would answer an error).
            if _CAPABILITY[method] in connection.capabilities:
                return await connection.ask(method, params, timeout, connection.standalone)
            if method != "roots/list":
                raise RpcError(METHOD_NOT_FOUND, f"gateway: the client cannot answer {method}")
        return _nobody_asked(method)

    # -- 2026-07-28 listen streams ---------------------------------------------------------------
    async def listen(self, call: Call, owner: Holder, caller: Hashable | None = None) -> None:
        """Serve a listen stream until the client goes; the resources it asks about are held,
        each at the server that lists it (`owner`: and as whom), meanwhile. `caller`: whose
        stream it is (what a server sends a caller reaches their streams alone)."""
        notifications = (call.params or {}).get("notifications")
        uris = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
        uris = [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []
        held: list[Subscriptions] = []
        for uri in uris:
            try:
                found = await owner(call, uri)
            except RpcError as exc:  # no credential for the server that has it
                log.info("resource subscription %s: %s", uri, exc.message)
                continue
            if found is None:
                log.warning("resource subscription %s: no single server lists it", uri)
                continue
            subscriptions, as_caller = found
            try:
                await subscriptions.hold(uri, id(call), as_caller)
                held.append(subscriptions)
            except Exception as exc:  # the stream is still served; updates may just not come
                log.warning("resource subscription %s failed: %s", uri, exc)
        try:
            await self.listeners.serve(call, caller)
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    for subscriptions in dict.fromkeys(held):
                        await asyncio.shield(subscriptions.release_all(id(call)))


def _nobody_asked(method: str) -> dict[str, Any]:
    """A server's request no client can answer (a server asking as it starts, before any client;
    no call of the caller it asked for in flight; the gateway's own session of a server with
    credentials): `roots/list` gets no roots (the gateway offers none of its own: an empty list
    never widens what a server may touch, where an error makes servers log a failure at every
    clean start); anything else an error, never a guess."""
    if method == "roots/list":
        return {"roots": []}
    raise RpcError(INVALID_REQUEST, f"gateway: {method} not routed: no client call is in "
                   "flight (over HTTP the gateway cannot tell which client it is for)")
