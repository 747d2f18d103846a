"""The per-person boundary, row by row over the gateway's surface (SPEC §14, §15; issue 39): the rows
a state machine (test_per_person_boundary.py) wanders through, each written down once, so that each
regression has a name. Every row builds the in-process world of tests/fixtures/per_person.py for
one credential kind (per-subject secret, token exchange, connected account), the server at
2025-11-25 or 2026-07-28, the callers at 2025-11-25 or 2026-07-28, and after its steps asserts the
boundary whole (`World.violations`: what the server saw each request as, what each caller got).

- every method: alice, bob and carol (no credential) each send it; alice and bob get their own
  answer as the server saw them, carol the refusal of `credential:crm` (a listing too: the one
  server behind the gateway refused her) and nothing is sent for her; a request the callers'
  version does not have is METHOD_NOT_FOUND for all three, and nothing of it is sent;
- every notification a server sends on alice's session reaches alice's streams only (bob holds a
  GET or listen stream, and for an update, the resource too);
- a duplicated answer (the stale copy read by bob's next call on the kept connection) and crossed
  answers reach nobody else, and are counted as dropped;
- sampling, elicitation and roots asked on a caller's call reach that caller only;
- two identical `self`-approved calls: an accept runs the one call that asked, a decline nothing;
- 404 and 401 in every order: a call is sent at most twice.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from tests.fixtures import hostile_mcp as mcp
from tests.fixtures.asgi_caller import LEGACY, MODERN, Reply
from tests.fixtures.hostile_http_server import hostile_http
from tests.fixtures.per_person import (
    KINDS,
    LEGACY_ONLY,
    PARAMS,
    World,
    answer_problems,
    approval_problems,
    world,
)

ROW_SECONDS = 10.0  # the safety net of one row
ERAS = (LEGACY, MODERN)
Row = Callable[[World], Awaitable[list[str]]]


def run_row(kind: str, server_era: str, client_era: str, row: Row,
            names: tuple[str, ...] = ("alice1", "bob1", "carol1")) -> None:
    """`row` in a fresh world: its own problems, then the boundary's, none allowed."""
    async def main() -> list[str]:
        with hostile_http(modern=server_era == MODERN) as server, \
                tempfile.TemporaryDirectory() as directory:
            with anyio.fail_after(ROW_SECONDS):
                async with world(kind, server, dict.fromkeys(names, client_era),
                                 Path(directory)) as found:
                    problems = await row(found)
                    await found.settle()
                    return problems + found.violations()
    problems = anyio.run(main)
    assert not problems, "\n".join(problems)


