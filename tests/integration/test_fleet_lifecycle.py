"""Each server of a many-server gateway lives on its own (SPEC §12), through `gateway --config` in
front of two servers (tests/fixtures/gateway_upstream.py): one that crashes and stays down (or comes
back hung) keeps its tools listed from its last good listing, its calls fail with a tool error
within the call timeout while the other server's work, and once it is back its tools work again; a
call that hangs is cut off at the call timeout and told to its server alone; `list_changed` from
one server re-lists that server alone (as both servers' own logs show) and the clients see its new
tool under its prefix.

In-process (tests/fixtures/inprocess.py): the gateway wired from its gateway.toml in the test's event
loop, its servers in memory (a crash ends one; a start that should fail exits at once or never
answers its handshake), each wait on the event it needs (a start, a log line, a listing). The gateway
listening on stdio stays with a real process (its own test cases, marked interop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.fixtures.fleet import Entry, command, logging_upstream, write_gateway_toml
from tests.fixtures.gateway_upstream import LoggingUpstream, read_log, tool_calls
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway, until
from tests.fixtures.memory_upstream import Exits, Hangs, MemoryServers, Serving, logging_env
from tests.integration.test_fleet_requests import stdio_fleet

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALL_TIMEOUT = 20.0
WAIT = WAIT_SECONDS  # every wait here is on an event: a start, a log line, a listing
# Where a test waits for the gateway's own timeouts: a hung handshake is dropped after
# max(call timeout, fleet.HANDSHAKE_SECONDS), both set this short for it (the constant has no seam
# of its own yet: patched); an answer in this process takes milliseconds.
SHORT = 3.0


def policy(tmp: Path, timeout: float = CALL_TIMEOUT) -> Path:
    path = tmp / "policy.toml"
    path.write_text(f"[gateway]\ncall_timeout_seconds = {timeout}\n", encoding="utf-8")
    return path


class Gate:
    """A server that is the logging upstream while `go` is set; once it is not, each start is
    counted in `tried` and runs `otherwise` (a server that exits at once, or one that never
    answers `initialize`)."""

    def __init__(self, log: Path, otherwise: type[Exits]) -> None:
        self.go = True
        self.tried = 0
        self._log = log
        self._otherwise = otherwise

    def __call__(self, env: Any, die: Any) -> Serving:
        if self.go:
            return LoggingUpstream({**env, **logging_env(self._log)}, die).build()
        self.tried += 1
        return self._otherwise()


def memory(servers: MemoryServers, key: str, log: Path, **env: str) -> Entry:
    """A `[servers.KEY]` entry: the logging upstream in memory, recording in `log`."""
    return command(servers.logging_upstream(key, **logging_env(log, **env)))


@asynccontextmanager
async def fleet(tmp: Path, servers: dict[str, Entry], timeout: float = CALL_TIMEOUT
                ) -> AsyncIterator[InProcess]:
    """`gateway --config` over HTTP in-process, once every server has listed its tools."""
    config = write_gateway_toml(tmp / "gateway.toml", policy(tmp, timeout), servers)
    async with cli_gateway(["--config", str(config), "--listen", "http://127.0.0.1:0"]) as gateway:
        await gateway.until_ready(lambda b: all(s["tools_loaded"] for s in b["servers"].values()))
        yield gateway


async def call(client: Client, name: str, arguments: dict[str, Any] | None = None,
               seconds: float = WAIT) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        result = await client.call_tool(name, arguments if arguments is not None else {"seconds": 0})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


def done(name: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": f"{name} done"}]


async def retry_logged(gateway: InProcess, key: str) -> str:
    """The gateway's log line saying why a start of server `key` failed (it retries with backoff)."""
    return await gateway.logged(
        rf"^mcp_preconditions\.gateway: upstream {key} \(.*\(retrying with backoff\)$")


async def names(client: Client) -> list[str]:
    return sorted(t.name for t in (await client.list_tools()).tools)


