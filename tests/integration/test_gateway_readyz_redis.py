"""/readyz reports the live backends the policy configures: with `[state.redis]`, a replica whose
redis-server is down is not ready (it would deny every call needing state), and is ready again when
Redis returns. Real redis-server, real gateway process."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

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
    policy.write_text(f'[state.redis]\nurl = "{redis.url}"\n'
                      '[tools.echo]\nrequirements = ["state:pad.clear"]\n', encoding="utf-8")
    with gateway_http(policy, tmp_path / "upstream.jsonl", wait="/readyz") as gw:
        ready = until(200, gw.url, gw.output)  # the upstream's tools load first
        assert ready.json()["backends"] == {"redis": True}
        redis.stop()
        down = until(503, gw.url, gw.output)
        assert down.json()["backends"] == {"redis": False}
        assert down.json()["upstream_connected"] is True  # only Redis is missing
        redis.start()
        assert until(200, gw.url, gw.output).json()["backends"] == {"redis": True}
