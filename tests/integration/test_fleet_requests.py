"""A server's own requests, progress, cancellation and log messages behind a many-server gateway
(SPEC §10, §12): `gateway --config` in front of two or three real servers (tests/fixtures/
asking_upstream.py, gateway_upstream.py, npm server-everything), with two or three SDK clients. What
one server asks reaches the client whose call to *that* server is in flight, even while another
client's call to another server is in flight too, and the answer goes back to that server alone;
progress and log messages reach the caller of their call only; a cancellation reaches the server of
the cancelled call only. Each test asserts what every server received (their own logs) and what
every client saw.

In-process (tests/fixtures/inprocess.py): `gateway --config` wired in the test's event loop, its
servers in memory (the asking and logging upstreams, and tests/fixtures/requesting_upstream.py where
server-everything's elicitation was), the SDK clients on its app over the streaming bridge; each wait
is on the event (the clients meeting, progress reported, the servers' logs). The stdio listener in
front of three real servers, server-everything among them, stays interop (one test, marked: a
desktop client's whole path).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fixtures import asking_upstream
from tests.fixtures.fleet import Entry, command, logging_upstream, write_gateway_toml
from tests.fixtures.gateway_upstream import read_log, tool_calls
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway, until
from tests.fixtures.mcp_servers import CLI, ROOT, server_env
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.requesting_upstream import requesting
from tests.fixtures.upstreams import everything_stdio

IN_PROCESS = pytest.mark.asyncio(loop_scope="module")  # one event loop for the module's gateways

WAIT = WAIT_SECONDS  # in-process: a call answered, the clients meeting
MODES = ["legacy", "auto"]  # the client's protocol version: 2025-11-25, 2026-07-28
OPEN = "# every tool open\n[gateway]\ncall_timeout_seconds = 600\n"  # only a cancellation ends a call


# --- servers and gateways -------------------------------------------------------------------------
def asking(log: Path, *, modern_only: bool = False) -> Entry:
    """tests/fixtures/asking_upstream.py over stdio, recording what it asked and was answered."""
    env = {"ASKING_UPSTREAM_LOG": str(log)}
    if modern_only:
        env["ASKING_UPSTREAM_MODERN_ONLY"] = "1"
    return command(asking_upstream.command(), env)


def asking_in_memory(servers: MemoryServers, key: str, log: Path, *, modern_only: bool = False
                     ) -> Entry:
    """The asking upstream in memory, recording what it asked and was answered in `log`."""
    env = {"ASKING_UPSTREAM_LOG": str(log)}
    if modern_only:
        env["ASKING_UPSTREAM_MODERN_ONLY"] = "1"
    return command(servers.asking_upstream(key, **env))


def logging_in_memory(servers: MemoryServers, key: str, log: Path) -> Entry:
    return command(servers.logging_upstream(key, **logging_env(log)))


def config(tmp: Path, servers: dict[str, Entry]) -> Path:
    policy = tmp / "policy.toml"
    policy.write_text(OPEN, encoding="utf-8")
    return write_gateway_toml(tmp / "gateway.toml", policy, servers)


@asynccontextmanager
async def fleet(tmp: Path, servers: dict[str, Entry]) -> AsyncIterator[InProcess]:
    """`gateway --config` over HTTP in-process (its servers as a MemoryServers installed them),
    once every server has listed its tools."""
    async with cli_gateway(["--config", str(config(tmp, servers)),
                            "--listen", "http://127.0.0.1:0"]) as gateway:
        await gateway.until_ready()
        yield gateway


def stdio_fleet(tmp: Path, servers: dict[str, Entry]) -> StdioServerParameters:
    """`gateway --config` on stdio (its `listen` defaults to stdio), as a desktop client starts it."""
    argv = [*CLI, "gateway", "--config", str(config(tmp, servers))]
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(), cwd=ROOT)


async def listed(client: Client, *names: str) -> None:
    """Wait until the gateway lists `names` (servers still starting are listed later)."""
    with anyio.fail_after(10):
        while not set(names) <= {t.name for t in (await client.list_tools()).tools}:
            await anyio.sleep(0.2)


# --- clients --------------------------------------------------------------------------------------
class Meeting:
    """`parties` callbacks wait here for each other: while one client is being asked by one server,
    the other client's call to the other server is in flight too (or being asked as well)."""

    def __init__(self, parties: int) -> None:
        self.parties, self.arrived, self.all_here = parties, 0, anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_here.set()
        with anyio.fail_after(WAIT):
            await self.all_here.wait()


