"""Where clients reach the gateway: one client on stdio, or streamable HTTP on a socket that is already
bound. The servers' supervisors and the listener run in one task group; when the listener ends,
everything ends. Over HTTP, slow clients are bounded: a connection whose request headers are not
complete in time (or whose body is not) is closed, and open connections are capped; beyond the cap
a few more connections may ask `/healthz` or `/readyz` and nothing else, and the rest are answered
503 and closed as they are accepted (SPEC §10).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from ...decision_sinks import write_held
from ...rebinding import Security
from ...telemetry.metrics import Metrics, RefusalReason
from ..dispatch import Dispatch
from ..gateway import Gateway
from .app import Pages, Receive, Scope, Send, build_app
from .sessions import MAX_SESSIONS, SESSIONS_PER_PRINCIPAL, STREAMS_PER_PRINCIPAL, Sessions
from .stdio import StdioClient
from .wire import text

EXIT_GRACE_SECONDS = 3.0
Task = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Limits:
    """What HTTP clients may hold: a request's headers complete within `header_seconds` (and then
    its body within as long again); at most `connections` connections, and as many requests under
    way, at once (beyond that HEALTH_RESERVE more connections may ask `/healthz` or `/readyz`, and
    anything else gets 503 and is closed); at most `sessions` 2025-11-25 sessions, and per principal
    at most `sessions_per_principal` of them and `streams_per_principal` long-lived streams (GET,
    `subscriptions/listen`)."""

    header_seconds: float = 10.0
    connections: int = 1000
    sessions: int = MAX_SESSIONS
    sessions_per_principal: int = SESSIONS_PER_PRINCIPAL
    streams_per_principal: int = STREAMS_PER_PRINCIPAL


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
                     *also: Task, limits: Limits = Limits(), metrics: Metrics | None = None,
                     pages: Pages | None = None) -> None:
    """Serve streamable HTTP on `sock` until cancelled; `also` as for serve_stdio; `metrics` at
    `/metrics` and `pages` at their paths on the same listener."""
    _import_uvicorn()
    import uvicorn

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    sessions = Sessions(limit=limits.sessions, per_principal=limits.sessions_per_principal,
                        streams_per_principal=limits.streams_per_principal)
    app: Any = build_app(gateway, host, f"http://{shown}:{port}", metrics, sessions, pages)
    if announce is not None:
        print(announce.format(url=f"http://{shown}:{port}/mcp"), file=sys.stderr, flush=True)
    # No `limit_concurrency`: uvicorn's would answer 503 to the health checks too; `_bounded` caps.
    config = uvicorn.Config(app, log_level="warning", lifespan="on", ws="none", interface="asgi3",
                            http=_bounded(limits, refused=gateway.telemetry.refused))
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.run)
        for task in also:
            tg.start_soon(task)
        await uvicorn.Server(config).serve(sockets=[sock])
        tg.cancel_scope.cancel()


def pages_task(pages: Pages, sock: socket.socket, limits: Limits = Limits()) -> Task:
    """A stdio gateway's pages on a listener of their own (`--pages-listen`), for its task group:
    on a loopback address Host and Origin are checked first (DNS rebinding), anything but the
    pages' paths is 404, and slow clients are bounded as on the HTTP listener. Signals stay the
    gateway's (`serve_stdio` watches them)."""
    _import_uvicorn()
    import uvicorn

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

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", interface="asgi3",
                            http=_bounded(limits))

    async def serve() -> None:
        await Quiet(config).serve(sockets=[sock])
    return serve


def _import_uvicorn() -> None:
    """Import uvicorn without the file watcher of its `--reload`, which the gateway never uses:
    watchfiles, when installed, adds 0.8 MB of RSS. While uvicorn is first imported an import of
    watchfiles fails, so uvicorn settles on its stat-based reloader; later imports see it again."""
    if "uvicorn" in sys.modules or "watchfiles" in sys.modules:
        return
    sys.modules["watchfiles"] = None  # type: ignore[assignment]  # (the import system's "absent")
    try:
        import uvicorn  # noqa: F401
    finally:
        del sys.modules["watchfiles"]


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
# Connections beyond the cap that may still ask for a health check (a load balancer's probe, an
# operator's curl); beyond these, a connection is refused as it is accepted (no fd held for long).
HEALTH_RESERVE = 8
# The request line such a connection may send, and how much is read to find it.
_HEALTH_LINE = re.compile(rb"(?:GET|HEAD) /(?:healthz|readyz)(?:\?[!-~]*)? HTTP/1\.[01]\r\n")
_LINE_BYTES = 256
_CLOSE = b"connection: close\r\n"
_HEADERS, _BODY = "headers", "body"


