"""The SSE decoder the gateway reads its servers' streams with (gateway/upstream/sse.py), one row per
byte sequence a server can send, in the manner of uvicorn's protocol tests: what it yields, or the
error that closes the stream. Each row is fed whole, and again one byte at a time (a server's chunks
can split anywhere).
"""

from __future__ import annotations

import pytest

from mcp_preconditions.gateway.errors import UpstreamTooLarge
from mcp_preconditions.gateway.upstream.sse import Decoder

EVENT, LINE = 64, 32  # small bounds, so a row can pass them

ROWS: list[tuple[str, bytes, list[bytes]]] = [
    ("lf", b"data: a\n\n", [b"a"]),
    ("crlf", b"data: a\r\n\r\n", [b"a"]),
    ("cr alone", b"data: a\r\rdata: b\r\r", [b"a", b"b"]),
    ("mixed endings", b"data: a\r\n\ndata: b\n\r\n", [b"a", b"b"]),
    ("no space after the colon", b"data:a\n\n", [b"a"]),
    ("only one space is dropped", b"data:  a\n\n", [b" a"]),
    ("lines joined by lf", b"data: a\ndata: b\n\n", [b"a\nb"]),
    ("typed message", b"event: message\ndata: a\n\n", [b"a"]),
    ("another type is skipped", b"event: other\ndata: a\n\ndata: b\n\n", [b"b"]),
    ("comments and pings", b": ping\n\n: x\ndata: a\n\n", [b"a"]),
    ("id and retry are skipped", b"id: 7\nretry: 10\ndata: a\n\n", [b"a"]),
    ("a field without colon", b"data\ndata\n\n", [b"\n"]),
    ("one empty data line is no event", b"data\n\n", []),
    ("unknown fields", b"foo: bar\ndata: a\n\n", [b"a"]),
    ("a bom opens the stream", b"\xef\xbb\xbfdata: a\n\n", [b"a"]),
    ("a bom later is data", b"data: \xef\xbb\xbfa\n\n", [b"\xef\xbb\xbfa"]),
    ("an unfinished event is dropped", b"data: a\n\ndata: b\n", [b"a"]),
    ("blank lines alone", b"\n\n\r\n", []),
    ("at the line bound", b"data: " + b"x" * (LINE - 6) + b"\n\n", [b"x" * (LINE - 6)]),
]

TOO_LARGE: list[tuple[str, bytes, str]] = [
    ("a line past its bound", b"data: " + b"x" * LINE + b"\n\n", "an SSE line over 32 bytes"),
    ("an endless line", b"data: " + b"x" * (4 * LINE), "an SSE line over 32 bytes"),
    ("an endless comment", b":" + b"x" * (4 * LINE), "an SSE line over 32 bytes"),
    ("an event past its bound", b"data: xxxxxxxxxx\n" * 8 + b"\n", "an SSE event over 64 bytes"),
    ("endless data lines", b"data: x\n" * 100, "an SSE event over 64 bytes"),
]


def feed(chunks: list[bytes]) -> list[bytes]:
    decoder = Decoder(EVENT, LINE)
    out: list[bytes] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out


def whole_and_bytewise(data: bytes) -> list[list[bytes]]:
    return [[data], [data[i:i + 1] for i in range(len(data))]]


@pytest.mark.parametrize(("name", "data", "events"), ROWS, ids=[r[0] for r in ROWS])
def test_each_byte_sequence_decodes_to_its_events(name: str, data: bytes, events: list[bytes]) -> None:
    for chunks in whole_and_bytewise(data):
        assert feed(chunks) == events, name


@pytest.mark.parametrize(("name", "data", "error"), TOO_LARGE, ids=[r[0] for r in TOO_LARGE])
def test_a_server_past_a_bound_ends_its_stream(name: str, data: bytes, error: str) -> None:
    for chunks in whole_and_bytewise(data):
        with pytest.raises(UpstreamTooLarge) as caught:
            feed(chunks)
        assert str(caught.value) == error, name


def test_a_cr_ending_one_chunk_and_a_lf_opening_the_next_are_one_line_end() -> None:
    assert feed([b"data: a\r", b"\n", b"\r", b"\ndata: b\r\n\r\n"]) == [b"a", b"b"]


def test_what_waits_for_a_line_end_stays_within_the_line_bound() -> None:
    decoder = Decoder(EVENT, LINE)
    decoder.feed(b"data: " + b"x" * (LINE - 6))
    with pytest.raises(UpstreamTooLarge):
        decoder.feed(b"x")
