"""Running a gateway: the upstream's supervisor and one listener (stdio, or streamable HTTP on a
socket that is already bound) in one task group; when the listener ends, everything ends.
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
from mcp.server.stdio import stdio_server

from .http import build_app
from .server import Gateway

EXIT_GRACE_SECONDS = 3.0


async def serve_stdio(gateway: Gateway, *also: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Serve one client on this process's stdin/stdout until it closes them; `also` are tasks that
    live as long as the listener (the policy poller)."""
    work = anyio.CancelScope()
    async with anyio.create_task_group() as outer:
        # Signals are watched until the upstream has stopped, not only while the client is there:
        # a client that closes stdin and then sends SIGTERM (the MCP Inspector does, 2 s later)
        # would otherwise kill the gateway in the middle of the upstream's shutdown, orphaning it.
        outer.start_soon(_stop_on_signals, work)
        with work:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gateway.upstream.run)
                for task in also:
                    tg.start_soon(task)
                async with stdio_server() as (read, write):
                    await gateway.server.run(read, write, gateway.server.create_initialization_options())
                tg.cancel_scope.cancel()
        outer.cancel_scope.cancel()


async def _stop_on_signals(scope: anyio.CancelScope) -> None:
    """SIGTERM or SIGHUP (a desktop client closing us) ends the gateway through its task group, so
    the upstream's process group is terminated too: the SDK's stdio client starts it in a session
    of its own, which a killed gateway would leave running. Later signals change nothing: the
    gateway is already on its way out."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if scope.cancel_called:
                continue
            # The stdin reader blocks in a thread that no cancellation reaches: exit for certain
            # once the upstream had its time to stop (the SDK waits 2 s, then kills its group).
            threading.Timer(EXIT_GRACE_SECONDS, os._exit, (128 + signum,)).start()
            scope.cancel()


async def serve_http(gateway: Gateway, sock: socket.socket, announce: str | None = None,
                     *also: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Serve streamable HTTP on `sock` until cancelled; `also` as for serve_stdio."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    app: Any = build_app(gateway, host, f"http://{shown}:{port}")
    if announce is not None:
        print(announce.format(url=f"http://{shown}:{port}/mcp"), file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.upstream.run)
        for task in also:
            tg.start_soon(task)
        await uvicorn.Server(config).serve(sockets=[sock])
        tg.cancel_scope.cancel()
