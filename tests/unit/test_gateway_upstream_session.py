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
    release = asyncio.Event()

    async def relist() -> None:
        runs.append(len(runs))
        await release.wait()

    async with anyio.create_task_group() as tg:
        upstream._background = tg
        upstream.spawn_once("notifications/tools/list_changed", relist)
        await asyncio.sleep(0.01)
        tasks = len(asyncio.all_tasks())
        for _ in range(200_000):  # a storm while the first re-list runs
            upstream.spawn_once("notifications/tools/list_changed", relist)
        assert len(asyncio.all_tasks()) == tasks  # no task per notification
        assert runs == [0]
        release.set()
        await asyncio.sleep(0.05)
        upstream.spawn_once("notifications/tools/list_changed", relist)  # after: runs again
        await asyncio.sleep(0.05)
    assert runs == [0, 1, 2]


async def test_a_failing_run_is_logged_and_the_next_request_runs_it_again() -> None:
    upstream = Upstream(HttpTarget("http://127.0.0.1:1/mcp"))
    runs: list[str] = []

    async def failing() -> None:
        runs.append("ran")
        raise RuntimeError("down")

    async with anyio.create_task_group() as tg:
        upstream._background = tg
        upstream.spawn_once("k", failing)
        await asyncio.sleep(0.01)
        upstream.spawn_once("k", failing)
        await asyncio.sleep(0.01)
    assert runs == ["ran", "ran"]


class _Connected:
    protocol_version = "2025-11-25"


async def test_concurrent_pings_of_one_server_share_one_answer() -> None:
    upstream = Upstream(HttpTarget("http://127.0.0.1:1/mcp"))
    asked: list[str] = []

    async def request(method: str, _params: Any, *, timeout: float) -> dict[str, Any]:
        asked.append(method)
        await asyncio.sleep(0.05)
        return {}

    upstream.current = _Connected()  # type: ignore[assignment]
    upstream.request = request  # type: ignore[method-assign,assignment]
    answers = await asyncio.gather(*(upstream.reachable(2.0) for _ in range(6)))
    again = await upstream.reachable(2.0)
    assert answers == [True] * 6 and again is True
    assert asked == ["ping", "ping"]  # one for the six at once, one for the later probe
