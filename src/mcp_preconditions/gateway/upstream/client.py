"""A small HTTP/1.1 client for the gateway's streamable-HTTP servers: keep-alive connections in a
pool (the MCP SDK's client opened a connection per call), bodies by Content-Length, chunked or until
close, read whole or as a stream (SSE). http and https; nothing else an MCP server needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterator

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
_IDLE_KEPT = 32  # connections kept open between requests, per server


class Response:
    """A response whose body is read once, whole (`read`) or in pieces (`stream`); the connection
    goes back to the pool when the body has been read to its end."""

    def __init__(self, pool: Pool, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._pool = pool
        self._reader = reader
        self._writer = writer
        self._done = False

    async def read(self) -> bytes:
        parts = []
        size = 0
        async for part in self.stream():
            size += len(part)
            if size > MAX_BODY:
                self.close()
                raise ConnectionError("response body too large")
            parts.append(part)
        return b"".join(parts)

    async def stream(self) -> AsyncIterator[bytes]:
        reader = self._reader
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":
                            pass  # trailers
                        break
                    yield await reader.readexactly(size)
                    await reader.readexactly(2)
                keep = True
            elif "content-length" in self.headers:
                left = int(self.headers["content-length"])
                while left > 0:
                    part = await reader.read(min(left, 1 << 16))
                    if not part:
                        raise ConnectionError("connection closed mid-body")
                    left -= len(part)
                    yield part
                keep = True
            else:  # until the server closes
                while part := await reader.read(1 << 16):
                    yield part
                keep = False
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self.close()
            raise ConnectionError(f"malformed response body: {exc}") from None
        except BaseException:
            self.close()
            raise
        self._done = True
        if keep and self.headers.get("connection", "").lower() != "close":
            self._pool.release(self._reader, self._writer)
        else:
            self.close()

    def close(self) -> None:
        """Give up on the rest of the body: the connection is closed, not reused."""
        if not self._done:
            self._done = True
            self._writer.close()


class Pool:
    """Keep-alive connections to one origin."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (443 if self.https else 80) == self.port
        self.authority = parts.netloc.rsplit("@", 1)[-1] if not default else self.host
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._ssl = ssl.create_default_context() if self.https else None

    async def request(self, method: str, headers: dict[str, str], body: bytes = b"") -> Response:
        """Send one request to the pool's URL; its response once the head has arrived. A kept
        connection the server closed meanwhile is replaced once, transparently."""
        head = [f"{method} {self.path} HTTP/1.1", f"host: {self.authority}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        if body or method in ("POST", "PUT"):
            head.append(f"content-length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        while self._idle:
            reader, writer = self._idle.pop()
            if reader.at_eof() or writer.is_closing():
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, data)
            except _Stale:
                continue  # closed by the server while idle: nothing was read, try another
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self._ssl, limit=MAX_HEAD,
            server_hostname=self.host if self._ssl is not None else None)
        try:
            return await self._exchange(reader, writer, data)
        except _Stale:
            raise ConnectionError("the server closed the connection") from None

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        data: bytes) -> Response:
        try:
            writer.write(data)
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            writer.close()
            if not exc.partial:
                raise _Stale from None
            raise ConnectionError("connection closed mid-response") from None
        except (ConnectionError, asyncio.LimitOverrunError) as exc:
            writer.close()
            if isinstance(exc, ConnectionResetError | BrokenPipeError):
                raise _Stale from None
            raise ConnectionError(str(exc)) from None
        except BaseException:
            writer.close()
            raise
        lines = raw[:-4].decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            writer.close()
            raise ConnectionError(f"malformed status line: {lines[0][:80]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Response(self, reader, writer, status, headers)

    def release(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._idle) < _IDLE_KEPT and not writer.is_closing():
            self._idle.append((reader, writer))
        else:
            writer.close()

    def close(self) -> None:
        for _, writer in self._idle:
            with contextlib.suppress(Exception):
                writer.close()
        self._idle.clear()


class _Stale(Exception):
    """A kept-alive connection turned out closed before any of the response arrived."""