class Caller:
    """One client's callbacks: what it was asked, the answer it gives (its own), what it saw."""

    def __init__(self, answer: str, meeting: Meeting | None = None) -> None:
        self.answer, self.meeting = answer, meeting
        self.asked: list[str] = []
        self.logs: list[Any] = []
        self.progress: list[tuple[float, float | None, str | None]] = []
        self.release = anyio.Event()  # set: a held sampling answer may go
        self.hold = False

    async def sampling(self, _ctx: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        self.asked.append("sampling: " + params.messages[0].content.text)  # type: ignore[union-attr]
        if self.meeting is not None:
            await self.meeting.wait()
        if self.hold:
            await self.release.wait()
        return mcp_types.CreateMessageResult(role="assistant", model="test",
                                             content=mcp_types.TextContent(type="text", text=self.answer))

    async def elicitation(self, _ctx: Any, _params: mcp_types.ElicitRequestParams) -> Any:
        self.asked.append("elicitation")
        if self.meeting is not None:
            await self.meeting.wait()
        return mcp_types.ElicitResult(action="decline")

    async def logging(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def progressed(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation,
                "logging_callback": self.logging}


@asynccontextmanager
async def clients(gateway: InProcess, mode: Any, *callers: Caller) -> AsyncIterator[list[Client]]:
    """One SDK client per caller, connected to the gateway at `mode` (2026-07-28 clients opt in to
    info logs on each request)."""
    level: Any = "info" if mode == "auto" else None
    async with gateway.client(mode, log_level=level, **callers[0].callbacks()) as one, \
            gateway.client(mode, log_level=level, **callers[1].callbacks()) as two:
        if len(callers) == 2:
            yield [one, two]
            return
        async with gateway.client(mode, log_level=level, **callers[2].callbacks()) as three:
            yield [one, two, three]


def text(result: mcp_types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def answered(text: str, *, modern_only: bool) -> dict[str, Any]:
    """asking_upstream's record of an answer (a 2026-07-28 server's names the round it continues)."""
    return {"asked": "answer", "text": text, **({"state": "asked"} if modern_only else {})}


# --- 1. the servers' requests ---------------------------------------------------------------------
@IN_PROCESS
@pytest.mark.parametrize("modern_only", [False, True], ids=["server-2025", "server-2026"])
@pytest.mark.parametrize("mode", MODES)
async def test_each_servers_question_reaches_its_caller_and_the_answer_only_that_server(
        tmp_path: Path, mode: str, modern_only: bool) -> None:
    """Client one's call to a__ask and client two's to b__ask are both asking at once: each client
    is asked once, and each server gets its own caller's answer."""
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    meeting = Meeting(2)
    one, two, bystander = Caller("one", meeting), Caller("two", meeting), Caller("nobody")
    servers = MemoryServers()
    with servers.installed():
        entries = {k: asking_in_memory(servers, k, log, modern_only=modern_only)
                   for k, log in logs.items()}
        async with fleet(tmp_path, entries) as gw, clients(gw, mode, one, two, bystander) as (
                c1, c2, c3):
            await c3.list_tools()
            results: dict[str, mcp_types.CallToolResult] = {}

            async def call(client: Client, name: str) -> None:
                results[name] = await client.call_tool(name, {})
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, c1, "a__ask")
                    tg.start_soon(call, c2, "b__ask")
    assert one.asked == ["sampling: 2+2?"] and two.asked == ["sampling: 2+2?"]
    assert bystander.asked == []
    assert text(results["a__ask"]) == "the answer is one"
    assert text(results["b__ask"]) == "the answer is two"
    assert asking_upstream.read_log(logs["a"]) == [answered("one", modern_only=modern_only)]
    assert asking_upstream.read_log(logs["b"]) == [answered("two", modern_only=modern_only)]


@IN_PROCESS
@pytest.mark.parametrize("mode", MODES)
async def test_an_elicitation_reaches_its_caller_while_another_server_asks_another_client(
        tmp_path: Path, mode: str) -> None:
    """Server b (tests/fixtures/requesting_upstream.py) elicits from client two while server a
    asks client one."""
    log = tmp_path / "a.jsonl"
    meeting = Meeting(2)
    one, two = Caller("one", meeting), Caller("two", meeting)
    servers = MemoryServers()
    with servers.installed():
        entries = {"a": asking_in_memory(servers, "a", log),
                   "b": command(servers.add("b", requesting))}
        async with fleet(tmp_path, entries) as gw, clients(gw, mode, one, two) as (c1, c2):
            results: dict[str, mcp_types.CallToolResult] = {}

            async def call(client: Client, name: str) -> None:
                results[name] = await client.call_tool(name, {})
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, c1, "a__ask")
                    tg.start_soon(call, c2, "b__trigger-elicitation-request")
    assert one.asked == ["sampling: 2+2?"] and two.asked == ["elicitation"]
    assert text(results["a__ask"]) == "the answer is one"
    assert "declined" in text(results["b__trigger-elicitation-request"])
    assert asking_upstream.read_log(log) == [answered("one", modern_only=False)]


@pytest.mark.interop
@pytest.mark.asyncio
@pytest.mark.parametrize("mode", MODES)
async def test_a_stdio_fleet_routes_requests_progress_and_logs_of_each_server(
        tmp_path: Path, mode: Any) -> None:
    """The stdio listener (one client) in front of three servers: b's sampling request and log,
    c's elicitation and a's progress reach the client; each answer reaches its own server.
    Interop: a real gateway process on stdio in front of real server processes, npm
    server-everything among them, as a desktop client starts it."""
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    me = Caller("mine")
    servers = {"a": logging_upstream(logs["a"]), "b": asking(logs["b"]), "c": command(everything_stdio())}
    level: Any = "info" if mode == "auto" else None
    async with Client(stdio_fleet(tmp_path, servers), mode=mode, log_level=level,
                      **me.callbacks()) as client:
        await listed(client, "a__slow", "b__ask", "c__trigger-elicitation-request")
        with anyio.fail_after(10):
            asked = await client.call_tool("b__ask", {})
            elicited = await client.call_tool("c__trigger-elicitation-request", {})
            logged = await client.call_tool("b__log", {"tag": "b"})
            slow = await client.call_tool("a__slow", {"seconds": 0}, progress_callback=me.progressed)
    assert me.asked == ["sampling: 2+2?", "elicitation"]
    assert text(asked) == "the answer is mine" and "declined" in text(elicited)
    # server-everything (c) asks for roots ~350 ms after it starts and then logs this once (roots.js
    # `syncRoots`); with no call to c in flight the log is the stdio client's, so it reaches a
    # 2025-11-25 client when c was the last server to start (the handshake waits for all of them).
    c_roots = [d for d in me.logs if d == "Roots updated: 0 root(s) received from client"]
    assert len(c_roots) <= 1
    assert text(logged) == "log done" and [d for d in me.logs if d not in c_roots] == [{"call": "b"}]
    assert text(slow) == "slow done" and me.progress == [(0.5, 1.0, "half way")]
    assert asking_upstream.read_log(logs["b"]) == [answered("mine", modern_only=False)]
    assert tool_calls(logs["a"]) == ["slow"]  # a was never asked about b's question


# --- 2. progress and cancellation -----------------------------------------------------------------
@IN_PROCESS
@pytest.mark.parametrize("mode", MODES)
async def test_progress_reaches_its_caller_and_a_cancellation_only_its_server(
        tmp_path: Path, mode: str) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    one, two, bystander = Caller("one"), Caller("two"), Caller("nobody")
    servers = MemoryServers()
    with servers.installed():
        entries = {k: logging_in_memory(servers, k, log) for k, log in logs.items()}
        async with fleet(tmp_path, entries) as gw, clients(gw, mode, one, two, bystander) as (
                c1, c2, c3):
            await c3.list_tools()
            async with anyio.create_task_group() as tg:
                async def slow() -> None:
                    await c1.call_tool("a__slow", {"seconds": 600}, progress_callback=one.progressed)
                tg.start_soon(slow)
                await until(lambda: bool(one.progress), "a's progress never reached its caller")
                with anyio.fail_after(WAIT):
                    quick = await c2.call_tool("b__slow", {"seconds": 0},
                                               progress_callback=two.progressed)
                tg.cancel_scope.cancel()  # client one gives up on its call to a
            await until(lambda: bool(cancelled(logs["a"])), "a never heard of the cancellation")
            await c3.list_tools()
    assert one.progress == [(0.5, 1.0, "half way")] and two.progress == [(0.5, 1.0, "half way")]
    assert text(quick) == "slow done"
    assert tool_calls(logs["a"]) == tool_calls(logs["b"]) == ["slow"]
    # a is told which of its requests was cancelled: the one whose progress token it was given.
    [call] = [e for e in read_log(logs["a"]) if e["method"] == "tools/call"]
    assert cancelled(logs["a"]) == [call["params"]["_meta"]["progressToken"]]
    assert cancelled(logs["b"]) == []


def cancelled(log: Path) -> list[Any]:
    """The request ids of the notifications/cancelled a server received."""
    return [e["params"]["requestId"] for e in read_log(log) if e["method"] == "notifications/cancelled"]


async def post_2026(http: httpx.AsyncClient, rid: int, name: str, arguments: dict[str, Any],
                    token: str) -> list[dict[str, Any]]:
    """A 2026-07-28 tools/call with its own progress token, as sent and answered on the wire: every
    message of the response, in order."""
    meta = {"progressToken": token, "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}
    response = await http.post("/mcp", headers={"mcp-protocol-version": "2026-07-28",
                                                "mcp-method": "tools/call", "mcp-name": name},
                               json={"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                     "params": {"name": name, "arguments": arguments,
                                                "_meta": meta}})
    if not response.headers["content-type"].startswith("text/event-stream"):
        return [response.json()]
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


@IN_PROCESS
async def test_progress_carries_the_callers_own_token_from_either_server(tmp_path: Path) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    servers = MemoryServers()
    with servers.installed():
        entries = {k: logging_in_memory(servers, k, log) for k, log in logs.items()}
        async with fleet(tmp_path, entries) as gw, gw.http() as http:
            http.headers["accept"] = "application/json, text/event-stream"
            from_b = await post_2026(http, 7, "b__slow", {"seconds": 0}, "token-for-b")
            from_a = await post_2026(http, 8, "a__slow", {"seconds": 0}, "token-for-a")
    for messages, token, rid in ((from_a, "token-for-a", 8), (from_b, "token-for-b", 7)):
        progress, result = messages
        assert progress == {"jsonrpc": "2.0", "method": "notifications/progress", "params": {
            "progressToken": token, "progress": 0.5, "total": 1.0, "message": "half way"}}
        assert result["id"] == rid and result["result"]["content"] == [{"type": "text",
                                                                       "text": "slow done"}]
    assert tool_calls(logs["a"]) == tool_calls(logs["b"]) == ["slow"]


# --- 3. log messages ------------------------------------------------------------------------------
@IN_PROCESS
@pytest.mark.parametrize("mode", MODES)
async def test_a_servers_log_reaches_the_caller_of_its_call_only(tmp_path: Path, mode: str) -> None:
    """Client two's call to b is in flight (it logged, then waits): b's log about it reached client
    two; a's log about client one's call reaches client one (two's call to another server does not
    make it ambiguous); b's log while both clients' calls to b are in flight reaches nobody, never a
    guess; the bystander, with no call in flight, sees nothing."""
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    one, two, bystander = Caller("one"), Caller("two"), Caller("nobody")
    servers = MemoryServers()
    with servers.installed():
        entries = {k: asking_in_memory(servers, k, log) for k, log in logs.items()}
        async with fleet(tmp_path, entries) as gw, clients(gw, mode, one, two, bystander) as (
                c1, c2, c3):
            await c3.list_tools()
            async with anyio.create_task_group() as tg:
                tg.start_soon(c2.call_tool, "b__log", {"tag": "b for two", "seconds": 600})
                await until(lambda: bool(two.logs), "b's log never reached its caller")
                with anyio.fail_after(WAIT):
                    from_a = await c1.call_tool("a__log", {"tag": "a for one"})
                    from_b = await c1.call_tool("b__log", {"tag": "b for one or two?"})
                tg.cancel_scope.cancel()
            await c3.list_tools()
    assert text(from_a) == text(from_b) == "log done"
    assert one.logs == [{"call": "a for one"}]
    assert two.logs == [{"call": "b for two"}]
    assert bystander.logs == []