def grid(*more: tuple[str, ...]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [(k, s, c) for k in KINDS for s in ERAS for c in ERAS]
    for values in more:
        rows = [(*r, v) for r in rows for v in values]
    return rows


@pytest.mark.parametrize(("kind", "server_era", "client_era", "method"),
                         grid(tuple(sorted(PARAMS))))
def test_every_method_goes_as_its_own_caller_or_not_at_all(
        kind: str, server_era: str, client_era: str, method: str) -> None:
    """(A request the callers' version does not have, `LEGACY_ONLY` at 2026-07-28, is refused as
    METHOD_NOT_FOUND for each of them, and nothing of it reaches the server.)"""
    async def row(found: World) -> list[str]:
        problems = []
        for name in ("alice1", "bob1", "carol1"):
            reply = await found.request(name, method)
            problems += answer_problems(found.conns[name], method, reply)
        if client_era == MODERN and method in LEGACY_ONLY:
            problems += [f"{s.method} (tag {s.tag}) reached the server" for s in
                         found.server.records() if s.tag in found.tags]
        return problems
    run_row(kind, server_era, client_era, row)


@pytest.mark.parametrize(("kind", "server_era", "client_era", "note"), grid(mcp.NOTIFICATIONS))
def test_a_notification_on_alices_session_reaches_alice_only(
        kind: str, server_era: str, client_era: str, note: str) -> None:
    async def row(found: World) -> list[str]:
        for name in ("bob1", "carol1"):  # known to the gateway as its clients
            await found.request(name, "tools/call")
        if note == "updated" and client_era == LEGACY:  # bob holds the resource too
            await found.request("bob1", "resources/subscribe")
        elif note == "updated":
            await found.conns["bob1"].listen({"resourceSubscriptions": [mcp.URI]}, "bob-listen")
        found.server.queue("alice", note)
        reply = await found.request("alice1", "tools/call")
        return answer_problems(found.conns["alice1"], "tools/call", reply)
    run_row(kind, server_era, client_era, row)


@pytest.mark.parametrize(("kind", "server_era"), [(k, s) for k in KINDS for s in ERAS])
def test_a_duplicated_answer_reaches_nobody_else_and_is_counted(kind: str, server_era: str) -> None:
    async def row(found: World) -> list[str]:
        for name in ("alice1", "bob1"):  # both have a session (and the same count of requests)
            await found.request(name, "tools/call")
        before = found.dropped()
        found.server.arm_duplicate()
        mine = await found.request("alice1", "tools/call")
        await found.request("bob1", "tools/call")  # its connection: the stale copy first
        found.server.disarm()
        problems = answer_problems(found.conns["alice1"], "tools/call", mine)
        if any(s.stale_before for s in found.server.records()) and found.dropped() <= before:
            problems.append("the stale duplicate was dropped without being counted")
        return problems
    run_row(kind, server_era, LEGACY, row)


@pytest.mark.parametrize(("kind", "server_era"), [(k, s) for k in KINDS for s in ERAS])
def test_crossed_answers_reach_nobody_else_and_are_counted(kind: str, server_era: str) -> None:
    async def row(found: World) -> list[str]:
        for name in ("alice1", "bob1"):
            await found.request(name, "tools/call")
        before = found.dropped()
        found.server.arm_cross()
        async with anyio.create_task_group() as tg:
            tg.start_soon(found.request, "alice1", "tools/call")
            tg.start_soon(found.request, "bob1", "tools/call")
        found.server.disarm()
        if found.server.crossings != 1:
            return ["the server never held both calls at once"]
        return [] if found.dropped() >= before + 2 else \
            [f"{found.dropped() - before:g} of 2 crossed answers counted as dropped"]
    run_row(kind, server_era, LEGACY, row)


@pytest.mark.parametrize(("kind", "server_era", "client_era", "ask"), grid(tuple(sorted(mcp.ASKS))))
def test_a_server_request_on_a_callers_call_reaches_that_caller_only(
        kind: str, server_era: str, client_era: str, ask: str) -> None:
    params = {"name": "ask", "arguments": {"kind": ask}}

    async def row(found: World) -> list[str]:
        problems = []
        replies: dict[str, Reply] = {}

        async def one(name: str) -> None:
            replies[name] = await found.request(name, "tools/call", params)
        for name in ("alice1", "bob1"):  # one at a time, then both at once
            await one(name)
            problems += _own(found, name, replies[name])
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "alice1")
            tg.start_soon(one, "bob1")
        return problems + [p for n in ("alice1", "bob1") for p in _own(found, n, replies[n])]
    run_row(kind, server_era, client_era, row)


def _own(found: World, name: str, reply: Reply) -> list[str]:
    who = found.conns[name].who
    return [] if mcp.seen(who) in json.dumps(reply.answer) else \
        [f"{name}: not its own answer: {json.dumps(reply.answer)[:300]}"]


@pytest.mark.parametrize(("kind", "server_era", "client_era", "answers"),
                         grid(("accept,decline", "decline,accept", "decline,decline")))
def test_a_self_approval_runs_the_one_call_that_asked(
        kind: str, server_era: str, client_era: str, answers: str) -> None:
    first, second = answers.split(",")

    async def row(found: World) -> list[str]:
        params = {"name": "deploy", "arguments": {"nonce": "n1"}}
        replies = [Reply({}), Reply({})]

        async def one(i: int, answer: str) -> None:
            replies[i] = await found.request("alice1", "tools/call", params, [answer])
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 0, first)
            tg.start_soon(one, 1, second)
        return approval_problems(found, "alice", "n1", replies)
    run_row(kind, server_era, client_era, row)


@pytest.mark.parametrize(("kind", "server_era", "plan"),
                         [(k, s, p) for k in KINDS for s in ERAS
                          for p in ("404,401,404", "401,404,401", "404,404,404", "401,401,401")])
def test_a_call_is_sent_at_most_twice(kind: str, server_era: str, plan: str) -> None:
    async def row(found: World) -> list[str]:
        await found.request("alice1", "tools/call")  # a session to lose
        found.server.fail_next("alice", plan.split(","))
        await found.request("alice1", "tools/call")
        found.server.disarm()
        sent = [s for s in found.server.records() if s.method == "tools/call" and s.tag == "alice1-2"]
        return [] if len(sent) <= 2 else [f"one call was sent {len(sent)} times ({plan})"]
    run_row(kind, server_era, LEGACY, row, ("alice1",))
