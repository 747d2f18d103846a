"""The gateway's session to one server it guards: a stdio command that it starts, watches and
restarts with backoff, or a streamable-HTTP URL. The handshake era (2025-11-25) is asked for first,
2026-07-28 (`server/discover`, listen streams) when a server refuses it. Results come back as the
dicts the server sent. What the server does costs it alone: concurrent pings share one answer, the
gateway's notifications to it go out in the background (bounded), and work it asks for again and
again (re-listing after `list_changed`) runs at most once at a time with one more pending.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION

from ...telemetry.gateway import GatewayTelemetry
from ...toolset import every_page
from ..errors import UpstreamError, UpstreamRefused, UpstreamUnavailable
from ..jsonrpc import RequestId, RpcError
from .caller_sessions import CallerSessions, Sender
from .client import DEFAULT_BOUNDS, Bounds
from .connected import Connected, connect
from .handshake import CLIENT_CAPABILITIES, CLIENT_INFO, Link, closed
from .http import HttpLink
from .peer import (
    Dropped,
    NotificationHook,
    OriginHooks,
    OwnerHooks,
    Peer,
    ProgressHook,
    RequestHook,
    describe,
    ignored,
    ignored_now,
    nobody_answers,
)
from .stdio import StdioLink
from .targets import HttpTarget, StdioTarget, Target

log = logging.getLogger("mcp_preconditions.gateway")

BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
# How long the first listing of a server waits for the stream its change notifications will come
# on: a 2026-07-28 listen stream's acknowledgement, a 2025-11-25 HTTP session's GET stream answered.
# A server that never gives one is listed anyway.
LISTEN_ACK_SECONDS = 10.0
MAX_NOTIFYING = 16  # the gateway's notifications to one server under way at once; more are dropped

__all__ = ["HttpTarget", "StdioTarget", "Target", "Upstream", "UpstreamUnavailable"]


class Upstream:
    """One supervised session to the upstream, shared by every downstream client.

    `run()` keeps it connected: it connects, and when the stdio process exits (or an HTTP session
    is lost) it reconnects after a backoff that doubles up to 5 s. `request()` forwards one request
    and returns the raw result; with no live session it raises UpstreamUnavailable at once, and a
    request in flight when the process exits fails as soon as the exit is seen.
    """

    def __init__(self, target: Target, *, key: str = "upstream", errlog: TextIO = sys.stderr,
                 connect_timeout: Callable[[], float] | None = None,
                 telemetry: GatewayTelemetry | None = None,
                 bounds: Callable[[], Bounds] | None = None) -> None:
        self.target = target
        self.telemetry = telemetry if telemetry is not None else GatewayTelemetry()
        self.key = key  # the server's name in the gateway's config: all a caller is ever told
        self.label = f"{key} ({target.label})"  # for the gateway's own log
        # How long the handshake may take (None: forever). A server that never answers it is
        # dropped and started again with backoff, like one that exits.
        self._connect_timeout = connect_timeout
        self._bounds = bounds  # what an HTTP server's responses may hold (read at each connection)
        # Set by the gateway that serves this upstream's clients: what the server sends on the
        # gateway's own session, and what it sends for one caller (on their session, or on their
        # request's stream), with whose it is.
        self.on_request: RequestHook = nobody_answers
        self.on_notification: NotificationHook = ignored
        self.on_caller_request: Callable[[Hashable, str, dict[str, Any]],
                                         Awaitable[dict[str, Any]]] = nobody_answers
        self.on_caller_notification: Callable[[Hashable, str, dict[str, Any]], None] = ignored
        self.on_connect: Callable[[], Awaitable[None]] = ignored_now
        # What comes on one request's own stream, for whoever the request was made for (its
        # `origin`, given with the request: a client's call).
        self.for_origin = OriginHooks(nobody_answers, ignored)
        self._for_owner = OwnerHooks(lambda o, m, p: self.on_caller_request(o, m, p),
                                     lambda o, m, p: self.on_caller_notification(o, m, p),
                                     OriginHooks(lambda o, m, p: self.for_origin.request(o, m, p),
                                                 lambda o, r: self.for_origin.polled(o, r)))
        self._errlog = errlog
        self.current: Connected | None = None
        self.changed = anyio.Event()  # set (and replaced) whenever a session comes or goes
        self.attempts = 0
        self.last_error: str | None = None
        self.refused_credential = False  # the last attempt got a 401/403: a person's account helps
        self._background: TaskGroup | None = None
        self._listens = 0
        self._pinging: asyncio.Task[bool] | None = None
        self._notifying = 0
        self._once: dict[str, bool] = {}  # work running by key -> asked for again meanwhile

    # -- supervision -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, and reconnect with backoff whenever the session is lost; runs until cancelled.
        Requests that outlive the client request that started them (`spawn`) run here too."""
        async with anyio.create_task_group() as background:
            self._background = background
            try:
                await self._supervise()
            finally:
                self._background = None

    def spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `task` for as long as the gateway runs (it must end by itself)."""
        if self._background is None:
            raise UpstreamUnavailable("the gateway is not running")
        self._background.start_soon(task)

    def spawn_once(self, key: str, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `task` unless work of `key` is running: then that work runs once more when it ends.
        However often it is asked for, at most one run is in flight and one pending, and no task
        is made per request (a server sending `list_changed` in a loop costs one re-list at a time)."""
        if key in self._once:
            self._once[key] = True
            return
        self._once[key] = False
        self.spawn(lambda: self._run_once(key, task))

    async def _run_once(self, key: str, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            while True:
                self._once[key] = False
                try:
                    await task()
                except Exception as exc:  # the next request runs it again; the gateway goes on
                    log.warning("upstream %s: %s failed: %s", self.label, key, describe(exc))
                if not self._once[key]:
                    return
        finally:
            del self._once[key]

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            self.attempts += 1
            if self.attempts > 1:
                self.telemetry.restarting(self.key)
            try:
                connected = await self._connect()
                delay = BACKOFF_FIRST
                await self._serve(connected)
            except Exception as exc:  # whatever the upstream or its transport does: retry later
                self.refused_credential = isinstance(exc, UpstreamRefused) and exc.status in (401, 403)
                error = describe(exc)
                if error != self.last_error:  # once per failure, not once per retry
                    log.warning("upstream %s: %s (retrying with backoff)", self.label, error)
                self.last_error = error
            await anyio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def _serve(self, connected: Connected) -> None:
        self.current = connected
        self.last_error, self.refused_credential = None, False
        self.telemetry.connected(self.key, True)
        self._signal()
        failed: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                try:
                    if connected.protocol_version == LATEST_MODERN_VERSION:
                        await self._listening(tg, connected)
                    if isinstance(connected.link, HttpLink) and not connected.link.modern:
                        await self._get_stream(connected.link)
                    await self.on_connect()
                    if connected.callers is not None:
                        tg.start_soon(connected.callers.run)
                    await connected.lost.wait()
                except Exception as exc:  # raised below as itself, not inside the task group's
                    failed = exc
                finally:
                    connected.peer.closed = True  # the session is over: nothing more is sent on it
                    tg.cancel_scope.cancel()
            if failed is not None:
                raise failed
            log.warning("upstream %s: session lost; reconnecting", self.label)
        finally:
            self.current = None
            self.telemetry.connected(self.key, False)
            self._signal()
            if connected.callers is not None:  # a server that ended ours ended theirs too, likely
                await connected.callers.close()
            await closed(connected.peer, connected.link)

    def _signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_connected(self, timeout: float) -> Connected | None:
        """The live session, waiting up to `timeout` seconds for one."""
        with anyio.move_on_after(timeout):
            while self.current is None:
                await self.changed.wait()
        return self.current

    # -- the handshake ---------------------------------------------------------------------------
    async def _connect(self) -> Connected:
        timeout = self._connect_timeout() if self._connect_timeout is not None else None
        return await connect(self._open, timeout, lambda link: CallerSessions(
            link.url, self.label, self._for_owner, link.bounds, dropped=self._dropped))

    async def _open(self, modern: bool) -> tuple[Peer, Link]:
        envelope = {PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
                    CLIENT_INFO_META_KEY: CLIENT_INFO,
                    CLIENT_CAPABILITIES_META_KEY: CLIENT_CAPABILITIES} if modern else None
        holder: list[Peer] = []

        def received(message: Any, via: RequestId | None = None) -> None:
            holder[0].received(message, via)

        target = self.target
        bounds = self._bounds() if self._bounds is not None else DEFAULT_BOUNDS
        link: Link
        if isinstance(target, StdioTarget):  # a line is one whole message: bounded like a body
            link = await StdioLink.start(target.command, target.args, dict(target.env), received,
                                         self.label, self._errlog, bounds.body)
        else:
            link = HttpLink(target.url, target.headers, received, self.label, bounds,
                            refused=target.refused)
            link.modern = modern
            link.dropped = self._dropped
        peer = Peer(link, self.label, self._answer, self._notified, envelope,
                    for_owner=self._for_owner)
        peer.dropped = self._dropped
        holder.append(peer)
        return peer, link

    async def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.on_request(method, params)

    def _notified(self, method: str, params: dict[str, Any]) -> None:
        self.on_notification(method, params)

    def _dropped(self, reason: Dropped) -> None:
        """An answer the server sent that no request here waits for (peer.py): counted."""
        self.telemetry.dropped(self.key, reason)

    async def _listening(self, tg: TaskGroup, connected: Connected) -> None:
        """Open the listen stream, and wait until the server acknowledges it (or refuses it, or
        LISTEN_ACK_SECONDS pass) before the first listing: a listen stream replays nothing, so a
        change the server makes between a listing and the acknowledgement would go unheard, and
        the gateway would show a stale list until the server's next change."""
        settled = anyio.Event()
        tg.start_soon(self._listen_for_changes, connected, settled.set)
        with anyio.move_on_after(LISTEN_ACK_SECONDS):
            await settled.wait()

    async def _get_stream(self, link: HttpLink) -> None:
        """Open a 2025-11-25 HTTP session's GET stream, and wait until the server has answered it
        (its event stream begun, or a refusal: the session goes on without one, as before) or
        LISTEN_ACK_SECONDS pass, before the first listing: what a server sends outside any request
        goes to that stream alone, and one not yet open has nowhere to send it, so a change made
        between a listing and the stream's opening would go unheard."""
        answered = anyio.Event()
        link.listen(answered.set)
        with anyio.move_on_after(LISTEN_ACK_SECONDS):
            await answered.wait()

    async def _listen_for_changes(self, connected: Connected, settled: Callable[[], None]) -> None:
        """At 2026-07-28 an upstream's change notifications ride a listen stream only: keep one
        open (its events reach `on_notification` like any other notification); `settled` once it
        is acknowledged or has failed."""
        try:
            await self.listen({"toolsListChanged": True, "promptsListChanged": True,
                               "resourcesListChanged": True}, settled)
        except Exception as exc:  # the session goes on; changes are just not heard
            log.warning("upstream %s: no change notifications: %s", self.label, describe(exc))
        finally:
            settled()

    async def listen(self, notifications: dict[str, Any], acknowledged: Callable[[], None],
                     caller: Sender | None = None) -> None:
        """Hold a `subscriptions/listen` stream open until cancelled (or the session ends);
        `acknowledged` is called when the server confirms it. As `caller` (their credential;
        what the stream carries is theirs alone), or the gateway's own."""
        connected = self.current
        if connected is None:
            raise UpstreamUnavailable(self.last_error or "not connected")
        self._listens += 1
        rid = f"listen-{self._listens}"
        connected.peer.acks[rid] = acknowledged
        try:
            await connected.peer.request(
                "subscriptions/listen", {"notifications": notifications}, timeout=None,
                request_id=rid, headers=caller.headers() if caller is not None else None,
                owner=caller.owner if caller is not None else None)
        finally:
            connected.peer.acks.pop(rid, None)

    # -- requests to the upstream ----------------------------------------------------------------
    async def request(self, method: str, params: Mapping[str, Any] | None, *, timeout: float,
                      on_progress: ProgressHook | None = None, origin: object | None = None
                      ) -> dict[str, Any]:
        """Forward one request; the upstream's raw result. Raises RpcError (the upstream's own
        error) or UpstreamError (unavailable, a timeout, a protocol error, a closed connection: it
        fails this request; whether the session is lost is the link's to say). `origin`: whom it
        is made for (`for_origin` gets what the server asks on its stream)."""
        connected = self.current
        if connected is None:
            raise UpstreamUnavailable(self.last_error or "not connected")
        return await connected.peer.request(method, params, timeout=timeout,
                                            on_progress=on_progress, origin=origin)

    def request_as(self, caller: Sender, method: str, params: Mapping[str, Any] | None, *,
                   timeout: float, on_progress: ProgressHook | None = None,
                   origin: object | None = None) -> Awaitable[dict[str, Any]]:
        """`request`, made as `caller`, with their credential and none of the static headers: on
        their own session at 2025-11-25, at 2026-07-28 (no sessions) on the gateway's
        connections. Not a coroutine of its own: the awaitable of the request itself (one layer
        fewer on every call with a credential); what fails at once raises at once."""
        connected = self.current
        if connected is None:
            raise UpstreamUnavailable(self.last_error or "not connected")
        if connected.callers is not None:
            return connected.callers.request(caller, method, params, timeout=timeout,
                                             on_progress=on_progress, origin=origin)
        if not isinstance(connected.link, HttpLink):  # (the config refuses credentials on stdio)
            raise UpstreamError("a stdio server takes no per-caller credentials")
        return connected.peer.request(method, params, timeout=timeout, on_progress=on_progress,
                                      headers=caller.headers(), owner=caller.owner,
                                      origin=origin)

    def keep(self, owner: Hashable, kept: bool) -> None:
        """`owner`'s session holds subscriptions of theirs, or no longer (`CallerSessions.keep`;
        at 2026-07-28 there are no sessions: their listen streams are the subscriptions)."""
        connected = self.current
        if connected is not None and connected.callers is not None:
            connected.callers.keep(owner, kept)

    @property
    def modern(self) -> bool:
        """Whether the live session speaks 2026-07-28 (the upstream refused the handshake era)."""
        connected = self.current
        return connected is not None and connected.protocol_version == LATEST_MODERN_VERSION

    async def reachable(self, timeout: float) -> bool:
        """Whether the upstream answers a ping now (a 2026-07-28-only upstream: whether a session
        is up). Concurrent callers (health checks) share one ping."""
        connected = self.current
        if connected is None:
            return False
        if connected.protocol_version == LATEST_MODERN_VERSION:
            return True  # no ping at that version; the session's requests tell
        if self._pinging is None:
            self._pinging = asyncio.get_running_loop().create_task(self._ping(timeout))
            self._pinging.add_done_callback(self._pinged)
        return await asyncio.shield(self._pinging)

    async def _ping(self, timeout: float) -> bool:
        try:
            await self.request("ping", None, timeout=timeout)
        except (RpcError, UpstreamError):
            return False
        return True

    def _pinged(self, _task: asyncio.Task[bool]) -> None:
        self._pinging = None

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Pass a client notification on (roots list_changed), in the background: nobody waits
        for a server to accept it. Dropped when down, or while MAX_NOTIFYING are under way."""
        connected = self.current
        if connected is None or self._background is None:
            return
        if self._notifying >= MAX_NOTIFYING:
            log.warning("upstream %s: %s dropped: %d notifications to it under way", self.label,
                        method, self._notifying)
            return
        self._notifying += 1

        async def send() -> None:
            try:
                await connected.peer.notify(method, params)
            finally:
                self._notifying -= 1
        self._background.start_soon(send)

    async def list_all(self, method: str, field: str, timeout: float) -> list[dict[str, Any]]:
        """Every item of a listing (`tools/list` -> `tools`, ...), all pages, as raw dicts
        (`toolset.every_page`: ListingError for a listing that cannot be read whole)."""
        return await every_page(
            lambda cursor: self.request(method, {"cursor": cursor} if cursor else None,
                                        timeout=timeout), method, field)
