"""The gateway's session and stream bounds (gateway/downstream/sessions.py) against a tiny reference
model: random programs of opens by a few principals (anonymous callers among them, sharing one
bound), requests that start and end, DELETEs, and streams held and released. The listener's
sessions agree with the model at every step, and no step of one principal ever ends, refuses or
touches another principal's session (SPEC §10: no caller locks out another).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcp_preconditions.gateway.downstream import sessions as module
from mcp_preconditions.gateway.downstream.sessions import Sessions
from mcp_preconditions.gateway.errors import OverCap
from mcp_preconditions.owner import Owner

# Two tokens of one principal (other clients), another principal, and the anonymous callers.
OWNERS = (Owner("app", "https://idp", "olga"), Owner("cli", "https://idp", "olga"),
          Owner("app", "https://idp", "bob"), None)
LIMIT, PER_PRINCIPAL, STREAMS = 6, 3, 2


def principal(owner: Owner | None) -> object:
    return None if owner is None else owner.principal


@dataclass
class Model:
    """What the bounds mean, obviously: per principal, its sessions by last activity."""

    clock: itertools.count[int] = field(default_factory=itertools.count)
    sessions: dict[int, tuple[object, int, int]] = field(default_factory=dict)  # -> who, busy, last
    streams: dict[object, int] = field(default_factory=dict)

    def open(self, who: object, ref: int) -> int | str:
        mine = [(last, r) for r, (p, busy, last) in self.sessions.items() if p == who]
        if len(mine) >= PER_PRINCIPAL:
            idle = [(last, r) for last, r in mine if self.sessions[r][1] == 0]
            if not idle:
                return 429
            del self.sessions[min(idle)[1]]
        if len(self.sessions) >= LIMIT:
            return 503
        self.sessions[ref] = (who, 0, next(self.clock))
        return ref


Step = tuple[str, int]
steps = st.lists(st.tuples(st.sampled_from(["open", "begin", "done", "end", "hold", "release"]),
                           st.integers(0, 11)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps)
# Olga's first session was used after her second was opened: her fourth ends the second.
@example([("open", 0), ("open", 1), ("begin", 0), ("done", 0), ("open", 4), ("open", 5)])
def test_sessions_and_streams_follow_the_model(program: list[Step]) -> None:
    model = Model()
    ticks = itertools.count()
    with mock.patch("time.monotonic", lambda: float(next(ticks))):  # the sessions' clock
        _run(program, model)


def _run(program: list[Step], model: Model) -> None:
    real = Sessions(limit=LIMIT, per_principal=PER_PRINCIPAL, streams_per_principal=STREAMS)
    opened: dict[int, module.HttpSession] = {}  # reference number -> the listener's session
    refs = itertools.count()
    for action, pick in program:
        owner = OWNERS[pick % len(OWNERS)]
        live = sorted(model.sessions)
        if action == "open":
            ref = next(refs)
            before = {r: s for r, s in opened.items() if principal(s.owner) != principal(owner)}
            expected = model.open(principal(owner), ref)
            try:
                opened[ref] = real.open(owner)
                got: int | str = ref
            except OverCap as over:
                got = over.status
            assert got == expected
            assert all(real.get(s.id) is s for r, s in before.items()
                       if r in model.sessions)  # nobody else's session was touched
        elif action in ("begin", "done") and live:
            ref = live[pick % len(live)]
            who, busy, last = model.sessions[ref]
            if action == "begin":
                opened[ref].begin()
                model.sessions[ref] = (who, busy + 1, last)
            elif busy:
                opened[ref].done()
                model.sessions[ref] = (who, busy - 1, next(model.clock))
        elif action == "end" and live:
            ref = live[pick % len(live)]
            real.end(opened[ref])
            del model.sessions[ref]
        elif action == "hold":
            held = model.streams.get(principal(owner), 0)
            try:
                real.hold_stream(owner)
                assert held < STREAMS
                model.streams[principal(owner)] = held + 1
            except OverCap as over:
                assert (over.status, held) == (429, STREAMS)
        elif action == "release" and model.streams.get(principal(owner)):
            real.release_stream(owner)
            model.streams[principal(owner)] -= 1
        assert {s.id for r, s in opened.items() if r in model.sessions} == \
            {s.id for s in (real.get(o.id) for o in opened.values()) if s is not None}
        assert len(real) == len(model.sessions)
