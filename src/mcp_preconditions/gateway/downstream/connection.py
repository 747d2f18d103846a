"""One client connection, the same on the stdio listener and in a 2025-11-25 HTTP session: its
requests being served, by id ("7" and 7 are one id, as the MCP SDKs correlate them), a
`notifications/cancelled` interrupting one (never `initialize`), the client's answers to the
gateway's own requests, its other notifications handed on, and everything cancelled when it goes.
What a cancelled request's transport writes (nothing on stdio, the end of its stream over HTTP)
is the transport's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from .. import jsonrpc
from ..clients import Call, Client
from ..jsonrpc import Message, RequestId

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
