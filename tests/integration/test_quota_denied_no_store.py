"""A Redis quota costs nothing to a caller refused for another requirement: against a real
redis-server, calls without a token or without the role, through a GuardedMCPServer and the SDK's
own client, and filtered `tools/list` requests, send Redis no command at all (INFO commandstats is
unchanged), while an allowed call sends one EVALSHA. With Redis paused, such a caller
is still refused for what it lacks, never with the store's `error`; an allowed caller is refused
with `error` (fail closed).

Interop, marked, with why: Redis is the component under test (what it executed, read from its own
INFO commandstats; a real server paused and resumed); that a denied call never asks the store is
the default tier's in memory (tests/properties/test_quota_props.py's Guard property).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
from mcp import Client

from mcp_preconditions import ANONYMOUS, Credentials, Guard, Principal, parse_policy
from mcp_preconditions.client import DENIAL_ERRORS_META_KEY
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from tests.fixtures.mcp_servers import denial_payload, run_asgi
from tests.fixtures.redis import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]

OPERATOR = Credentials(principal=Principal.from_claims({"sub": "olga", "role": "mission_control"}))
OBSERVER = Credentials(principal=Principal.from_claims({"sub": "olga", "role": "observer"}))


def policy(redis_url: str) -> bytes:
    return f"""
[state.redis]
url = "{redis_url}"
quota_prefix = "no-store:"
connect_timeout_seconds = 5
read_timeout_seconds = 5
[quotas.hourly]
calls = 100
per_seconds = 3600
store = "redis"
[tools.launch]
requirements = ["auth:oauth2", "auth:claim:role:mission_control", "quota:hourly"]
[guard]
list_filtering = true
lookup_timeout_seconds = 10
""".encode()


def server(guard: Guard, credentials: Credentials, ran: list[str]) -> GuardedMCPServer:
    app = GuardedMCPServer("range", guard=guard, credentials=lambda _request: credentials)

    @app.tool()
    def launch() -> str:
        ran.append("launch")
        return "launched"

    @app.tool()
    def status() -> str:
        return "nominal"

    return app


class Commands:
    """What Redis has executed, by command (INFO commandstats), read on one connection opened
    before the first reading, so that only its own INFO calls add to the counts (left out)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    def __call__(self) -> dict[str, int]:
        stats: dict[str, Any] = self.client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(s["calls"]) + int(s.get("failed_calls", 0))
                for name, s in stats.items() if name != "cmdstat_info"}


def added(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}


async def test_refused_callers_and_listings_send_redis_nothing(
        redis_factory: Callable[[], RedisServer]) -> None:
    store = redis_factory()
    commands = Commands(store.url)
    guard = Guard(parse_policy(policy(store.url), "q.toml"), entry_points=False)
    ran: list[str] = []
    async with run_asgi(server(guard, ANONYMOUS, ran).streamable_http_app()) as anonymous, \
            run_asgi(server(guard, OBSERVER, ran).streamable_http_app()) as observer, \
            run_asgi(server(guard, OPERATOR, ran).streamable_http_app()) as operator:
        async with Client(f"{operator}/mcp", mode="auto") as client:
            assert not (await client.call_tool("launch", {})).is_error  # the script is loaded
            before = commands()
            assert sorted(t.name for t in (await client.list_tools()).tools) == ["launch", "status"]
        for url, unmet in ((anonymous, ["auth:oauth2", "auth:claim:role:mission_control"]),
                           (observer, ["auth:claim:role:mission_control"])):
            async with Client(f"{url}/mcp", mode="auto") as client:
                results = await asyncio.gather(*(client.call_tool("launch", {}) for _ in range(20)))
                assert all(r.is_error and denial_payload(r)["unmet"] == unmet for r in results)
                assert all("retry_after_seconds" not in denial_payload(r)
                           and DENIAL_ERRORS_META_KEY not in (r.meta or {}) for r in results)
                for _ in range(3):  # the tool is hidden for its role, never for its quota
                    assert [t.name for t in (await client.list_tools()).tools] == ["status"]
        assert added(before, commands()) == {}
        async with Client(f"{operator}/mcp", mode="auto") as client:
            assert not (await client.call_tool("launch", {})).is_error
        # One EVALSHA, and the commands its script ran (commandstats counts those too).
        assert added(before, commands()) == {"evalsha": 1, "time": 1, "get": 1, "set": 1}
    assert ran == ["launch"] * 2


async def test_a_paused_redis_refuses_others_for_what_they_lack_and_the_allowed_with_error(
        redis_factory: Callable[[], RedisServer]) -> None:
    store = redis_factory()
    guard = Guard(parse_policy(policy(store.url), "q.toml"), entry_points=False)
    assert (await guard.check("launch", OPERATOR)).allowed
    store.pause()  # a slow Redis: nothing answers
    try:
        for credentials, unmet in ((ANONYMOUS, ("auth:oauth2", "auth:claim:role:mission_control")),
                                   (OBSERVER, ("auth:claim:role:mission_control",))):
            denied = await guard.check("launch", credentials)
            assert not denied.allowed and denied.unmet == unmet and denied.errors == ()
        assert await guard.callable_tools(OPERATOR, ["launch"]) == ["launch"]
        refused = await guard.check("launch", OPERATOR)
        assert not refused.allowed and refused.errors == ("quota:hourly",)
    finally:
        store.resume()
    assert (await guard.check("launch", OPERATOR)).allowed

