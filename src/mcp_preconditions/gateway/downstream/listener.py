"""Where clients reach the gateway: one client on stdio, or streamable HTTP on a socket that is already
bound. The servers' supervisors and the listener run in one task group; when the listener ends,
everything ends. Over HTTP the server is the project's own (`http_server.py`: llhttp parses, and
`admission.py` bounds who holds a connection and for how long, SPEC §10 and §14).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from ...rebinding import Security
from ...telemetry.metrics import Metrics
from ..dispatch import Dispatch
from ..gateway import Gateway
from .admission import DEFAULT_LIMITS, HEALTH_RESERVE, Limits
from .app import Pages, Receive, Scope, Send, build_app
from .exchange import text
from .http_server import HttpServer
from .sessions import Sessions
from .stdio import StdioClient

EXIT_GRACE_SECONDS = 3.0
Task = Callable[[], Coroutine[Any, Any, None]]


async def serve_stdio(gateway: Gateway, *also: Task) -> int:
    """Serve one client on this process's stdin/stdout until it closes them; `also` are tasks that
    live as long as the listener (the policy poller). The exit status: 128 + the signal that
    stopped it, else 0."""
    work = anyio.CancelScope()
    stopped_by: list[int] = []
    async with anyio.create_task_group() as outer:
        # Signals are watched until the servers have stopped, not only while the client is there:
        # a client that closes stdin and then sends SIGTERM (the MCP Inspector does, 2 s later)
        # would otherwise kill the gateway in the middle of the servers' shutdown, orphaning them.
        outer.start_soon(_stop_on_signals, work, stopped_by)
        with work:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gateway.run)
                for task in also:
                    tg.start_soon(task)
                await StdioClient(Dispatch(gateway)).serve()
                tg.cancel_scope.cancel()
        outer.cancel_scope.cancel()
    return 128 + stopped_by[0] if stopped_by else 0


async def _stop_on_signals(scope: anyio.CancelScope, stopped_by: list[int]) -> None:
    """SIGTERM or SIGHUP (a desktop client closing us) ends the gateway through its task group, so
    the servers' process groups are terminated too: each runs in a session of its own, which a
    killed gateway would leave running. Later signals change nothing."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if scope.cancel_called:
                continue
            stopped_by.append(signum)
            # Exit for certain once the servers had their time to stop (2 s, then killed).
            threading.Timer(EXIT_GRACE_SECONDS, os._exit, (128 + signum,)).start()
            scope.cancel()


async def serve_http(gateway: Gateway, sock: socket.socket, announce: str | None = None,
                     *also: Task, limits: Limits = DEFAULT_LIMITS, metrics: Metrics | None = None,
                     pages: Pages | None = None) -> None:
    """Serve streamable HTTP on `sock` until SIGTERM or SIGINT (then the requests under way are
    answered first, `http_server.DRAIN_SECONDS` at most) or cancelled; `also` as for
    serve_stdio; `metrics` at `/metrics` and `pages` at their paths on the same listener."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    sessions = Sessions(limit=limits.sessions, per_principal=limits.sessions_per_principal,
                        streams_per_principal=limits.streams_per_principal,
                        poll_seconds=limits.poll_seconds)
    app = build_app(gateway, host, f"http://{shown}:{port}", metrics, sessions, pages)
    if announce is not None:
        print(announce.format(url=f"http://{shown}:{port}/mcp"), file=sys.stderr, flush=True)
    server = HttpServer(app, sock, limits, refused=gateway.telemetry.refused)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.run)
        for task in also:
            tg.start_soon(task)
        if threading.current_thread() is threading.main_thread():  # (signals reach only it)
            tg.start_soon(_stop_when_told, stop)
        await server.serve(stop)
        tg.cancel_scope.cancel()


async def _stop_when_told(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _signum in signals:
            stop.set()


def pages_task(pages: Pages, sock: socket.socket, limits: Limits = DEFAULT_LIMITS) -> Task:
    """A stdio gateway's pages on a listener of their own (`--pages-listen`), for its task group:
    on a loopback address Host and Origin are checked first (DNS rebinding), anything but the
    pages' paths is 404, and slow clients are bounded as on the HTTP listener. Signals stay the
    gateway's (`serve_stdio` watches them)."""
    security = Security.for_host(sock.getsockname()[0])

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        refused = security.refuse_headers(scope["headers"], hostless=False) if security else None
        if refused is not None:
            await text(send, *refused)
        elif pages.serves(scope["path"]):
            await pages.app(scope, receive, send)
        else:
            await text(send, 404, b"Not Found")

    async def serve() -> None:
        await HttpServer(app, sock, limits, lifespan=False).serve()
    return serve


__all__ = ["EXIT_GRACE_SECONDS", "HEALTH_RESERVE", "Limits", "pages_task", "serve_http",
           "serve_stdio"]
