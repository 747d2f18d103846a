"""The drain after an answer (gateway/upstream/response.py, client.py) against a tiny reference model,
on random sequences of two callers' calls to one server over a pool of two connections, each call's
stream followed by what the server chooses (the end, late messages then the end, broken framing, a
flood past DRAIN_BYTES, silence), and the fake clock moved past DRAIN_SECONDS: the connections
idle, draining and open are exactly the model's (a sound end keeps the connection, anything else
closes it, a drain gives way to a request of a full pool), the server accepts exactly the model's
connections, and each caller hears its own answers, in order, and nothing else.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions.gateway.upstream import client
from mcp_preconditions.gateway.upstream.response import DRAIN_SECONDS
from tests.fixtures.draining_server import (
    END,
    WAIT,
    FakeLater,
    Tail,
    Watched,
    after_the_answer,
    answer,
    call,
    chunk,
    ends,
    event,
    heard,
    link,
    more_than_the_bound,
    serving,
    silent,
)

LIMIT = 2
NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
TAILS: dict[str, tuple[Tail, str]] = {  # what the server does after the answer -> the connection
    "end": (ends, "kept"),
    "late": (after_the_answer(chunk(event(NOTE) + event(answer(0, "stray"))), END), "kept"),
    "broken": (after_the_answer(b"zz\r\nxx\r\n"), "closed"),
    "flood": (more_than_the_bound, "closed"),
    "silent": (silent, "draining"),
}
OPS = st.lists(st.one_of(
    st.tuples(st.just("call"), st.sampled_from(["alice", "bob"]),
              st.sampled_from([*TAILS, "silent", "silent"])),  # drains often meet a full pool
    st.tuples(st.just("advance"), st.just(""), st.just(""))), min_size=1, max_size=12)


@dataclass
class Model:
    idle: int = 0
    draining: int = 0
    open: int = 0
    accepted: int = 0

    def call(self, outcome: str) -> None:
        if self.idle:
            self.idle -= 1
        else:
            if self.open >= LIMIT and self.draining:  # a drain gives way
                self.draining -= 1
                self.open -= 1
            self.open += 1
            self.accepted += 1
        if outcome == "kept":
            self.idle += 1
        elif outcome == "draining":
            self.draining += 1
        else:
            self.open -= 1

    def advance(self) -> None:
        self.open -= self.draining
        self.draining = 0


async def scenario(ops: list[tuple[str, str, str]]) -> None:
    async with serving() as server:
        later, model = FakeLater(), Model()
        pool = Watched(server, limit=LIMIT, later=later)
        got = {"alice": heard(), "bob": heard()}
        links = {who: link(server, pool, got[who], who) for who in got}
        dropped: list[Any] = []
        for one in links.values():
            one.dropped = dropped.append
        sent: dict[str, list[dict[str, Any]]] = {"alice": [], "bob": []}

        def as_modelled() -> bool:
            return (pool._open, len(pool._idle), len(pool._draining)) == \
                (model.open, model.idle, model.draining)

        for rid, (op, who, tail) in enumerate(ops, start=1):
            if op == "advance":
                later.advance(DRAIN_SECONDS)
                model.advance()
            else:
                server.tails[rid] = TAILS[tail][0]
                async with asyncio.timeout(WAIT):
                    await links[who].send(call(rid))
                sent[who].append(answer(rid, who))
                model.call(TAILS[tail][1])
            await server.until(as_modelled)
        pool.close()
        assert server.accepted == model.accepted
    assert got == sent and dropped == []


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_drains_keep_close_and_give_way_as_the_model_says(ops: list[tuple[str, str, str]]) -> None:
    with mock.patch.object(client, "IDLE_SECONDS", 600.0):  # a kept connection never ages here
        asyncio.run(scenario(ops))
