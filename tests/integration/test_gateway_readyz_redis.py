"""/readyz reports the live backends the policy configures: with `[state.redis]` down, a replica is
"degraded" (calls needing state are denied with `error`) but stays in rotation (status 200): Redis
is shared, and taking every replica out at once would stop the calls that do not need it. Real
redis-server, real gateway process."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fixtures.flagd import eventually
from tests.fixtures.gateway_upstream import gateway_http
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration


def readyz(url: str) -> httpx.Response:
    return httpx.get(url + "/readyz", timeout=30)


def until(status: int, url: str, output: Callable[[], str]) -> httpx.Response:
    deadline = time.monotonic() + 30
    while (answer := readyz(url)).status_code != status:
        assert time.monotonic() < deadline, output()
        time.sleep(0.2)
    return answer


def test_readyz_follows_redis(tmp_path: Path, redis_factory: Callable[[], RedisServer]) -> None:
    redis = redis_factory()
    policy = tmp_path / "policy.toml"
    # Redis timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a
    # healthy Redis that late (reported down); a stopped one still refuses at once.
    policy.write_text(f'[state.redis]\nurl = "{redis.url}"\n'
                      'connect_timeout_seconds = 3\nread_timeout_seconds = 3\n'
                      '[tools.echo]\nrequirements = ["state:pad.clear"]\n', encoding="utf-8")
    with gateway_http(policy, tmp_path / "upstream.jsonl", wait="/readyz") as gw:
        ready = until(200, gw.url, gw.output)  # the upstream's tools load first
        assert ready.json()["backends"] == {"redis": True}
        assert ready.json()["status"] == "ready"
        redis.stop()
        down = readyz(gw.url)
        assert (down.status_code, down.json()["status"]) == (200, "degraded")
        assert down.json()["backends"] == {"redis": False}
        redis.start()
        back = eventually(lambda: readyz(gw.url).json()["status"], "ready", 30)
        assert back == "ready"
