"""Where clients reach the gateway: one client on stdio, or streamable HTTP on a socket that is already
bound. The servers' supervisors and the listener run in one task group; when the listener ends,
everything ends. Over HTTP, slow clients are bounded: a connection whose request headers are not
complete in time (or whose body is not) is closed, and open connections are capped: one beyond the
cap is answered 503 and closed as it is accepted (SPEC §10).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio

from ...telemetry.metrics import Metrics
from ..dispatch import Dispatch
from ..gateway import Gateway
from .app import build_app
from .stdio import StdioClient

EXIT_GRACE_SECONDS = 3.0
Task = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Limits:
    """What one HTTP client may hold: request headers complete within `header_seconds` (and then
    its body within as long again), and at most `connections` connections (plus requests in
    progress) open at once; beyond that a new one gets 503 and is closed at once."""

    header_seconds: float = 10.0
    connections: int = 1000


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
                     *also: Task, limits: Limits = Limits(), metrics: Metrics | None = None) -> None:
    """Serve streamable HTTP on `sock` until cancelled; `also` as for serve_stdio; `metrics` at
    `/metrics` on the same listener."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    app: Any = build_app(gateway, host, f"http://{shown}:{port}", metrics)
    if announce is not None:
        print(announce.format(url=f"http://{shown}:{port}/mcp"), file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", http=_bounded(limits), ws="none",
                            interface="asgi3",
                            limit_concurrency=limits.connections)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.run)
        for task in also:
            tg.start_soon(task)
        await uvicorn.Server(config).serve(sockets=[sock])
        tg.cancel_scope.cancel()


def _protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol: on httptools when it is installed (0.1 ms a call less than
    h11's, docs/gateway-performance.md), else on h11."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools comes with the mcp extra
        from uvicorn.protocols.http.h11_impl import H11Protocol
        return H11Protocol
    return HttpToolsProtocol


# What a connection beyond the cap reads before it is closed: uvicorn's own 503 (flow_control.py).
OVER_CAPACITY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                 b"content-length: 19\r\nconnection: close\r\n\r\nService Unavailable")
_HEADERS, _BODY = "headers", "body"


def _bounded(limits: Limits, base: Any = None) -> type[asyncio.Protocol]:
    """uvicorn's protocol (`base`, default `_protocol()`), plus the bounds it lacks: it times out
    only idle keep-alive connections, so a client that sends half its headers, or trickles its
    body, held a connection forever; and it accepts every connection, answering 503 only once a
    request's headers are in. Here each request's headers, then its body, must arrive within
    `header_seconds` each, and a connection beyond `connections` is answered 503 and closed as
    it is accepted. This relies on uvicorn's internals (`connections`, `cycle`, `cycle.more_body`,
    `cycle.response_complete`, `transport`, `loop`): pyproject pins the uvicorn versions it was
    checked against, and tests/unit/test_gateway_listener.py fails if they change."""
    base = base if base is not None else _protocol()

    class Bounded(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None
        _armed_for: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.connections:  # over the cap: no fd held for long
                transport.write(OVER_CAPACITY)
                transport.close()
                return
            self._arm(_HEADERS)

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self._stage() == _HEADERS:
                self._arm(_HEADERS)  # the next request on a kept-alive connection starts now
            super().data_received(data)
            stage = self._stage()
            if stage is None:
                self._disarm()  # the whole request is in: it is under way
            elif stage != self._armed_for:
                self._arm(stage)  # its headers are in: its body has its own time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _stage(self) -> str | None:
            """What the connection waits for from its client: a request's headers, its body, or
            nothing (a request is under way)."""
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                return _HEADERS
            return _BODY if cycle.more_body else None

        def _arm(self, stage: str) -> None:
            self._disarm()
            self._armed_for = stage
            self._deadline = self.loop.call_later(limits.header_seconds, self._late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self._armed_for = None

        def _late(self) -> None:
            self._deadline = self._armed_for = None
            if self._stage() is not None and not self.transport.is_closing():
                self.transport.close()

    return Bounded
