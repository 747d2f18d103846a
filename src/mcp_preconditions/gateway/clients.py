"""Who the gateway serves: a client's connection (`Client`: the stdio client, or one 2025-11-25 HTTP
session), one request of a client (`Call`), where messages to them go (`Sink`: the stdio pipe, a
request's own stream, a session's GET stream), and the requests a connection has running
(`Connection`). Writes never wait: a sink buffers or drops.

`Connection` is the same on the stdio listener and in a 2025-11-25 HTTP session: its requests being
served, by id ("7" and 7 are one id, as the MCP SDKs correlate them), a `notifications/cancelled`
interrupting one (never `initialize`), the client's answers to the gateway's own requests, its other
notifications handed on, and everything cancelled when it goes. What a cancelled request's
transport writes (nothing on stdio, the end of its stream over HTTP) is the transport's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

from . import errors, jsonrpc
from .errors import PeerFailed
from .jsonrpc import CONNECTION_CLOSED, INVALID_REQUEST, Message, RequestId, RpcError

LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert",
                           "emergency")  # least severe first (the spec's LoggingLevel)


class Sink(Protocol):
    """Somewhere messages to a client can be written, in order, without waiting."""

    def push(self, message: Message) -> None:
        """Write (or buffer) one message; dropped when the sink has closed."""
        ...

    @property
    def open(self) -> bool: ...


@runtime_checkable
class Pollable(Protocol):
    """A sink that can be closed before its answer, for the client to resume it (SEP-1699): a
    2025-11-25 session's reply to a POST (`downstream/sse.py`'s `Reply`)."""

    def poll(self, retry: float) -> None: ...


class Client:
    """One client connection that outlives its requests: the stdio client (either protocol
    version) or a 2025-11-25 HTTP session. `standalone` is where messages outside any request go
    (the stdio pipe; an HTTP session's GET stream while one is open)."""

    def __init__(self, standalone: Sink | None, *, http: bool) -> None:
        self.standalone = standalone
        self.http = http
        self.version = LATEST_HANDSHAKE_VERSION  # until `initialize` negotiates one
        self.params: dict[str, Any] | None = None  # the client's `initialize` params
        self.initialized = False
        self.modern = False  # a stdio connection whose first request carried the 2026 envelope
        self.level: str | None = None  # what `logging/setLevel` asked for
        # Whose connection it is, once a request of it went to a server as its caller (SPEC §14):
        # what servers send that caller reaches it (callers.py).
        self.owner: Hashable | None = None
        self.closed = False
        self.on_close: list[Callable[[], None]] = []
        self._asked: dict[RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = (self.params or {}).get("capabilities")
        return caps if isinstance(caps, dict) else {}

    async def ask(self, method: str, params: dict[str, Any] | None, timeout: float, sink: Sink
                  ) -> dict[str, Any]:
        """Send the client a request on `sink` (a request's stream, or the standalone one) and
        wait for its answer, which comes back through `answered`."""
        if self.closed or not sink.open:
            raise PeerFailed(CONNECTION_CLOSED, "Connection closed")
        self._next += 1
        rid = self._next
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._asked[rid] = future
        try:
            sink.push(jsonrpc.request(rid, method, params))
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            sink.push(jsonrpc.notification("notifications/cancelled",
                                           {"requestId": rid, "reason": f"timed out after {timeout}s"}))
            raise PeerFailed(jsonrpc.REQUEST_TIMEOUT, f"Request {method!r} timed out") from None
        finally:
            self._asked.pop(rid, None)

    def answered(self, message: Message) -> None:
        """The client's answer to one of the gateway's requests (a late one is dropped)."""
        future = self._asked.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return
        if "result" in message:
            future.set_result(message["result"])
        else:
            future.set_exception(errors.answered(message.get("error")))

    def close(self) -> None:
        """The client has gone: what was put to it fails, and whatever it held is let go."""
        if self.closed:
            return
        self.closed = True
        for future in self._asked.values():
            if not future.done():
                future.set_exception(PeerFailed(CONNECTION_CLOSED, "Connection closed"))
        for hook in self.on_close:
            hook()


@dataclass(eq=False)
class Call:
    """One client request on its way through the gateway."""

    method: str
    params: dict[str, Any] | None
    id: RequestId
    version: str  # the protocol version it was made at
    stream: Sink  # this request's own channel back: its progress, logs and the server's requests
    client: Client | None = None  # None: a 2026-07-28 request over HTTP, which stands alone
    headers: Mapping[str, str] | None = None  # its HTTP request's, by lowercase name (None: stdio)
    closed: bool = False  # answered (or abandoned): nothing more goes on its stream
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def authorization(self) -> str | None:
        """The raw Authorization header (HTTP), for the guard."""
        return self.headers.get("authorization") if self.headers is not None else None

    @property
    def modern(self) -> bool:
        return self.version in MODERN_PROTOCOL_VERSIONS

    @property
    def meta(self) -> dict[str, Any]:
        meta = (self.params or {}).get("_meta")
        return meta if isinstance(meta, dict) else {}

    @property
    def capabilities(self) -> dict[str, Any]:
        """What the client of this request declared it can do: in the request's `_meta` at
        2026-07-28, on its connection at 2025-11-25."""
        if self.modern:
            caps = self.meta.get(CLIENT_CAPABILITIES_META_KEY)
            return caps if isinstance(caps, dict) else {}
        return self.client.capabilities if self.client is not None else {}

    def logs(self, level: str) -> bool:
        """Whether a log message at `level` may go on this request's stream: at 2026-07-28 only
        when the request opted in, at that level or a more severe one."""
        if not self.modern:
            return True
        wanted = self.meta.get(LOG_LEVEL_META_KEY)
        return wanted in LEVELS and LEVELS.index(level) >= LEVELS.index(wanted)

    def notify(self, method: str, params: dict[str, Any] | None) -> None:
        """A notification about this request, on its stream (dropped once it is answered)."""
        if not self.closed:
            self.stream.push(jsonrpc.notification(method, params))

    async def ask(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Put a request to this call's client on this call's stream (2025-11-25 only)."""
        if self.modern or self.client is None:
            raise RpcError(INVALID_REQUEST,
                           f"gateway: {method} cannot reach a 2026-07-28 client during {self.method}")
        if self.closed:
            raise PeerFailed(CONNECTION_CLOSED, "Connection closed")
        return await self.client.ask(method, params, timeout, self.stream)


Answer = Callable[[Call], Awaitable[Message]]
Notified = Callable[[Client, str, dict[str, Any] | None, Mapping[str, str] | None], Awaitable[None]]


def correlated(request_id: RequestId) -> RequestId:
    """The id a cancellation is matched by: a string of digits is that integer."""
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:
            pass
    return request_id


async def answered(call: Call, answer: Answer) -> Message | None:
    """`call`'s answer, worked out in the current task; None when its client cancelled it (it
    marked the call `cancelled` and cancelled the task: the task goes on, cancelled no more)."""
    try:
        return await answer(call)
    except asyncio.CancelledError:
        if not call.extra.get("cancelled"):
            raise
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()
        return None


class Connection:
    """A client's connection and the requests it has running."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._running: dict[RequestId, tuple[asyncio.Task[Any], Call]] = {}

    def start(self, call: Call, run: Coroutine[Any, Any, None]) -> None:
        """Serve a request in a task of its own (`run` calls `serve`), cancellable from the moment
        it is read."""
        self._track(call, asyncio.get_running_loop().create_task(run))

    async def serve(self, call: Call, answer: Answer) -> Message | None:
        """`call`'s answer, worked out in the current task; None when the client cancelled it."""
        task = asyncio.current_task()
        assert task is not None
        key = correlated(call.id)
        if call.method != "initialize" and self._running.get(key, (task, None))[1] is not call:
            self._track(call, task)  # (the handshake is never cancelled)
        try:
            return await answered(call, answer)
        finally:
            self._forget(key, call)

    def _track(self, call: Call, task: asyncio.Task[Any]) -> None:
        key = correlated(call.id)
        self._running[key] = (task, call)  # a repeated id names the newest (as the SDKs do)
        task.add_done_callback(lambda _: self._forget(key, call))  # even if it never ran

    def _forget(self, key: RequestId, call: Call) -> None:
        call.closed = True  # nothing more goes on its stream
        entry = self._running.get(key)
        if entry is not None and entry[1] is call:
            del self._running[key]

    async def received(self, message: Message, notified: Notified,
                       headers: Mapping[str, str] | None = None) -> None:
        """A client message that is not a request: an answer to one of the gateway's requests, a
        cancellation, or another notification (handed to `notified`)."""
        if "method" not in message:
            self.client.answered(message)
        elif message["method"] == "notifications/cancelled":
            self.cancel(message.get("params"))
        else:
            await notified(self.client, message["method"], message.get("params"), headers)

    def cancel(self, params: Any) -> None:
        """A client's `notifications/cancelled`: the request it names is interrupted."""
        rid = params.get("requestId") if isinstance(params, dict) else None
        entry = self._running.get(correlated(rid)) if jsonrpc.is_id(rid) else None
        if entry is not None and not entry[1].closed:
            task, call = entry
            call.extra["cancelled"] = True
            task.cancel()

    def close(self) -> None:
        """The client has gone (stdin closed, the session ended): what it was asked fails, and
        every request it has running is cancelled."""
        self.client.close()
        for task, call in list(self._running.values()):
            call.extra["cancelled"] = True
            task.cancel()
