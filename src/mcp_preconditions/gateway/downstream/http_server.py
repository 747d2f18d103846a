"""The gateway's HTTP/1.1 server: an ASGI app served on a socket that is already bound, with the
app's lifespan around it, connections bounded by `admission.py` and parsed by `http11.py`. Told to
stop, it stops accepting, closes idle connections, gives the requests under way DRAIN_SECONDS to
be answered, then closes the rest (long-lived streams) and ends the lifespan.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from ...telemetry.metrics import RefusalReason
from .admission import DEFAULT_LIMITS, Admission, Limits
from .http11 import Connection, Listener

DRAIN_SECONDS = 5.0
LIFESPAN_SECONDS = 10.0
BACKLOG = 2048
log = logging.getLogger(__name__)


class HttpServer:
    """Serves `app` on `sock` (listening already) until `stop` is set, or until cancelled."""

    def __init__(self, app: Any, sock: socket.socket, limits: Limits = DEFAULT_LIMITS, *,
                 refused: Callable[[RefusalReason], None] = lambda _reason: None,
                 lifespan: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.sock = sock
        self.admission = Admission(limits, refused, clock)
        self.lifespan = lifespan

    async def serve(self, stop: anyio.Event | None = None) -> None:
        loop = asyncio.get_running_loop()
        name = self.sock.getsockname()
        listener = Listener(self.app, self.admission, loop,
                            (str(name[0]), int(name[1])) if isinstance(name, tuple) else None)
        lifespan = Lifespan(self.app) if self.lifespan else None
        if lifespan is not None:
            await lifespan.startup()
        server = await loop.create_server(partial(Connection, listener), sock=self.sock,
                                          backlog=BACKLOG)
        sweeper = loop.create_task(self.admission.keep_time())
        try:
            await (stop.wait() if stop is not None else loop.create_future())
            server.close()
            await _drain(listener)
        finally:
            sweeper.cancel()
            server.close()
            _close_all(listener)
            if lifespan is not None:
                with anyio.CancelScope(shield=True):
                    await lifespan.shutdown()


async def _drain(listener: Listener) -> None:
    """Idle connections close now; the requests under way have DRAIN_SECONDS to be answered."""
    listener.closing = True
    for connection in list(listener.connections):
        connection.shutdown()
    deadline = time.monotonic() + DRAIN_SECONDS
    while listener.connections and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _close_all(listener: Listener) -> None:
    listener.closing = True
    for connection in list(listener.connections):
        connection.abort()
    for task in list(listener.tasks):
        task.cancel()


class Lifespan:
    """The ASGI lifespan protocol for an app that speaks it (the gateway's starts and stops its
    session expiry and keep-alive chores)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._said: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        if not await self._told("lifespan.startup"):
            raise RuntimeError("the HTTP app did not start (its lifespan failed)")

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._told("lifespan.shutdown")
        self._task.cancel()

    async def _told(self, event: str) -> bool:
        """Send `event`; whether the app answered it complete (within LIFESPAN_SECONDS)."""
        done = self._said.setdefault(f"{event}.complete", asyncio.Event())
        await self._events.put({"type": event})
        assert self._task is not None
        waiting = asyncio.ensure_future(done.wait())
        try:
            await asyncio.wait({waiting, self._task}, timeout=LIFESPAN_SECONDS,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        return done.is_set()

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        try:
            await self.app(scope, self._events.get, self._send)
        except Exception:
            log.exception("the HTTP app's lifespan failed")

    async def _send(self, message: dict[str, Any]) -> None:
        self._said.setdefault(message["type"], asyncio.Event()).set()


__all__ = ["DRAIN_SECONDS", "HttpServer", "Lifespan"]