# --- 4. a server down, hung, or slow --------------------------------------------------------------
@pytest.mark.parametrize("then", ["exits", "hangs"])
async def test_a_crashed_server_keeps_its_listing_fails_alone_and_works_once_back(
        tmp_path: Path, then: str, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    gate = Gate(logs["a"], Exits if then == "exits" else Hangs)
    monkeypatch.setattr("mcp_preconditions.gateway.fleet.HANDSHAKE_SECONDS", SHORT)
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {"a": command(memory_servers.add("a", gate)),
                   "b": memory(memory_servers, "b", logs["b"])}
        async with fleet(tmp_path, servers, timeout=SHORT) as gw, gw.client("legacy") as client:
            listed = await names(client)
            first = await call(client, "a__echo")
            gate.go = False  # from now on a start of a fails (it exits, or hangs in its handshake)
            crashed = await call(client, "a__crash")
            # The gateway has started a again: a is down for sure.
            await until(lambda: gate.tried > 0, "a was not started again")
            if then == "exits":  # seen as an exit, not waited on until the handshake times out
                retried = await retry_logged(gw, "a")
            down = await gw.readyz()
            while_down = await names(client)
            a_down = await call(client, "a__echo")
            b_up = {name: await call(client, name) for name in ("b__echo", "b__slow")}
            gate.go = True
            await gw.until_ready(lambda b: b["down"] == [])
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
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {k: memory(memory_servers, k, log) for k, log in logs.items()}
        # The timeout bounds the other calls too (in this process they take milliseconds).
        async with fleet(tmp_path, servers, timeout=SHORT) as gw, \
                gw.client("legacy") as one, gw.client("legacy") as two:
            hung: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                async def slow() -> None:
                    hung["result"] = await call(one, "a__slow", {"seconds": 600})
                tg.start_soon(slow)
                await until(lambda: "slow" in tool_calls(logs["a"]), "a's slow call never came")
                echoed = await call(two, "b__echo")
            again = await call(two, "a__echo")
            # a is told its call was abandoned, in the background: its log says so once it has.
            await until(lambda: "notifications/cancelled" in [e["method"] for e in
                                                              read_log(logs["a"])],
                        "a was not told of the abandoned call")
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
    await until(lambda: changes.seen > before, f"no list_changed after {key}__flip")
    listed = await names(client)  # the notification comes once the server is listed again
    assert f"{key}__extra0" in listed, listed
    return listed


INTEROP = pytest.mark.interop


@pytest.mark.parametrize(("listener", "mode", "server"), [
    ("http", "legacy", "2025"), ("http", "auto", "2025"), ("http", "legacy", "2026"),
    pytest.param("stdio", "legacy", "2025", marks=INTEROP),
    pytest.param("stdio", "auto", "2026", marks=INTEROP)])
async def test_list_changed_from_one_server_relists_it_alone(
        tmp_path: Path, listener: str, mode: str, server: str) -> None:
    """a's `flip` adds a tool and says its list changed: a alone is asked for its tools again, and
    the client sees a__extra0; then the same from b. `server`: the protocol version the servers
    speak (a 2026-07-28 server says it on a listen stream). Interop for `stdio`: a real gateway
    process listening on its stdin and stdout, in front of real server processes."""
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    env = {"GATEWAY_UPSTREAM_MODERN_ONLY": "1"} if server == "2026" else {}
    changes = Changes()
    memory_servers = MemoryServers()
    async with AsyncExitStack() as stack:
        if listener == "http":
            stack.enter_context(memory_servers.installed())
            servers = {key: memory(memory_servers, key, log, **env) for key, log in logs.items()}
            gw = await stack.enter_async_context(fleet(tmp_path, servers))
            client = await stack.enter_async_context(
                gw.client(mode, message_handler=changes, cache=None))  # type: ignore[arg-type]
        else:
            servers = {key: logging_upstream(log, **env) for key, log in logs.items()}
            client = await stack.enter_async_context(
                Client(stdio_fleet(tmp_path, servers), mode=mode, message_handler=changes,
                       cache=None))
        with anyio.fail_after(WAIT):  # listed once both servers are (the stdio gateway: later)
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
