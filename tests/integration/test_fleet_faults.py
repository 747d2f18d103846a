"""Each server stands alone (SPEC §12): behind one gateway, one server killed mid-call, one hung (it
never answers `initialize`), one that never starts (it exits at once) and one that lists a name
twice. The others keep answering within the call timeout, nothing is wrongly allowed, and
`/readyz` names the servers that are down while it stays 200.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from mcp_preconditions.gateway.fleet import HANDSHAKE_SECONDS
from tests.fixtures.fleet import (
    DEAD,
    HUNG,
    base_url,
    command,
    fleet_http,
    kill,
    logging_upstream,
    pids_with,
    write_gateway_toml,
)
from tests.fixtures.gateway_upstream import ECHO_RESULT, tool_calls
from tests.fixtures.upstreams import Listening

pytestmark = pytest.mark.integration

CALL_TIMEOUT = 20.0
RECOVERY_SECONDS = 60.0  # a restart with backoff, on a loaded machine
POLICY = f"""
[tools.good__echo]
requirements = ["auth:claim:role:observer"]
[gateway]
call_timeout_seconds = {CALL_TIMEOUT}
"""


@dataclass
class Fleet:
    gateway: Listening
    logs: dict[str, Path]

    @property
    def base(self) -> str:
        return base_url(self.gateway)

    def readyz(self) -> tuple[int, dict[str, Any]]:
        answer = httpx.get(self.base + "/readyz", timeout=30)
        return answer.status_code, answer.json()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("good", "victim", "dup")}
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
        "good": logging_upstream(logs["good"]),
        "victim": logging_upstream(logs["victim"]),
        "hung": command(HUNG),
        "dead": command(DEAD),
        "dup": logging_upstream(logs["dup"], GATEWAY_UPSTREAM_DUP="1"),
    })
    with fleet_http(config) as gateway:
        yield Fleet(gateway, logs)


async def timed_call(client: Client, name: str, arguments: dict[str, Any] | None = None
                     ) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = await client.call_tool(name, arguments or {"seconds": 0})
    return (result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"}),
            time.monotonic() - started)


def until(condition: Any, what: str, seconds: float = RECOVERY_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_readyz_names_the_down_servers_and_stays_200(fleet: Fleet) -> None:
    until(lambda: fleet.readyz()[1]["servers"]["dup"]["tools_loaded"], "dup never listed")
    status, body = fleet.readyz()
    assert status == 200, body
    assert body["status"] == "degraded"
    assert sorted(body["down"]) == ["dead", "hung"]
    assert body["servers"]["good"] == {"connected": True, "tools_loaded": True}
    assert body["servers"]["hung"] == {"connected": False, "tools_loaded": False}
    assert body["listed_twice"] == {"dup__dup": "dup"}
    assert "collisions" not in body


async def test_the_others_answer_while_one_is_killed_mid_call_one_hangs_one_never_starts(
        fleet: Fleet) -> None:
    async with Client(fleet.gateway.url, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        # The victim is busy with a call when it is killed.
        victim_pids = pids_with("GATEWAY_UPSTREAM_LOG", str(fleet.logs["victim"]))
        assert len(victim_pids) == 1, victim_pids
        async with anyio.create_task_group() as tg:
            killed: dict[str, Any] = {}

            async def slow() -> None:
                killed["result"], killed["seconds"] = await timed_call(
                    client, "victim__slow", {"seconds": 600})
            tg.start_soon(slow)
            while "slow" not in tool_calls(fleet.logs["victim"]):
                await anyio.sleep(0.05)
            kill(victim_pids[0])
        # Meanwhile, and after, every other server answers.
        others = {name: await timed_call(client, name) for name in
                  ("good__echo", "good__slow", "dup__echo", "hung__echo", "dead__echo", "dup__dup",
                   "good__secret", "victim__echo")}
    assert "victim__slow" in names and "good__echo" in names and "dup__echo" in names
    assert not [n for n in names if n.startswith(("hung__", "dead__"))]
    assert "dup__dup" not in names
    assert killed["result"]["isError"] is True
    assert killed["result"]["content"][0]["text"].startswith("server victim ")
    assert killed["seconds"] < CALL_TIMEOUT  # the exit is seen, not waited out
    assert all(seconds < CALL_TIMEOUT for _, seconds in others.values()), others
    # Anonymous: good__echo needs the observer role.
    assert others["good__echo"][0]["structuredContent"]["unmet"] == ["auth:claim:role:observer"]
    assert others["good__slow"][0]["content"] == [{"type": "text", "text": "slow done"}]
    assert others["dup__echo"][0]["structuredContent"] == ECHO_RESULT["structuredContent"]
    for name in ("hung__echo", "dead__echo"):
        assert others[name][0]["structuredContent"] == {"error": "unlisted_tool", "tool": name,
                                                        "unmet": [], "withheld": 0}
    assert others["dup__dup"][0]["content"][0]["text"] == (
        "Tool 'dup__dup' was not run: its server lists more than one tool of that name. "
        "Ask an operator.")
    assert others["good__secret"][0]["structuredContent"]["unmet"] == ["auth:claim:role:admin"]
    # The victim's tools stay listed from its last good listing; a call while it restarts is a
    # tool error naming it, and once it is back it answers again.
    victim_echo = others["victim__echo"][0]
    assert victim_echo.get("isError") is not True or \
        victim_echo["content"][0]["text"].startswith("server victim ")
    # 0 wrong allows: each server received exactly the allowed calls, by their own names.
    assert tool_calls(fleet.logs["good"]) == ["slow"]
    assert tool_calls(fleet.logs["dup"]) == ["echo"]
    assert tool_calls(fleet.logs["victim"]) in (["slow"], ["slow", "echo"])


async def test_a_killed_server_is_restarted_and_readyz_follows(fleet: Fleet) -> None:
    until(lambda: fleet.readyz()[1]["servers"]["victim"]["tools_loaded"], "victim never listed")
    for pid in pids_with("GATEWAY_UPSTREAM_LOG", str(fleet.logs["victim"])):
        kill(pid)
    until(lambda: "victim" in fleet.readyz()[1]["down"] or
          len(pids_with("GATEWAY_UPSTREAM_LOG", str(fleet.logs["victim"]))) == 1, "no restart seen")
    assert fleet.readyz()[0] == 200  # the others are up
    until(lambda: "victim" not in fleet.readyz()[1]["down"], "victim not restarted")
    async with Client(fleet.gateway.url, mode="auto") as client:
        echoed, _ = await timed_call(client, "victim__echo")
    assert echoed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert sorted(fleet.readyz()[1]["down"]) == ["dead", "hung"]


def test_a_hung_server_is_timed_out_and_started_again_on_its_own(tmp_path: Path) -> None:
    """Its handshake is bounded (the call timeout, at least HANDSHAKE_SECONDS): the process is
    dropped and a new one started with backoff, while the other server answers throughout."""
    policy = tmp_path / "policy.toml"
    # Below HANDSHAKE_SECONDS (the bound used), and ample for `good__echo`, which it bounds too.
    policy.write_text("[gateway]\ncall_timeout_seconds = 10\n", encoding="utf-8")
    marker = str(tmp_path)
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
        "good": logging_upstream(tmp_path / "good.jsonl"),
        "hung": command(HUNG, {"FLEET_TEST_HUNG": marker})})
    with fleet_http(config) as gateway:
        until(lambda: len(pids_with("FLEET_TEST_HUNG", marker)) == 1, "never started")
        first = pids_with("FLEET_TEST_HUNG", marker)
        until(lambda: pids_with("FLEET_TEST_HUNG", marker) not in ([], first), "never restarted",
              HANDSHAKE_SECONDS + RECOVERY_SECONDS)
        again = pids_with("FLEET_TEST_HUNG", marker)
        echoed = anyio.run(_echo, gateway.url)
        answer = httpx.get(base_url(gateway) + "/readyz", timeout=30)
    assert first[0] not in again
    assert echoed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert answer.status_code == 200 and answer.json()["down"] == ["hung"]


async def _echo(url: str) -> dict[str, Any]:
    async with Client(url, mode="legacy") as client:
        result, _ = await timed_call(client, "good__echo")
    return result


def test_readyz_is_503_when_no_server_is_up(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    config = write_gateway_toml(tmp_path / "gateway.toml", policy,
                                {"hung": command(HUNG), "dead": command(DEAD)},
                                listen="http://127.0.0.1:0")
    from tests.fixtures.gateway_upstream import started
    from tests.fixtures.mcp_servers import CLI, server_env
    from tests.fixtures.ports import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with started([*CLI, "gateway", "--config", str(config), "--listen", base], server_env(), base,
                 base + "/healthz") as gateway:
        assert httpx.get(base + "/healthz", timeout=30).status_code == 200
        answer = httpx.get(base + "/readyz", timeout=30)
        output = gateway.output()
    assert answer.status_code == 503, output
    assert answer.json()["status"] == "not ready"
    assert sorted(answer.json()["down"]) == ["dead", "hung"]
