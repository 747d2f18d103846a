"""Each server of a many-server gateway lives on its own (SPEC §12), through `gateway --config` in
front of two real servers (tests/fixtures/gateway_upstream.py): one that crashes and stays down (or
comes back hung) keeps its tools listed from its last good listing, its calls fail with a tool error
within the call timeout while the other server's work, and once it is back its tools work again; a
call that hangs is cut off at the call timeout and told to its server alone; `list_changed` from
one server re-lists that server alone (as both servers' own logs show) and the clients see its new
tool under its prefix.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client

from tests.fixtures.fleet import (
    DEAD,
    HUNG,
    Entry,
    base_url,
    command,
    fleet_http,
    logging_upstream,
    write_gateway_toml,
)
from tests.fixtures.gateway_upstream import read_log, tool_calls
from tests.fixtures.upstreams import Listening
from tests.integration.test_fleet_requests import stdio_fleet

pytestmark = pytest.mark.integration

CALL_TIMEOUT = 20.0
WAIT = 60.0  # liveness: servers starting, a restart with backoff, on a loaded machine
HANDSHAKE_WAIT = 30.0 + WAIT  # a hung handshake is dropped after HANDSHAKE_SECONDS


def policy(tmp: Path, timeout: float = CALL_TIMEOUT) -> Path:
    path = tmp / "policy.toml"
    path.write_text(f"[gateway]\ncall_timeout_seconds = {timeout}\n", encoding="utf-8")
    return path


def gated(go: Path, tried: Path, log: Path, otherwise: list[str]) -> Entry:
    """The test upstream while the file `go` exists; once it is gone, a start adds a line to
    `tried` and runs `otherwise` (a server that exits at once, or one that never answers
    `initialize`)."""
    script = ('if [ -e "$FLEET_GO" ]; then exec "$0" -m tests.fixtures.gateway_upstream stdio; fi; '
              'echo started >> "$FLEET_TRIED"; exec "$@"')
    return command(["sh", "-c", script, sys.executable, *otherwise],
                   {"GATEWAY_UPSTREAM_LOG": str(log), "FLEET_GO": str(go), "FLEET_TRIED": str(tried)})


@contextmanager
def fleet(tmp: Path, servers: dict[str, Entry], timeout: float = CALL_TIMEOUT) -> Iterator[Listening]:
    """`gateway --config` over HTTP, once every server has listed its tools."""
    config = write_gateway_toml(tmp / "gateway.toml", policy(tmp, timeout), servers)
    with fleet_http(config) as gateway:
        wait_readyz(gateway, lambda b: all(s["tools_loaded"] for s in b["servers"].values()),
                    "servers never listed", WAIT)
        yield gateway


def readyz(gateway: Listening) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(base_url(gateway) + "/readyz", timeout=30).json()
    return body


def wait_readyz(gateway: Listening, condition: Any, what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition(body := readyz(gateway)):
        assert time.monotonic() < deadline, f"{what}: {body}"
        time.sleep(0.2)


async def call(client: Client, name: str, arguments: dict[str, Any] | None = None,
               seconds: float = WAIT) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        result = await client.call_tool(name, arguments if arguments is not None else {"seconds": 0})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


def done(name: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": f"{name} done"}]


async def retry_logged(gateway: Listening, key: str) -> str:
    """The gateway's log line saying why a start of server `key` failed (it retries with backoff)."""
    with anyio.fail_after(HANDSHAKE_WAIT):
        while True:
            lines = [line for line in gateway.output().splitlines()
                     if line.startswith(f"mcp_preconditions.gateway: upstream {key} (")
                     and line.endswith("(retrying with backoff)")]
            if lines:
                return lines[0]
            await anyio.sleep(0.1)


async def names(client: Client) -> list[str]:
    return sorted(t.name for t in (await client.list_tools()).tools)


# --- 4. a server down, hung, or slow --------------------------------------------------------------
@pytest.mark.parametrize("then", ["exits", "hangs"])
async def test_a_crashed_server_keeps_its_listing_fails_alone_and_works_once_back(
        tmp_path: Path, then: str) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    go, tried = tmp_path / "go", tmp_path / "tried"
    go.touch()
    servers = {"a": gated(go, tried, logs["a"], DEAD if then == "exits" else HUNG),
               "b": logging_upstream(logs["b"])}
    with fleet(tmp_path, servers) as gw:
        async with Client(gw.url, mode="legacy") as client:
            listed = await names(client)
            first = await call(client, "a__echo")
            go.unlink()  # from now on a start of a fails (it exits, or hangs in its handshake)
            crashed = await call(client, "a__crash", seconds=CALL_TIMEOUT)
            with anyio.fail_after(WAIT):  # the gateway has started a again: a is down for sure
                while not tried.exists():
                    await anyio.sleep(0.05)
            if then == "exits":  # seen as an exit, not waited on until the handshake times out
                retried = await retry_logged(gw, "a")
            down = readyz(gw)
            while_down = await names(client)
            a_down = await call(client, "a__echo", seconds=CALL_TIMEOUT)
            b_up = {name: await call(client, name) for name in ("b__echo", "b__slow")}
            go.touch()
            wait_readyz(gw, lambda b: b["down"] == [], "a never came back", HANDSHAKE_WAIT)
            back = await call(client, "a__echo")
            after = await names(client)
    if then == "exits":
        assert "Connection closed (retrying with backoff)" in retried, retried
    assert down["down"] == ["a"] and down["servers"]["a"] == {"connected": False, "tools_loaded": True}
    assert "a__echo" in listed and "b__echo" in listed
    assert first["isError"] is False
    assert crashed["isError"] is True and crashed["content"][0]["text"].startswith("server a ")
    assert while_down == listed == after  # a's tools stay listed from its last good listing
    assert a_down["isError"] is True and a_down["content"][0]["text"].startswith("server a ")
    assert b_up["b__echo"]["isError"] is False and b_up["b__slow"]["content"] == done("slow")
    assert back["isError"] is False and back["structuredContent"]["echo"] == "hi"
    # The call made while a was down never reached any process of a; b got only its own calls.
    assert tool_calls(logs["a"]) == ["echo", "crash", "echo"]
    assert tool_calls(logs["b"]) == ["echo", "slow"]


