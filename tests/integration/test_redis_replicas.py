"""Two guards in two processes share one redis-server: both see a state flip once the TTL has passed.

Each replica is a real subprocess with its own cache; until its cache entry expires a replica may
still answer from it, and then its reason says `cached`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TTL = 0.5
WAIT_SECONDS = 10.0  # the safety net of a wait for a replica's cache entry to expire
POLL_SECONDS = 0.02  # between two questions to a replica while its answer is cached

REPLICA = """
import asyncio, json, sys
from mcp_preconditions import Guard, Identity, load_policy

async def main() -> None:
    guard = Guard(load_policy(sys.argv[1]), entry_points=False)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        decision = await guard.check_identity(line.strip(), Identity())
        outcome = decision.outcomes[0]
        print(json.dumps({"allowed": decision.allowed, "status": outcome.status.value,
                          "reason": outcome.reason}), flush=True)

asyncio.run(main())
"""


class Replica:
    def __init__(self, script: Path, policy: Path) -> None:
        self.process = subprocess.Popen([sys.executable, str(script), str(policy)], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, tool: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(tool + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"replica exited with {self.process.wait()}"
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()  # end of input: the replica exits
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def fresh(replica: Replica, tool: str) -> dict[str, Any]:
    """The replica's first answer that is not from its cache. The entry expires on the replica's
    own clock, in its own process, which tells nobody: no event exists to wait for, so it is asked
    again at short intervals (`POLL_SECONDS`), WAIT_SECONDS at most (then its cached answer is
    returned, and the caller's assertion says what it was)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while "cached" in str((answer := replica.ask(tool))["reason"]) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return answer


@pytest.fixture
def replicas(tmp_path: Path, redis_server: RedisServer) -> Iterator[list[Replica]]:
    policy = tmp_path / "replica.toml"
    # Timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a healthy
    # Redis that late (an `error`, where the test expects Redis's answer); a paused one still
    # times out (at the read timeout: a TimeoutError).
    policy.write_text(f"""
[guard]
lookup_timeout_seconds = 5
[state]
ttl_seconds = {TTL}
[state.redis]
url = "{redis_server.url}"
prefix = "replicas:"
connect_timeout_seconds = 2
read_timeout_seconds = 2
[tools.launch]
requirements = ["state:weather.clear"]
""")
    script = tmp_path / "replica.py"
    script.write_text(REPLICA)
    started = [Replica(script, policy), Replica(script, policy)]
    yield started
    for replica in started:
        replica.close()


def test_both_replicas_see_a_flip_within_the_ttl(replicas: list[Replica],
                                                 redis_server: RedisServer) -> None:
    redis_server.command("SET", "replicas:weather.clear", "false")
    assert [r.ask("launch")["allowed"] for r in replicas] == [False, False]
    for value, allowed in [("true", True), ("false", False), ("1", True)]:
        assert redis_server.command("SET", "replicas:weather.clear", value) == "+OK"
        for answer in (r.ask("launch") for r in replicas):
            # Before the TTL has passed a replica may answer from its cache, and says so.
            assert answer["allowed"] is allowed or "cached" in answer["reason"], answer
        after = [fresh(r, "launch") for r in replicas]
        assert [a["allowed"] for a in after] == [allowed, allowed], after
        assert all(a["status"] == ("satisfied" if allowed else "unsatisfied") for a in after)


def test_a_redis_outage_denies_every_replica(replicas: list[Replica],
                                             redis_server: RedisServer) -> None:
    redis_server.command("SET", "replicas:weather.clear", "true")
    assert [r.ask("launch")["allowed"] for r in replicas] == [True, True]
    redis_server.pause()
    try:
        during = [fresh(r, "launch") for r in replicas]  # once the cached `true` has expired
    finally:
        redis_server.resume()
    assert [(a["allowed"], a["status"]) for a in during] == [(False, "error"), (False, "error")]
    assert all("TimeoutError" in a["reason"] for a in during), during
    # Failures are never cached: the first call after the outage reads Redis again.
    assert [r.ask("launch")["allowed"] for r in replicas] == [True, True]
