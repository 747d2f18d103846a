"""/readyz reports the live backends the policy configures: with `[state.redis]` down, a replica is
"degraded" (calls needing state are denied with `error`) but stays in rotation (status 200): Redis
is shared, and taking every replica out at once would stop the calls that do not need it.

Interop: a real redis-server, stopped and started again under the gateway, is what it checks (the
client's reconnection and the probe's answer when the port refuses); the gateway itself runs
in-process (tests/fixtures/inprocess.py), wired from its command line in the test's event loop, the
logging upstream in memory, /readyz read on its app over the streaming bridge.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fixtures.inprocess import WAIT_SECONDS, logging_gateway
from tests.fixtures.redis import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]


async def test_readyz_follows_redis(tmp_path: Path, redis_factory: Callable[[], RedisServer]) -> None:
    redis = redis_factory()
    policy = tmp_path / "policy.toml"
    # Redis timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a
    # healthy Redis that late (reported down); a stopped one still refuses at once.
    policy.write_text(f'[state.redis]\nurl = "{redis.url}"\n'
                      'connect_timeout_seconds = 3\nread_timeout_seconds = 3\n'
                      '[tools.echo]\nrequirements = ["state:pad.clear"]\n', encoding="utf-8")
    async with logging_gateway(policy, tmp_path / "upstream.jsonl",
                               "--listen", "http://127.0.0.1:0") as gw, gw.http() as http:
        ready = await http.get("/readyz")  # the upstream's tools are loaded: logging_gateway waited
        assert (ready.status_code, ready.json()["status"]) == (200, "ready"), gw.output()
        assert ready.json()["backends"] == {"redis": True}
        redis.stop()
        down = await http.get("/readyz")
        assert (down.status_code, down.json()["status"]) == (200, "degraded")
        assert down.json()["backends"] == {"redis": False}
        redis.start()
        with anyio.fail_after(WAIT_SECONDS):  # each look is a probe of the restarted Redis
            while (back := (await http.get("/readyz")).json())["status"] != "ready":
                await anyio.sleep(0.05)
        assert back["backends"] == {"redis": True}