def _health_check(start: bytes) -> bool | None:
    """Whether a request starting with these bytes asks `/healthz` or `/readyz`; None while its
    request line is not complete yet."""
    end = start.find(b"\r\n")
    if end < 0:
        return None if len(start) < _LINE_BYTES else False
    return _HEALTH_LINE.match(start, 0, end + 2) is not None


class _Coalescing:
    """A transport that sends a response's head with what follows it in the same step of the loop:
    uvicorn writes the head, then the body, each with a send of its own (two system calls, and two
    packets for the client to wake up to, on every answer). A write is held until the next write
    (sent together, at once) or the loop's next step, whichever comes first; closing sends it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if not data:  # h11's end of a body of known length
            return
        write_held()  # the decision records made so far go out before any answer does
        if self._held is None:
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            data, self._held = self._held + data, None
            self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _bounded(limits: Limits, base: Any = None,
             refused: Callable[[RefusalReason], None] = lambda _reason: None
             ) -> type[asyncio.Protocol]:
    """uvicorn's protocol (`base`, default `_protocol()`), plus the bounds it lacks: it times out
    only idle keep-alive connections, so a client that sends half its headers, or trickles its
    body, held a connection forever; and its own cap (`limit_concurrency`) answers 503 to every
    request once reached, health checks included. Here each request's headers, then its body, must
    arrive within `header_seconds` each. `connections` connections are admitted; HEALTH_RESERVE
    more may send one `/healthz` or `/readyz` request (then they are closed), and so may a request
    that starts while `connections` requests are under way; anything else over the cap is answered
    503 and closed, and counted (`refused("over_cap")`). This relies on uvicorn's internals
    (`tasks`, `cycle`, `cycle.more_body`, `cycle.response_complete`, `on_response_complete`,
    `transport`, `loop`): pyproject pins the uvicorn versions it was
    checked against, and tests/unit/test_gateway_listener.py fails if they change."""
    base = base if base is not None else _protocol()
    admitted: set[asyncio.Protocol] = set()
    reserve: set[asyncio.Protocol] = set()

    class Bounded(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None
        _armed_for: str | None = None
        _fresh = True  # the next bytes start a request
        _gate: bytes | None = None  # the start of a request over the cap, until it is judged
        _last = False  # its one request over the cap is let through: nothing more is read

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(_Coalescing(transport, self.loop))
            if len(admitted) < limits.connections:
                admitted.add(self)
            elif len(reserve) < HEALTH_RESERVE:
                reserve.add(self)
            else:  # over the cap and the reserve: no fd held for long
                self._refuse()
                return
            self._arm(_HEADERS)

        def data_received(self, data: bytes) -> None:
            if self._last:
                return
            if self._fresh:
                self._fresh = False
                if self in reserve or len(self.tasks) >= limits.connections:
                    self._gate = b""
            if self._gate is not None:
                self._gate += data
                verdict = _health_check(self._gate)
                if verdict is None:
                    if self._deadline is None:
                        self._arm(_HEADERS)  # its request line has begun: it has its time
                    return
                if not verdict:
                    self._refuse()
                    return
                # Handled as if its client had asked to close (`connection: close` after its
                # request line): its answer says so, with every uvicorn and either parser, and a
                # client with a pool does not send its next request on a connection about to close
                # (it would read a reset, not an answer).
                line = self._gate.index(b"\r\n") + 2
                data = self._gate[:line] + _CLOSE + self._gate[line:]
                self._gate, self._last = None, True
            super().data_received(data)
            # The next request on a kept-alive connection starts with these bytes: armed only if
            # it is not whole yet (a request in one packet costs no timer).
            stage = self._stage()
            if stage is None:
                self._disarm()  # the whole request is in: it is under way
            elif stage != self._armed_for:
                self._arm(stage)  # what is missing (its headers, or its body) has its time

        def on_response_complete(self) -> None:
            if self._last:  # its one health check is answered: the slot is freed at once
                self.transport.close()
            self._fresh = True
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            admitted.discard(self)
            reserve.discard(self)
            self._disarm()
            super().connection_lost(exc)

        def _refuse(self) -> None:
            refused("over_cap")
            self.transport.write(OVER_CAPACITY)
            self.transport.close()

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
