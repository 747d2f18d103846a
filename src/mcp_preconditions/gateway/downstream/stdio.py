"""The gateway's one stdio client: JSON-RPC lines read and written on asyncio pipes over fd 0 and 1
(no thread per line), each request served as it comes (`initialize` before anything after it) on
the connection core all listeners share (`clients.Connection`). The first request chooses the protocol
era, as the MCP SDK's dual-era loop does. Stray writes to fd 1 (a library printing) go to stderr
instead of corrupting the protocol. A stdin the event loop cannot watch (a file, /dev/null) is read
on a thread; a closed one is at its end: the gateway exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import stat
import sys
from typing import Any

from ...decisions import write_held
from .. import jsonrpc
from ..clients import Call, Client, Connection
from ..dispatch import Dispatch, envelope, era_refusal, modern
from ..jsonrpc import Message, RpcError

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
        write_held()  # the decision records made so far go out before any answer does
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
        self.connection: Connection | None = None
        self._era: bool | None = None  # None until the first request; True: 2026-07-28

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        in_fd, out_fd = _claim(0, os.O_RDONLY), _claim(1, os.O_WRONLY)
        reader = await _reader(loop, in_fd)
        transport: asyncio.WriteTransport | None = None
        if out_fd is not None:
            write_pipe = os.fdopen(out_fd, "wb", buffering=0)
            with contextlib.suppress(ValueError, OSError):
                transport, _ = await loop.connect_write_pipe(asyncio.Protocol, write_pipe)
        try:
            await self.serve_lines(reader, Output(transport, out_fd if out_fd is not None else -1))
        finally:
            if transport is not None:
                transport.close()

    async def serve_lines(self, reader: asyncio.StreamReader, output: Output) -> None:
        """Serve the lines `reader` gives until its end, answering on `output`: what `serve` does
        on the process's own stdin and stdout (any reader and transport: a test's, in memory)."""
        connection = self.connection = Connection(Client(output, http=False))
        try:
            while line := await _line(reader):
                await self._received(line, output, connection)
        finally:
            connection.close()

    async def _received(self, line: bytes, output: Output, connection: Connection) -> None:
        try:
            message = jsonrpc.loads(line)
        except ValueError:
            return  # a line that is not JSON: dropped, as the MCP SDK's stdio server does
        what = jsonrpc.kind(message)
        if what is None:  # answered when it can be (JSON-RPC 2.0), else dropped
            answer = jsonrpc.invalid_request(message)
            if answer is not None:
                output.push(answer)
        elif what != "request":
            await connection.received(message, self.dispatch.notified)
        else:
            call = self._call(message, output, connection.client)
            if call is None:
                return
            if call.method == "initialize":  # served before the next line is read
                await self._serve(call, output, connection)
            else:
                connection.start(call, self._serve(call, output, connection))

    def _call(self, message: dict[str, Any], output: Output, client: Client) -> Call | None:
        method, params = message["method"], message.get("params")
        if self._era is None:
            self._era = method != "initialize" and modern(params)
            client.modern = self._era
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
        return Call(method, params, message["id"], client.version, output, client)

    async def _serve(self, call: Call, output: Output, connection: Connection) -> None:
        answer = await connection.serve(call, self.dispatch.answer)
        if answer is not None:  # a request the client cancelled is never answered
            output.push(answer)


async def _reader(loop: asyncio.AbstractEventLoop, fd: int | None) -> asyncio.StreamReader:
    """A reader of the protocol's stdin: a pipe, socket or terminal read by the event loop; a
    file or a device it cannot watch (/dev/null) on a thread; none (fd 0 was closed) at its end."""
    reader = asyncio.StreamReader(limit=MAX_LINE)
    if fd is None:
        reader.feed_eof()
        return reader
    pipe = os.fdopen(fd, "rb", buffering=0)
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        with contextlib.suppress(ValueError, OSError):
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
            return reader
    loop.run_in_executor(None, _feed, pipe, reader, loop)
    return reader


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


def _claim(fd: int, mode: int) -> int | None:
    """The protocol's own copy of fd 0 or 1 (above the standard range, not inherited); fd 0 then
    reads /dev/null and fd 1 writes to stderr, so nothing else can use or corrupt the channel.
    None when the process started with it closed: the descriptor may be another file's since
    (the event loop's own), and is left alone."""
    if (sys.stdin if fd == 0 else sys.stdout) is None:
        return None
    try:
        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        return None
    if fd == 0:
        null = os.open(os.devnull, mode)
        os.dup2(null, 0)
        os.close(null)
    else:
        sys.stdout.flush()
        os.dup2(2, 1)
    return private


def _feed(pipe: Any, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
    try:
        while data := pipe.read(1 << 16):
            loop.call_soon_threadsafe(reader.feed_data, data)
    except OSError:
        pass  # unreadable: its end
    with contextlib.suppress(RuntimeError):  # the loop already closed
        loop.call_soon_threadsafe(reader.feed_eof)
