"""The connection core both listeners share (gateway/clients.py), with a double for
the dispatch: which cancellations interrupt which request, and what a client going away does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_preconditions.gateway.clients import Call, Client, Connection, correlated
from mcp_preconditions.gateway.jsonrpc import Message


class Sink:
    open = True

    def push(self, message: Message) -> None:
        pass


class Answers:
    """A dispatch double: each request waits until released, then answers `{"ok": id}`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[Any] = []

    async def __call__(self, call: Call) -> Message:
        self.started.append(call.id)
        await self.release.wait()
        return {"jsonrpc": "2.0", "id": call.id, "result": {"ok": call.id}}


def call(rid: Any, method: str = "tools/call") -> Call:
    return Call(method, {}, rid, "2025-11-25", Sink())


async def served(connection: Connection, each: Call, answers: Answers) -> None:
    """What a transport hands `start`: `serve` in the task, its answer sent on (here: nowhere)."""
    await connection.serve(each, answers)


@pytest.mark.parametrize(("sent", "named", "interrupted"), [
    (7, 7, True), (7, "7", True), ("7", 7, True), ("a", "a", True), (7, "07", True),
    (7, 8, False), ("a", "A", False), (7, True, False), (7, None, False), (7, 7.0, False),
])
async def test_a_cancellation_names_a_request_as_the_sdks_correlate_ids(
        sent: Any, named: Any, interrupted: bool) -> None:
    answers, connection = Answers(), Connection(Client(Sink(), http=False))
    served: list[Message | None] = []

    async def serve() -> None:
        served.append(await connection.serve(call(sent), answers))
    task = asyncio.get_running_loop().create_task(serve())
    await asyncio.sleep(0)  # one loop step: the task starts serving
    connection.cancel({"requestId": named})
    answers.release.set()
    await task
    assert served == [None] if interrupted else served == [
        {"jsonrpc": "2.0", "id": sent, "result": {"ok": sent}}]


async def test_initialize_is_never_cancelled() -> None:
    answers, connection = Answers(), Connection(Client(Sink(), http=False))
    task = asyncio.get_running_loop().create_task(connection.serve(call(1, "initialize"), answers))
    await asyncio.sleep(0)  # one loop step: the task starts serving
    connection.cancel({"requestId": 1})
    answers.release.set()
    assert (await task) == {"jsonrpc": "2.0", "id": 1, "result": {"ok": 1}}


async def test_a_request_cancelled_before_its_task_ran_leaves_nothing_behind() -> None:
    answers, connection = Answers(), Connection(Client(Sink(), http=False))
    pending = call(3)
    connection.start(pending, served(connection, pending, answers))
    running = tasks_of(connection)
    connection.cancel({"requestId": 3})  # read right after the request, before its task ran
    await ended(running)
    assert answers.started == [] and pending.closed
    assert connection._running == {}


async def test_the_client_going_cancels_everything_it_has_running() -> None:
    answers, connection = Answers(), Connection(Client(Sink(), http=True))
    calls = [call(i) for i in range(3)]
    for each in calls:
        connection.start(each, served(connection, each, answers))
    running = tasks_of(connection)
    await asyncio.sleep(0)  # one loop step: each task starts serving
    connection.close()
    await ended(running)
    assert connection.client.closed
    assert all(c.closed for c in calls) and connection._running == {}


def tasks_of(connection: Connection) -> list[asyncio.Task[object]]:
    return [task for task, _ in connection._running.values()]


async def ended(tasks: list[asyncio.Task[object]]) -> None:
    """Until every task is over (its bookkeeping done: its callbacks run first), a 10 s net."""
    _, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending


def test_correlated_ids() -> None:
    assert [correlated(v) for v in (7, "7", "x", "-3", "1.5")] == [7, 7, "x", -3, "1.5"]
