"""A 2025-11-25 call's stream, SSE polling (SEP-1699) by the gateway's listener
(gateway/downstream/sse.py `Reply`, `Polled`, `Backlog`): it begins with a priming event (an id, the
delay, no data) written with its first bytes; closed for polling (by its server's doing or after the
listener's `poll_seconds`), what comes after is kept for a GET with `Last-Event-ID`; each bound held
(streams per session, events and bytes per stream, how long one is kept); and a reply that may not
be polled unchanged.
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
    # Primed, not closed: answered on its own stream.
    assert written.body == sse.priming("9", 0.1) + sse.event(ANSWER) and written.ended
    assert polled.find("9.0") is None
    await kept[0].finish(ANSWER)  # a call over: its stream's place may be taken
    assert polled.open(polled.key()) is not None and polled.find("1.0") is None


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
    assert polled.open(polled.key()) is not None  # "1"
    assert polled.find(last) is None


async def test_a_stream_is_forgotten_a_while_after_its_call_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "KEEP_SECONDS", 0.01)
    polled = Polled()
    backlog = polled.open(polled.key())
    assert backlog is not None
    backlog.add(sse.event(ANSWER), last=True)
    assert polled.find("1.0") is not None
    await until(lambda: polled.find("1.0") is None, "the stream forgotten")


# -- the gateway's own polling: every stream primed, closed on its listener's policy -------------

async def test_a_pollable_reply_answered_at_once_is_its_priming_event_and_the_answer_in_one_write(
        ) -> None:
    """Fails on the old code: the answer alone, one event without an id (no priming, no retry)."""
    polled, written = Polled(), Written()
    reply = Reply(written, [], Unanswered(), asyncio.get_running_loop(), sse=True, polled=polled)
    await reply.finish(ANSWER)
    assert written.sent[0]["status"] == 200
    assert written.sent[0]["headers"][0] == (b"content-type", b"text/event-stream")
    bodies = [m["body"] for m in written.sent if m["type"] == "http.response.body"]
    assert bodies == [b"id: 1.0\r\nretry: 500\r\ndata: \r\n\r\n" + sse.event(ANSWER)]
    assert polled.find("1.0") is None  # answered on its stream: nothing kept to resume


async def test_a_pollable_stream_begins_with_its_priming_event_and_each_has_its_own_id() -> None:
    """Fails on the old code: the progress first, no event with an id."""
    polled, loop = Polled(), asyncio.get_running_loop()
    first, second = Written(), Written()
    one = Reply(first, [], Unanswered(), loop, sse=True, polled=polled)
    two = Reply(second, [], Unanswered(), loop, sse=True, polled=polled)
    one.push(NOTE)
    two.push(NOTE)
    await one.finish(ANSWER)
    await two.finish(ANSWER)
    assert first.body == sse.priming("1", 0.5) + sse.event(NOTE) + sse.event(ANSWER)
    assert second.body == sse.priming("2", 0.5) + sse.event(NOTE) + sse.event(ANSWER)


async def test_a_call_unanswered_after_the_listeners_poll_seconds_is_closed_and_resumed() -> None:
    """Whatever the server behind (a stdio one closes nothing): the stream ends after its priming
    event and what was pushed, and the client's GET with its id gets the rest. Fails on the old
    code: no `poll_seconds`, the stream stayed open for the answer."""
    polled, written = Polled(), Written()
    reply = Reply(written, [], Unanswered(poll_seconds=0.0), asyncio.get_running_loop(), sse=True,
                  polled=polled)
    reply.push(NOTE)
    await until(lambda: written.ended, "the stream closed for polling")
    assert written.body == sse.priming("1", 0.5) + sse.event(NOTE)
    reply.push(NOTE)
    await reply.finish(ANSWER)
    found = polled.find("1.0")
    assert found is not None
    resumed = Written()
    await found[0].serve(found[1], never, resumed, [])
    assert resumed.body == b"id: 1.1\r\n" + sse.event(NOTE) + b"id: 1.2\r\n" + sse.event(ANSWER)


async def test_a_call_answered_before_poll_seconds_is_answered_on_its_stream() -> None:
    polled, written = Polled(), Written()
    reply = Reply(written, [], Unanswered(poll_seconds=60.0), asyncio.get_running_loop(), sse=True,
                  polled=polled)
    await reply.finish(ANSWER)
    assert written.body == sse.priming("1", 0.5) + sse.event(ANSWER)
    assert polled.find("1.0") is None


async def test_a_reply_that_may_not_poll_is_never_closed_by_poll_seconds() -> None:
    """A 2026-07-28 request (closing its stream would cancel it), an older session's."""
    unanswered, loop = Unanswered(poll_seconds=0.0), asyncio.get_running_loop()
    written, beside = Written(), Written()
    reply = Reply(written, [], unanswered, loop, sse=True)
    pollable = Reply(beside, [], unanswered, loop, sse=True, polled=Polled())
    reply.push(NOTE)
    pollable.push(NOTE)
    await until(lambda: beside.ended, "the pollable one closed for polling")
    assert not written.ended
    await reply.finish(ANSWER)
    assert written.body == sse.event(NOTE) + sse.event(ANSWER)


async def test_a_server_closing_a_primed_stream_gives_its_own_delay_then_the_stream_ends() -> None:
    """Relayed (SEP-1699): the priming event is out already; the server's `retry` follows when it
    differs, and the client resumes from the priming event's id."""
    polled, written = Polled(), Written()
    reply = Reply(written, [], Unanswered(), asyncio.get_running_loop(), sse=True, polled=polled)
    reply.push(NOTE)
    reply.poll(2.0)
    await reply.finish(ANSWER)
    assert written.body == sse.priming("1", 0.5) + sse.event(NOTE) + b"retry: 2000\r\n\r\n"
    found = polled.find("1.0")
    assert found is not None
    resumed = Written()
    await found[0].serve(found[1], never, resumed, [])
    assert resumed.body == b"id: 1.1\r\n" + sse.event(ANSWER)
