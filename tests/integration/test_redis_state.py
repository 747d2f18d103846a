"""`state:KEY` against a real redis-server: values, TTL cache, a killed / stopped / restarted server.

The guard must fail closed (an `error` outcome, call denied) whenever Redis cannot answer, decide
from Redis again as soon as it is back, and never put the Redis URL's password in a record.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
from collections.abc import Callable

import pytest

from mcp_preconditions import Decision, Guard, Identity, PolicySource, Status, parse_policy
from mcp_preconditions.decisions import decision_record
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration
_prefixes = itertools.count()
NOBODY = Identity()


def redis_policy(url: str, *, ttl: float = 0, prefix: str | None = None,
                 url_setting: str = "url", shipped_timeouts: bool = False) -> PolicySource:
    """A policy whose one tool needs `state:weather.clear` from Redis; `url_setting = "url_env"`
    names an environment variable instead (the place for a URL with a password). Its timeouts are
    for two loaded cores (a read slow only because of the load is not an error), unless
    `shipped_timeouts`: the defaults (0.25 s reads, a 0.5 s lookup), for the tests of a down or
    stopped Redis."""
    prefix = prefix if prefix is not None else f"test-{next(_prefixes)}:"
    patient = ("" if shipped_timeouts else
               "connect_timeout_seconds = 5\nread_timeout_seconds = 5\n[guard]\n"
               "lookup_timeout_seconds = 10\n")
    text = f"""
[state]
ttl_seconds = {ttl}
[state.redis]
{url_setting} = "{url}"
prefix = "{prefix}"
{patient}[tools.launch]
requirements = ["state:weather.clear"]
"""
    return parse_policy(text.encode(), "redis-live.toml")


def prefix_of(source: PolicySource) -> str:
    assert source.policy.state.redis is not None
    return source.policy.state.redis.prefix


class Records:
    """A DecisionRecorder keeping every record as JSON text."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def record(self, decision: Decision) -> None:
        self.lines.append(json.dumps(decision_record(decision)))


async def launch(guard: Guard) -> Decision:
    return await guard.check_identity("launch", NOBODY)


async def test_true_or_1_is_true_anything_else_or_missing_is_false(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url)
    values = {"a": "true", "b": "1", "c": "True", "d": "yes", "e": "0", "f": "", "g": " 1"}
    for key, value in values.items():
        assert redis_server.command("SET", prefix_of(source) + key, f'"{value}"') == "+OK"
    tools = {f"t_{key}": [f"state:{key}"] for key in [*values, "missing"]}
    guard = Guard(source, tools, entry_points=False)
    allowed = {key: (await guard.check_identity(f"t_{key}", NOBODY)).allowed
               for key in [*values, "missing"]}
    assert allowed == {"a": True, "b": True, "c": False, "d": False, "e": False, "f": False,
                       "g": False, "missing": False}
    denied = await guard.check_identity("t_missing", NOBODY)
    assert denied.outcomes[0].status is Status.UNSATISFIED
    assert denied.outcomes[0].reason == "state 'missing' is not true (redis)"


async def test_ttl_caches_positive_and_negative_results(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url, ttl=300)
    key = prefix_of(source) + "weather.clear"
    guard = Guard(source, entry_points=False)
    assert not (await launch(guard)).allowed  # missing: a negative result, cached
    redis_server.command("SET", key, "true")
    cached = await launch(guard)
    assert not cached.allowed
    assert cached.outcomes[0].reason == "state 'weather.clear' is not true (redis, cached)"
    fresh = Guard(source, entry_points=False)  # its own cache: reads Redis
    assert (await launch(fresh)).allowed
    redis_server.command("SET", key, "false")
    still = await launch(fresh)
    assert still.allowed
    assert still.outcomes[0].reason == "state 'weather.clear' is true (redis, cached)"


async def test_ttl_zero_reads_redis_on_every_call(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url, ttl=0)
    key = prefix_of(source) + "weather.clear"
    guard = Guard(source, entry_points=False)
    seen = []
    for value in ["true", "false", "1", "0"]:
        redis_server.command("SET", key, value)
        seen.append((await launch(guard)).allowed)
    assert seen == [True, False, True, False]


async def test_down_server_is_an_error_and_the_call_is_denied() -> None:
    port = free_port()  # nothing listens here
    guard = Guard(redis_policy(f"redis://127.0.0.1:{port}/0", shipped_timeouts=True),
                  entry_points=False)
    decision = await launch(guard)
    assert not decision.allowed
    assert decision.errors == ("state:weather.clear",)
    assert decision.outcomes[0].reason.startswith(
        "resolver 'state' raised BackendError: redis GET failed: ConnectionError: Error 111 "
        f"connecting to 127.0.0.1:{port}.")


