"""A server the gateway runs as a command and talks to over its stdin/stdout: one JSON-RPC message
per line, read and written on asyncio pipes (no thread per line). The process gets a session of its
own; stopping it follows the MCP shutdown sequence (close stdin, wait, then the whole group is
terminated, then killed), so no server outlives the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Hashable, Mapping
from typing import IO, Any

from .. import jsonrpc
from ..errors import UpstreamError
from ..jsonrpc import Message

log = logging.getLogger("mcp_preconditions.gateway")

# What a server inherits besides the environment the gateway gives it (the MCP SDK's stdio client's
# defaults, so a server sees the same variables as before).
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
EXIT_GRACE_SECONDS = 2.0  # after stdin closes, before the group is terminated; then killed
MAX_LINE = 64 * 1024 * 1024  # a line (one message) longer than this is skipped ([gateway] max_response_bytes)
_FLOW_HIGH_WATER = 1 << 20  # write buffer size past which a writer waits for the pipe to drain


class _Pipes(asyncio.SubprocessProtocol):
    """The process's stdout split into lines, each handed to `line`; `ended` when it closes."""

    def __init__(self, line: Callable[[bytes], None], label: str, max_line: int) -> None:
        self._line = line
        self._label = label
        self._max_line = max_line
        self._buffer = bytearray()
        self._skipping = False
        self.ended = asyncio.Event()
        self.exited = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            elif self._buffer:
                self._buffer += data[start:end]
                line, self._buffer = bytes(self._buffer), bytearray()
                self._line(line)
            else:
                self._line(data[start:end])
            start = end + 1
        if start < len(data) and not self._skipping:
            self._buffer += data[start:]
            if len(self._buffer) > self._max_line:
                log.warning("upstream %s: unreadable message: a line over %d bytes", self._label,
                            self._max_line)
                self._buffer = bytearray()
                self._skipping = True

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.ended.set()

    def process_exited(self) -> None:
        self.exited.set()
        self.ended.set()


class StdioLink:
    """One running server process."""

    def __init__(self, transport: asyncio.SubprocessTransport, pipes: _Pipes) -> None:
        self._transport = transport
        self._pipes = pipes
        self._stdin: Any = transport.get_pipe_transport(0)  # a WriteTransport (its class differs
        # between event loops)
        self.lost = pipes.ended  # set when its stdout closes or it exits: the session is over

    @classmethod
    async def start(cls, command: str, args: tuple[str, ...], env: dict[str, str],
                    received: Callable[[Any], None], label: str, errlog: IO[str] | None = None,
                    max_line: int = MAX_LINE) -> StdioLink:
        """Start the command; every message it writes goes to `received` (a garbage line is
        logged and skipped). OSError: it could not be started."""

        def line(raw: bytes) -> None:
            if not raw.strip():
                return
            try:
                message = jsonrpc.loads(raw)
            except ValueError as exc:
                log.warning("upstream %s: unreadable message: %s", label, str(exc)[:200])
                return
            received(message)

        inherited = {k: os.environ[k] for k in INHERITED if k in os.environ
                     and not os.environ[k].startswith("()")}
        loop = asyncio.get_running_loop()
        transport, pipes = await loop.subprocess_exec(
            lambda: _Pipes(line, label, max_line), command, *args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=_stderr(errlog), env={**inherited, **env},
            start_new_session=True)
        return cls(transport, pipes)

    async def send(self, message: Message, *, modern: bool = False,
                   headers: Mapping[str, str] | None = None, owner: Hashable | None = None
                   ) -> None:
        if headers is not None or owner is not None:  # a process has one identity: the
            # gateway's (the config refuses credentials on a stdio server)
            raise UpstreamError("a stdio server takes no per-caller credentials")
        if self._stdin.is_closing():
            raise ConnectionError("the server's stdin is closed")
        self._stdin.write(jsonrpc.dumps(message) + b"\n")
        if self._stdin.get_write_buffer_size() > _FLOW_HIGH_WATER:  # a server that stopped reading
            while self._stdin.get_write_buffer_size() > _FLOW_HIGH_WATER // 2 and not self.lost.is_set():
                await asyncio.sleep(0.01)

    def abandon(self, request_id: jsonrpc.RequestId) -> bool:
        return False

    @property
    def pid(self) -> int:
        return self._transport.get_pid()

    async def close(self) -> None:
        """Stop the server: stdin closed, `EXIT_GRACE_SECONDS` to exit, then its whole process
        group is terminated and, if still there, killed. Safe to call more than once."""
        with contextlib.suppress(Exception):
            self._stdin.close()
        if not await self._exited_within(EXIT_GRACE_SECONDS):
            self._signal_group(signal.SIGTERM)
            if not await self._exited_within(EXIT_GRACE_SECONDS):
                self._signal_group(signal.SIGKILL)
                if not await self._exited_within(EXIT_GRACE_SECONDS):
                    log.warning("server process %d is still alive after SIGKILL", self.pid)
        self._transport.close()

    async def _exited_within(self, seconds: float) -> bool:
        if self._transport.get_returncode() is not None:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._pipes.exited.wait()
        return self._transport.get_returncode() is not None

    def _signal_group(self, signum: int) -> None:
        """The server and everything it started (npx starts node): its own process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)


def _stderr(errlog: IO[str] | None) -> int | IO[str]:
    """Where the server's stderr goes: the gateway's own, unless told otherwise."""
    target = errlog if errlog is not None else sys.stderr
    try:
        return target.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file: the server's stderr is dropped
        return asyncio.subprocess.DEVNULL
