"""A 2025-11-25 call's stream closed for polling (SEP-1699) by the gateway's listener
(gateway/downstream/sse.py `Reply.poll`, `Polled`, `Backlog`): closed after an event with an id and
the delay, what comes after kept for a GET with `Last-Event-ID`, each bound held (streams per
session, events and bytes per stream, how long one is kept), and a reply that may not be polled
unchanged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mcp_preconditions.gateway.downstream import sse
from mcp_preconditions.gateway.downstream.sse import Backlog, Polled, Reply, Unanswered
from tests.fixtures.inprocess import until

ANSWER = {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}
NOTE = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}


class Written:
    """An ASGI `send` that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    @property
    def ended(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body") for m in self.sent)


async def never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError


async def test_a_polled_reply_ends_with_an_id_and_the_delay_and_keeps_the_answer_for_a_resume(
        ) -> None:
    polled, written = Polled(), Written()
    reply = Reply(written, [], Unanswered(), asyncio.get_running_loop(), sse=True, polled=polled)
    reply.poll(0.5)
    reply.push(NOTE)  # after the close: kept
    await reply.finish(ANSWER)
    assert written.sent[0]["status"] == 200
    assert written.body == b"id: 1.0\r\nretry: 500\r\ndata: \r\n\r\n" and written.ended
    found = polled.find("1.0")
    assert found is not None
    backlog, after = found
    resumed = Written()
    await backlog.serve(after, never, resumed, [])
    assert resumed.body == (b"id: 1.1\r\n" + sse.event(NOTE) + b"id: 1.2\r\n" + sse.event(ANSWER))
    assert resumed.ended
    again = Written()  # resumed after the first event: the answer alone
    await backlog.serve(1, never, again, [])
    assert again.body == b"id: 1.2\r\n" + sse.event(ANSWER)


async def test_a_reply_no_session_keeps_is_never_polled() -> None:
    """A 2026-07-28 request (or the stdio listener's): no polling, its answer as ever."""
    written = Written()
    reply = Reply(written, [], Unanswered(), asyncio.get_running_loop())
    reply.poll(0.5)
    await reply.finish(ANSWER)
    assert json.loads(written.body) == ANSWER


async def test_past_the_sessions_bound_a_stream_stays_open_and_its_answer_comes_on_it() -> None:
    polled, loop = Polled(), asyncio.get_running_loop()
    kept = [Reply(Written(), [], Unanswered(), loop, sse=True, polled=polled)
            for _ in range(sse.MAX_POLLED)]
    for reply in kept:
        reply.poll(0.1)
    written = Written()
    late = Reply(written, [], Unanswered(), loop, sse=True, polled=polled)
    late.poll(0.1)
    await late.finish(ANSWER)
    assert written.body == sse.event(ANSWER)  # one event, no id: answered on its own stream
    await kept[0].finish(ANSWER)  # a call over: its stream's place may be taken
    assert polled.open() is not None and polled.find("1.0") is None


async def test_a_backlog_keeps_the_newest_events_within_its_bounds_and_always_the_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_BACKLOG_BYTES", 10 * len(sse.event(NOTE)))
    backlog = Backlog("7", lambda _key: None)
    for _ in range(sse.MAX_BACKLOG + 5):
        backlog.add(sse.event(NOTE))
    backlog.add(sse.event(ANSWER) * 100, last=True)
    written = Written()
    await backlog.serve(0, never, written, [])
    ids = [line for line in written.body.split(b"\r\n") if line.startswith(b"id: ")]
    assert len(ids) == 11 and ids[-1] == b"id: 7.%d" % (sse.MAX_BACKLOG + 6)


@pytest.mark.parametrize("last", ["1", "1.", "1.x", "1.-1", "2.0", "1.0000000001", "", "1.٣"])
def test_a_last_event_id_that_names_no_kept_stream_finds_nothing(last: str) -> None:
    polled = Polled()
    assert polled.open() is not None  # "1"
    assert polled.find(last) is None


async def test_a_stream_is_forgotten_a_while_after_its_call_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "KEEP_SECONDS", 0.01)
    polled = Polled()
    backlog = polled.open()
    assert backlog is not None
    backlog.add(sse.event(ANSWER), last=True)
    assert polled.find("1.0") is not None
    await until(lambda: polled.find("1.0") is None, "the stream forgotten")