async def test_a_hung_call_is_cut_off_alone_while_the_other_server_answers(tmp_path: Path) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    # The timeout bounds the other calls too: 10 s, so a loaded machine cannot cut them.
    with fleet(tmp_path, {k: logging_upstream(log) for k, log in logs.items()}, timeout=10) as gw:
        async with Client(gw.url, mode="legacy") as one, Client(gw.url, mode="legacy") as two:
            hung: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                async def slow() -> None:
                    hung["result"] = await call(one, "a__slow", {"seconds": 600})
                tg.start_soon(slow)
                with anyio.fail_after(WAIT):
                    while "slow" not in tool_calls(logs["a"]):
                        await anyio.sleep(0.05)
                echoed = await call(two, "b__echo")
            again = await call(two, "a__echo")
    assert hung["result"]["isError"] is True
    assert hung["result"]["content"][0]["text"].startswith("server a ")
    assert echoed["isError"] is False and again["isError"] is False
    # a is told its call was abandoned (the one it was asked, by its id); b is told nothing.
    assert [e["method"] for e in read_log(logs["a"]) if e["method"].startswith("notifications/cancel")] \
        == ["notifications/cancelled"]
    assert not [e for e in read_log(logs["b"]) if e["method"] == "notifications/cancelled"]
    assert tool_calls(logs["a"]) == ["slow", "echo"] and tool_calls(logs["b"]) == ["echo"]


# --- 5. list_changed ------------------------------------------------------------------------------
def listings(log: Path) -> int:
    """How many tools/list requests a server received."""
    return sum(1 for e in read_log(log) if e["method"] == "tools/list")


class Changes:
    """Counts the tools/list_changed a client hears (a 2025-11-25 notification, or a 2026-07-28
    listen stream's event)."""

    def __init__(self) -> None:
        self.seen = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.seen += 1

    async def follow(self, subscription: Any) -> None:
        async for _ in subscription:
            self.seen += 1


async def flipped(client: Client, changes: Changes, key: str) -> list[str]:
    """Call KEY__flip; once the client has heard of the change and lists KEY__extra0, its tools."""
    before = changes.seen
    result = await call(client, f"{key}__flip", {})
    assert result["content"] == done("flip"), result
    with anyio.fail_after(WAIT):
        while changes.seen == before:
            await anyio.sleep(0.05)
    with anyio.fail_after(WAIT):  # the notification comes once the server is listed again
        while f"{key}__extra0" not in (listed := await names(client)):
            await anyio.sleep(0.1)
    return listed


@pytest.mark.parametrize(("listener", "mode", "server"), [
    ("http", "legacy", "2025"), ("http", "auto", "2025"), ("http", "legacy", "2026"),
    ("stdio", "legacy", "2025"), ("stdio", "auto", "2026")])
async def test_list_changed_from_one_server_relists_it_alone(
        tmp_path: Path, listener: str, mode: str, server: str) -> None:
    """a's `flip` adds a tool and says its list changed: a alone is asked for its tools again, and
    the client sees a__extra0; then the same from b. `server`: the protocol version the servers
    speak (a 2026-07-28 server says it on a listen stream)."""
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    env = {"GATEWAY_UPSTREAM_MODERN_ONLY": "1"} if server == "2026" else {}
    servers = {key: logging_upstream(log, **env) for key, log in logs.items()}
    changes = Changes()
    async with AsyncExitStack() as stack:
        if listener == "http":
            gw = stack.enter_context(fleet(tmp_path, servers))
            target: Any = gw.url
        else:
            target = stdio_fleet(tmp_path, servers)
        client = await stack.enter_async_context(
            Client(target, mode=mode, message_handler=changes, cache=None))
        with anyio.fail_after(WAIT):
            while not {"a__echo", "b__echo"} <= set(original := await names(client)):
                await anyio.sleep(0.2)
        if mode == "auto":
            subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
            tg = await stack.enter_async_context(anyio.create_task_group())
            tg.start_soon(changes.follow, subscription)
        counts = {key: listings(log) for key, log in logs.items()}
        after_a = await flipped(client, changes, "a")
        counts_a = {key: listings(log) for key, log in logs.items()}
        after_b = await flipped(client, changes, "b")
        counts_b = {key: listings(log) for key, log in logs.items()}
        extra = await call(client, "a__extra0", {})
        if mode == "auto":
            tg.cancel_scope.cancel()
    assert counts_a["b"] == counts["b"] and counts_a["a"] > counts["a"]
    assert counts_b["a"] == counts_a["a"] and counts_b["b"] > counts_a["b"]
    assert after_a == sorted([*original, "a__extra0"])
    assert after_b == sorted([*original, "a__extra0", "b__extra0"])
    assert extra["content"] == done("extra0")
    assert tool_calls(logs["a"]) == ["flip", "extra0"] and tool_calls(logs["b"]) == ["flip"]
