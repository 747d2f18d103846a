"""The gateway bench's load generator: plain JSON-RPC over HTTP/1.1 on raw asyncio streams, one
keep-alive connection per simulated MCP session, so that 50 sessions cost the bench process a
fraction of what they cost the systems it measures (docs/gateway-performance.md has the comparison).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

VERSION = "2025-11-25"  # the version every system here serves (server-everything speaks no other)
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": VERSION, "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}}}
ECHOED = b"Echo: hi"  # in every answer of a call that reached server-everything's echo


class Refused(RuntimeError):
    """A system answered a call with something other than the echo."""


@dataclass
class Session:
    """One MCP session over one keep-alive HTTP/1.1 connection of its own."""

    url: str
    headers: bytes = b""  # the session's own header lines, once initialised
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    _call: bytes = field(default=b"", repr=False)
    token: str | None = None  # a bearer token sent with every request (a caller of its own)
    tool: str = "echo"  # the tool each call calls (a gateway's visible name)

    async def open(self) -> Session:
        if self.token is not None:
            self.headers = b"authorization: Bearer " + self.token.encode() + b"\r\n"
        head, _ = await self.post(json.dumps(INITIALIZE).encode())
        session_id = head.get(b"mcp-session-id")
        lines = [b"mcp-protocol-version: " + VERSION.encode()]
        if session_id:
            lines.append(b"mcp-session-id: " + session_id)
        self.headers += b"".join(line + b"\r\n" for line in lines)
        await self.post(json.dumps(INITIALIZED).encode())
        call = {**CALL, "params": {**CALL["params"], "name": self.tool}}  # type: ignore[dict-item]
        self._call = self._request(b"POST", json.dumps(call).encode())
        return self

    async def call(self) -> None:
        """One `echo` call, done when its whole answer has arrived."""
        _, body = await self._exchange(self._call)
        if ECHOED not in body:
            raise Refused(f"{self.url} did not echo: {body[:300]!r}")

    async def close(self) -> None:
        """End the session (DELETE, as a polite client does) and its connection."""
        try:
            if b"mcp-session-id" in self.headers:
                await self._exchange(self._request(b"DELETE", b""))
        except (OSError, asyncio.IncompleteReadError):
            pass  # a system that closes the connection on DELETE
        finally:
            if self.writer is not None:
                self.writer.close()
                self.reader = self.writer = None

    async def post(self, body: bytes) -> tuple[dict[bytes, bytes], bytes]:
        return await self._exchange(self._request(b"POST", body))

    def _request(self, method: bytes, body: bytes) -> bytes:
        parts = urllib.parse.urlsplit(self.url)
        return (method + b" " + parts.path.encode() + b" HTTP/1.1\r\nhost: " + parts.netloc.encode()
                + b"\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream"
                + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n" + self.headers + b"\r\n"
                + body)

    async def _exchange(self, request: bytes) -> tuple[dict[bytes, bytes], bytes]:
        if self.reader is not None and self.reader.at_eof():  # the server closed an idle connection
            assert self.writer is not None
            self.writer.close()
            self.reader = self.writer = None
        if self.writer is None:
            parts = urllib.parse.urlsplit(self.url)
            self.reader, self.writer = await asyncio.open_connection(parts.hostname, parts.port)
        assert self.reader is not None
        self.writer.write(request)
        head, body = await read_response(self.reader)
        if head.get(b"connection") == b"close":
            self.writer.close()
            self.reader = self.writer = None
        return head, body


async def read_response(reader: asyncio.StreamReader) -> tuple[dict[bytes, bytes], bytes]:
    """One HTTP/1.1 response: its headers (names in lower case) and its whole body (a JSON object
    or an SSE stream that the server ends after the answer), chunked or sized."""
    raw = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = raw[:-4].split(b"\r\n")
    head = {}
    for line in lines:
        name, _, value = line.partition(b":")
        head[name.strip().lower()] = value.strip()
    status = int(status_line[9:12])
    if b"content-length" in head:
        body = await reader.readexactly(int(head[b"content-length"]))
    elif head.get(b"transfer-encoding") == b"chunked":
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()  # the empty trailer
                break
            chunks.append((await reader.readexactly(size + 2))[:-2])
        body = b"".join(chunks)
    else:
        body = b""
    if status >= 300:
        raise Refused(f"HTTP {status}: {body[:300]!r}")
    return head, body


async def open_sessions(url: str, count: int, at_once: int = 8) -> list[Session]:
    """`count` initialised sessions, at most `at_once` handshakes in flight (a proxy that starts an
    upstream process per session takes a quarter of a second for each)."""
    gate = asyncio.Semaphore(at_once)

    async def one() -> Session:
        async with gate:
            return await Session(url).open()

    return list(await asyncio.gather(*(one() for _ in range(count))))


def cpu_s() -> float:
    """This process's CPU time so far (user + system, every thread)."""
    return time.process_time()


async def latencies(url: str, count: int, warmup: int = 30) -> list[int]:
    """`count` per-call nanoseconds of one session, after `warmup` untimed calls."""
    session = await Session(url).open()
    try:
        for _ in range(warmup):
            await session.call()
        out = []
        for _ in range(count):
            start = time.perf_counter_ns()
            await session.call()
            out.append(time.perf_counter_ns() - start)
        return out
    finally:
        await session.close()


@dataclass
class Load:
    """What `load` measured over its window: calls completed, seconds, this process's CPU seconds,
    and whatever `probe` returned at the start and the end of the window."""

    calls: int
    seconds: float
    generator_cpu_s: float
    probes: tuple[object, object]


async def load(url: str, clients: int, seconds: float, warmup: float,
               probe: Callable[[], object] = lambda: None, cap: int = 200_000) -> Load:
    """`clients` sessions calling as fast as their answers come, for `warmup` then `seconds`; the
    calls that complete inside the window are counted. Bounded by time and by `cap` calls."""
    sessions = await open_sessions(url, clients)
    done = 0
    stop = False

    async def loop(session: Session) -> None:
        nonlocal done
        while not stop and done < cap:
            await session.call()
            done += 1

    try:
        tasks = [asyncio.create_task(loop(s)) for s in sessions]
        await asyncio.sleep(warmup)
        first = (done, time.perf_counter(), cpu_s(), probe())
        await asyncio.sleep(seconds)
        last = (done, time.perf_counter(), cpu_s(), probe())
        stop = True
        await asyncio.gather(*tasks)
        return Load(last[0] - first[0], last[1] - first[1], last[2] - first[2], (first[3], last[3]))
    finally:
        stop = True
        for session in sessions:
            await session.close()
