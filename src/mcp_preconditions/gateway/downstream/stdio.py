"""The gateway's one stdio client: JSON-RPC lines read and written on asyncio pipes over fd 0 and 1
(no thread per line), each request served as it comes (`initialize` before anything after it). The
first request chooses the protocol era, as the MCP SDK's dual-era loop does. Stray writes to fd 1
(a library printing) go to stderr instead of corrupting the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sys
from typing import Any

from .. import jsonrpc
from ..dispatch import Dispatch, envelope, era_refusal, modern
from ..jsonrpc import Message, RpcError
from .clients import Call, Client

log = logging.getLogger("mcp_preconditions.gateway")

MAX_LINE = 64 * 1024 * 1024


class Output:
    """The protocol's stdout: every write goes out in order, at once (a `Sink`)."""

    def __init__(self, transport: asyncio.WriteTransport | None, fd: int) -> None:
        self._transport = transport
        self._fd = fd
        self.closed = False

    @property
    def open(self) -> bool:
        return not self.closed

    def push(self, message: Message) -> None:
        if self.closed:
            return
        data = jsonrpc.dumps(message) + b"\n"
        if self._transport is not None:
            if self._transport.is_closing():
                self.closed = True
                return
            self._transport.write(data)
            return
        try:  # not a pipe (a file): plain writes
            os.write(self._fd, data)
        except OSError:
            self.closed = True


class StdioClient:
    """Serves the client on stdin/stdout until stdin closes."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch
        self.client: Client | None = None
        self._era: bool | None = None  # None until the first request; True: 2026-07-28
        self._running: dict[Any, tuple[asyncio.Task[None], Call]] = {}

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        in_fd, out_fd = _claim(0, os.O_RDONLY), _claim(1, os.O_WRONLY)
        reader = asyncio.StreamReader(limit=MAX_LINE)
        read_pipe = os.fdopen(in_fd, "rb", buffering=0)
        write_pipe = os.fdopen(out_fd, "wb", buffering=0)
        transport: asyncio.WriteTransport | None = None
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_pipe)
        except ValueError:  # stdin is a file: read it on a thread
            loop.run_in_executor(None, _feed, read_pipe, reader, loop)
        with contextlib.suppress(ValueError):
            transport, _ = await loop.connect_write_pipe(asyncio.Protocol, write_pipe)
        output = Output(transport, out_fd)
        self.client = Client(output, http=False)
        try:
            while line := await _line(reader):
                await self._received(line, output)
        finally:
            self.client.close()
            for task, _call in list(self._running.values()):
                task.cancel()
            if transport is not None:
                transport.close()

    async def _received(self, line: bytes, output: Output) -> None:
        try:
            message = jsonrpc.loads(line)
        except ValueError:
            return  # a line that is not JSON: dropped, as the MCP SDK's stdio server does
        what = jsonrpc.kind(message)
        client = self.client
        assert client is not None
        if what in ("response", "error"):
            client.answered(message)
        elif what == "notification":
            if message["method"] == "notifications/cancelled":
                self._cancel(message.get("params"))
            else:
                await self.dispatch.notified(client, message["method"], message.get("params"))
        elif what is None:  # answered when it can be (JSON-RPC 2.0), else dropped
            answer = jsonrpc.invalid_request(message)
            if answer is not None:
                output.push(answer)
        elif what == "request":
            call = self._call(message, output)
            if call is None:
                return
            if call.method == "initialize":  # served before the next line is read
                await self._serve(call, output)
            else:
                task = asyncio.get_running_loop().create_task(self._serve(call, output))
                self._running[call.id] = (task, call)

    def _call(self, message: dict[str, Any], output: Output) -> Call | None:
        method, params = message["method"], message.get("params")
        if self._era is None:
            self._era = method != "initialize" and modern(params)
            assert self.client is not None
            self.client.modern = self._era
        refused = era_refusal(method, params, modern_connection=self._era)
        if refused is None and self._era:
            try:
                version = envelope(message, None)
            except RpcError as exc:
                refused = exc
        if refused is not None:
            output.push(jsonrpc.error(message["id"], refused))
            return None
        if self._era:
            return Call(method, params, message["id"], version, output)
        assert self.client is not None
        return Call(method, params, message["id"], self.client.version, output, self.client)

    async def _serve(self, call: Call, output: Output) -> None:
        try:
            answer = await self.dispatch.answer(call)
        except asyncio.CancelledError:
            return  # the client cancelled it: never answered
        finally:
            call.closed = True
            entry = self._running.get(call.id)
            if entry is not None and entry[1] is call:
                del self._running[call.id]
        output.push(answer)

    def _cancel(self, params: Any) -> None:
        rid = params.get("requestId") if isinstance(params, dict) else None
        entry = self._running.get(rid) if jsonrpc.is_id(rid) else None
        if entry is not None:
            entry[0].cancel()


async def _line(reader: asyncio.StreamReader) -> bytes:
    """The next line (b"" at the end); one longer than `MAX_LINE` is skipped."""
    while True:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)  # drop what is buffered of the long line
            while True:
                try:
                    await reader.readuntil(b"\n")
                    break
                except asyncio.LimitOverrunError as more:
                    await reader.readexactly(more.consumed)
            log.warning("a client message over %d bytes was dropped", MAX_LINE)


def _claim(fd: int, mode: int) -> int:
    """The protocol's own copy of fd 0 or 1 (above the standard range, not inherited); fd 0 then
    reads /dev/null and fd 1 writes to stderr, so nothing else can use or corrupt the channel."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    if fd == 0:
        null = os.open(os.devnull, mode)
        os.dup2(null, 0)
        os.close(null)
    else:
        sys.stdout.flush()
        os.dup2(2, 1)
    return private


def _feed(pipe: Any, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
    while data := pipe.read(1 << 16):
        loop.call_soon_threadsafe(reader.feed_data, data)
    loop.call_soon_threadsafe(reader.feed_eof)