async def test_killed_mid_run_fails_closed_then_recovers_on_restart(
        redis_factory: Callable[[], RedisServer]) -> None:
    server = redis_factory()
    source = redis_policy(server.url, ttl=0, shipped_timeouts=True)
    key = prefix_of(source) + "weather.clear"
    guard = Guard(source, entry_points=False)
    server.command("SET", key, "true")
    assert [(await launch(guard)).allowed for _ in range(3)] == [True, True, True]

    server.kill()
    down = [await launch(guard) for _ in range(3)]
    assert [d.allowed for d in down] == [False, False, False]
    assert all(d.outcomes[0].status is Status.ERROR for d in down)
    # Redis' own refusal, not the guard's lookup timeout: the failure was prompt.
    assert all("ConnectionError" in d.outcomes[0].reason for d in down), down

    server.start()  # same port; no persistence, so the fact must be set again
    assert (await launch(guard)).outcomes[0].reason == "state 'weather.clear' is not true (redis)"
    server.command("SET", key, "1")
    back = await launch(guard)
    assert back.allowed, back


async def test_stopped_server_times_out_inside_the_lookup_timeout(
        redis_factory: Callable[[], RedisServer]) -> None:
    server = redis_factory()
    source = redis_policy(server.url, ttl=0, shipped_timeouts=True)  # read 0.25 s < lookup 0.5 s
    server.command("SET", prefix_of(source) + "weather.clear", "true")
    guard = Guard(source, entry_points=False)
    assert (await launch(guard)).allowed
    server.pause()
    try:
        slow = await launch(guard)
    finally:
        server.resume()
    assert not slow.allowed
    assert slow.outcomes[0].status is Status.ERROR
    assert slow.outcomes[0].reason == ("resolver 'state' raised BackendError: redis GET failed: "
                                       f"TimeoutError: Timeout reading from 127.0.0.1:{server.port}")
    assert (await launch(guard)).allowed


async def test_the_url_password_never_reaches_a_reason_or_a_record(
        redis_factory: Callable[[], RedisServer], monkeypatch: pytest.MonkeyPatch) -> None:
    server = redis_factory()
    assert server.command("CONFIG", "SET", "requirepass", "the-right-one") == "+OK"
    secret = "pw-7c1e0b9d-never-log-me"
    monkeypatch.setenv("TEST_REDIS_URL_WITH_PASSWORD",
                       f"redis://:{secret}@127.0.0.1:{server.port}/0")  # a wrong password
    records = Records()
    guard = Guard(redis_policy("TEST_REDIS_URL_WITH_PASSWORD", url_setting="url_env"),
                  entry_points=False, recorder=records)
    decision = await launch(guard)
    assert not decision.allowed
    assert decision.outcomes[0].status is Status.ERROR
    assert "AuthenticationError" in decision.outcomes[0].reason
    assert records.lines and all(secret not in line for line in records.lines)
    assert secret not in repr(RedisStateSource.from_policy(
        guard.snapshot.source.policy.state.redis))  # type: ignore[arg-type]


async def test_set_helper_writes_under_the_prefix(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url)
    redis = RedisStateSource.from_policy(source.policy.state.redis)  # type: ignore[arg-type]
    await redis.set("door.closed", True)
    assert redis_server.command("GET", prefix_of(source) + "door.closed") == "$4"
    assert await redis.get("door.closed") is True
    await redis.set("door.closed", False)
    assert await redis.get("door.closed") is False
    await redis.delete("door.closed")
    assert redis_server.command("EXISTS", prefix_of(source) + "door.closed") == ":0"
    await redis.aclose()


def get_calls(server: RedisServer) -> int:
    """How many GET commands the server has run (INFO commandstats, a RESP bulk string)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"INFO commandstats\r\n")
        data = s.recv(65536)
        header, _, body = data.partition(b"\r\n")
        while len(body) < int(header[1:]):
            body += s.recv(65536)
    match = re.search(r"cmdstat_get:calls=(\d+)", body.decode())
    return int(match.group(1)) if match else 0


async def test_concurrent_lookups_of_one_key_share_one_get(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url, ttl=0)
    redis_server.command("SET", prefix_of(source) + "weather.clear", "true")
    guard = Guard(source, entry_points=False)
    assert (await launch(guard)).allowed  # connected and warm
    before = get_calls(redis_server)
    decisions = await asyncio.gather(*(launch(guard) for _ in range(50)))
    assert all(d.allowed for d in decisions)
    assert get_calls(redis_server) - before == 1


def test_the_synchronous_decide_path_works_and_keeps_no_dead_loops(redis_server: RedisServer) -> None:
    source = redis_policy(redis_server.url, ttl=0)
    redis_server.command("SET", prefix_of(source) + "weather.clear", "1")
    guard = Guard(source, entry_points=False)
    assert [guard.decide("launch", NOBODY).allowed for _ in range(5)] == [True] * 5  # a loop each
    redis = guard.snapshot.registry.get("state").source  # type: ignore[union-attr]
    assert isinstance(redis, RedisStateSource)
    assert len(redis._loops) <= 1  # clients of closed loops are dropped, not kept forever
