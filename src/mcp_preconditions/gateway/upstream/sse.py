"""Server-sent events as the gateway reads them from a server (the WHATWG event-stream format): lines
ended by CRLF, LF or CR, `data` fields joined by LF, comments and other fields skipped, the `data` of
each `message` (or untyped) event handed on as it completes. A line or an event past its bound ends
the stream with UpstreamTooLarge: nothing a server sends is buffered without limit. The last event
id and the server's reconnection delay (`retry`) are kept, to resume a stream the server closed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator

from ..errors import UpstreamTooLarge

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
_ID = re.compile(rb"[\x21-\x7e]{1,256}")  # an event id the gateway can send back in a header
_RETRY = re.compile(rb"[0-9]{1,9}")


class Decoder:
    """An incremental decoder: `feed` it bytes as they come, it returns the events completed."""

    def __init__(self, max_event: int, max_line: int) -> None:
        self.max_event = max_event
        self.max_line = max_line
        self._line = bytearray()  # the incomplete last line
        self._data: list[bytes] = []
        self._size = 0  # bytes of data in the event so far
        self._kind = b""
        self._after_cr = False  # the last chunk ended in CR: a LF opening the next one is its end
        self._started = False
        self._id: str | None = None  # the last event id buffer (None: none, or none to send back)
        self.last_id: str | None = None  # as of the last complete event: to resume after it
        self.retry: float | None = None  # seconds: the server's reconnection delay, if it said

    def restart(self) -> None:
        """A new stream (the same one resumed): what was cut mid-line or mid-event is dropped;
        the last event id and the reconnection delay stay."""
        self._line = bytearray()
        self._data, self._size, self._kind = [], 0, b""
        self._after_cr = False
        self._started = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if not self._started:
            if len(self._line) + len(chunk) < len(_BOM) and _BOM.startswith(bytes(self._line) + chunk):
                self._line += chunk  # too short yet to tell whether a BOM opens the stream
                return []
            self._started = True
            chunk = bytes(self._line) + chunk
            self._line = bytearray()
            chunk = chunk.removeprefix(_BOM)
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = False
        out: list[bytes] = []
        start = 0
        for end in _EOL.finditer(chunk):
            if self._line:
                self._line += chunk[start:end.start()]
                line = bytes(self._line)
                self._line = bytearray()
            else:
                line = chunk[start:end.start()]
            if len(line) > self.max_line:
                raise UpstreamTooLarge(f"an SSE line over {self.max_line} bytes")
            self._field(line, out)
            start = end.end()
        if chunk.endswith(b"\r"):
            self._after_cr = True
        if start < len(chunk):
            self._line += chunk[start:]
            if len(self._line) > self.max_line:
                raise UpstreamTooLarge(f"an SSE line over {self.max_line} bytes")
        return out

    def _field(self, line: bytes, out: list[bytes]) -> None:
        if not line:  # a blank line ends the event (one with empty data is no event)
            self.last_id = self._id
            data = b"\n".join(self._data)
            if data and self._kind in (b"", b"message"):
                out.append(data)
            self._data, self._size, self._kind = [], 0, b""
            return
        if line[:1] == b":":
            return  # a comment (keep-alive pings)
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self.max_event:
                raise UpstreamTooLarge(f"an SSE event over {self.max_event} bytes")
            self._data.append(value)
        elif name == b"event":
            self._kind = value
        elif name == b"id" and b"\0" not in value:
            self._id = value.decode("ascii") if _ID.fullmatch(value) else None
        elif name == b"retry" and _RETRY.fullmatch(value):
            self.retry = int(value) / 1000


async def events(chunks: AsyncGenerator[bytes, None], decoder: Decoder
                 ) -> AsyncGenerator[bytes, None]:
    """The `data` of each message event of a stream, as it completes (an event the stream ends
    in the middle of is dropped, as the format says), read by `decoder`."""
    async with contextlib.aclosing(chunks) as pieces:
        async for chunk in pieces:
            for data in decoder.feed(chunk):
                yield data
