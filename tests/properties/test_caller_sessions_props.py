"""The callers' sessions of one server (gateway/upstream/caller_sessions.py) against a tiny reference
model, on random sequences of calls (some held in flight), idle time and sweeps: the sessions held
are exactly the model's (least recently used idle one closed at the bound; idle ones swept, idle
counted from the start of a session's last request; busy while a request is pending on it), a
caller who cannot get one is refused exactly when every session is busy, a session in use is never
closed, and no request ever runs on another caller's session.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from mcp_preconditions.credentials import Credential
from mcp_preconditions.gateway.errors import UpstreamUnavailable
from mcp_preconditions.gateway.upstream import caller_sessions
from mcp_preconditions.gateway.upstream.caller_sessions import (
    AsCaller,
    CallerSessions,
    Sender,
    _Session,
)
from mcp_preconditions.gateway.upstream.peer import OwnerHooks

LIMIT, IDLE = 3, 300.0
OWNERS = st.sampled_from(["a", "b", "c", "d", "e"])
OPS = st.lists(st.one_of(
    st.tuples(st.just("call"), OWNERS), st.tuples(st.just("hold"), OWNERS),
    st.tuples(st.just("release"), OWNERS), st.tuples(st.just("wait"), st.sampled_from([10.0, 299.0, 301.0]))),
    max_size=40)


class _Link:
    def __init__(self) -> None:
        self.lost = asyncio.Event()


class _Peer:
    """A session's peer: a request waits for the gate set for it (`next_gate`), if any; it is
    `busy` while a request is pending on it (as `peer.Peer` is)."""

    def __init__(self, owner: str, next_gate: dict[str, asyncio.Event]) -> None:
        self.owner, self.next_gate = owner, next_gate
        self.closed = False
        self.pending = 0

    @property
    def busy(self) -> bool:
        return self.pending > 0

    async def request(self, method: str, params: Any, **options: Any) -> dict[str, Any]:
        assert not self.closed, "a request on a closed session"
        self.pending += 1
        try:
            gate = self.next_gate.pop(self.owner, None)
            if gate is not None:
                await gate.wait()
            return {"owner": self.owner}
        finally:
            self.pending -= 1


def _model_open(model: OrderedDict[str, list[float]], owner: str, now: float) -> bool:
    """The reference: whether `owner` gets a session (LRU order; [last used, busy])."""
    if owner in model:
        model.move_to_end(owner)
        return True
    while len(model) >= LIMIT:
        idle = next((o for o, (_, busy) in model.items() if busy == 0), None)
        if idle is None:
            return False
        del model[idle]
    model[owner] = [now, 0]
    return True


@given(OPS)
def test_sessions_follow_the_reference_model(ops: list[tuple[str, Any]]) -> None:
    async def scenario() -> None:
        now = [0.0]
        gates: dict[str, list[asyncio.Event]] = {}  # each held request's gate, in order
        next_gate: dict[str, asyncio.Event] = {}
        sessions = CallerSessions("http://127.0.0.1:1/mcp", "t",
                                  OwnerHooks(_ask, lambda o, m, p: None),
                                  limit=LIMIT, idle=IDLE, clock=lambda: now[0])
        owners_of: dict[int, str] = {}

        async def fake_open(caller: Sender, timeout: float) -> _Session:
            session = _Session(_Peer(str(caller.owner), next_gate), _Link(), now[0])  # type: ignore[arg-type]
            owners_of[id(session)] = str(caller.owner)
            sessions._sessions[caller.owner] = session
            return session

        async def fake_closed(peer: Any, link: Any) -> None:
            assert peer.owner not in busy_owners(), "a busy session was closed"
            peer.closed = True

        def busy_owners() -> set[str]:
            return {o for o, (_, busy) in model.items() if busy}

        sessions._open = fake_open  # type: ignore[method-assign]
        model: OrderedDict[str, list[float]] = OrderedDict()
        held: dict[str, list[asyncio.Task[dict[str, Any]]]] = {}
        # caller_sessions calls the `closed` it imports from handshake: replaced in caller_sessions
        try:
            with mock.patch.object(caller_sessions, "closed", fake_closed):
                for op, value in ops:
                    if op == "wait":
                        now[0] += value
                        swept = {o for o, (used, busy) in model.items() if not busy and now[0] - used >= IDLE}
                        for owner in swept:
                            del model[owner]
                        sessions.sweep()
                    elif op == "release":
                        tasks = held.get(value)
                        if tasks:
                            gates[value].pop(0).set()
                            assert (await tasks.pop(0))["owner"] == value
                            model[value][1] -= 1  # (its last use: when the request started)
                    else:
                        expected = _model_open(model, value, now[0])
                        if op == "hold":
                            gate = asyncio.Event()
                            gates.setdefault(value, []).append(gate)
                            next_gate[value] = gate
                        task = asyncio.ensure_future(sessions.request(
                            AsCaller(value, Credential.bearer(value, "x")), "tools/call", {}, timeout=5))
                        while value in next_gate and not task.done():  # until it waits at its gate
                            await asyncio.sleep(0)
                        if not expected:
                            try:
                                await task
                            except UpstreamUnavailable:
                                pass
                            else:
                                raise AssertionError("a caller was given a session past the bound")
                            if op == "hold":
                                gates[value].pop()
                                next_gate.pop(value, None)
                            continue
                        model[value][0] = now[0]  # a session's last use: its last request's start
                        if op == "hold":
                            model[value][1] += 1
                            held.setdefault(value, []).append(task)
                        else:
                            assert (await task)["owner"] == value
                    await asyncio.sleep(0)
                    assert list(sessions._sessions) == list(model), (op, value)
                for owner, tasks in held.items():
                    for gate in gates.get(owner, []):
                        gate.set()
                    for task in tasks:
                        assert (await task)["owner"] == owner
        finally:
            await asyncio.sleep(0)

    asyncio.run(scenario())


async def _ask(owner: Hashable, method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)
