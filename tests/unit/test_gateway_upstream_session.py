"""What one server's supervised session does for the rest of the gateway (gateway/upstream/session.py):
work asked for again and again runs one at a time with one more pending (a `list_changed` storm costs
one re-list at a time, and no task each), and concurrent pings share one answer."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio

from mcp_preconditions.gateway.upstream.session import HttpTarget, Upstream


async def test_work_asked_for_during_a_run_runs_once_more_however_often_it_is_asked() -> None:
    upstream = Upstream(HttpTarget("http://127.0.0.1:1/mcp"))
    runs: list[int] = []
    ran = [asyncio.Event() for _ in range(3)]  # (a fourth run fails on its index)
    release = asyncio.Event()

    async def relist() -> None:
        ran[len(runs)].set()
        runs.append(len(runs))
        await release.wait()

    async with anyio.create_task_group() as tg:
        upstream._background = tg
        upstream.spawn_once("notifications/tools/list_changed", relist)
        await settled(ran[0])
        tasks = len(asyncio.all_tasks())
        for _ in range(200_000):  # a storm while the first re-list runs
            upstream.spawn_once("notifications/tools/list_changed", relist)
        assert len(asyncio.all_tasks()) == tasks  # no task per notification
        assert runs == [0]
        release.set()
        await settled(ran[1])  # the one more, pending: over in the step it started (released)
        upstream.spawn_once("notifications/tools/list_changed", relist)  # after: runs again
        await settled(ran[2])
    assert runs == [0, 1, 2]


async def test_a_failing_run_is_logged_and_the_next_request_runs_it_again() -> None:
    upstream = Upstream(HttpTarget("http://127.0.0.1:1/mcp"))
    runs: list[str] = []
    failed = asyncio.Event()

    async def failing() -> None:
        runs.append("ran")
        failed.set()
        raise RuntimeError("down")

    async with anyio.create_task_group() as tg:
        upstream._background = tg
        upstream.spawn_once("k", failing)
        await settled(failed)  # (its run ended in the step that set it: failed, logged)
        failed.clear()
        upstream.spawn_once("k", failing)
        await settled(failed)
    assert runs == ["ran", "ran"]


async def settled(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), 10)  # a safety net, never reached


class _Connected:
    protocol_version = "2025-11-25"


async def test_concurrent_pings_of_one_server_share_one_answer() -> None:
    upstream = Upstream(HttpTarget("http://127.0.0.1:1/mcp"))
    asked: list[str] = []

    pinged, answer = asyncio.Event(), asyncio.Event()

    async def request(method: str, _params: Any, *, timeout: float) -> dict[str, Any]:
        asked.append(method)
        pinged.set()
        await answer.wait()  # answered once the six asked
        return {}

    upstream.current = _Connected()  # type: ignore[assignment]
    upstream.request = request  # type: ignore[method-assign,assignment]
    six = asyncio.gather(*(upstream.reachable(2.0) for _ in range(6)))
    await settled(pinged)  # (the six started in one step, the first asking)
    answer.set()
    answers = await six
    again = await upstream.reachable(2.0)
    assert answers == [True] * 6 and again is True
    assert asked == ["ping", "ping"]  # one for the six at once, one for the later probe
