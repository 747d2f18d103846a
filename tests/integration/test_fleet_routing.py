"""Names and routes across the servers of one gateway (SPEC §10, §12), in front of the logging
upstream (tests/fixtures/gateway_upstream.py): a one-server policy reused in a fleet makes the policy
unusable for the server whose tool it names without the prefix (never an unguarded tool), a policy
name addressed to a server that never starts condemns no other server, and what two servers share
is refused and reported.

In-process (tests/fixtures/inprocess.py): `gateway --config` wired in the test's event loop, its
servers in memory (one that exits at once; one that starts only when the test lets it, as a server
does after a slow download), the clients on its app over the streaming bridge; each wait is on
/readyz changing as a server connects or lists.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.gateway.fleet import UNUSABLE
from mcp_preconditions.names import near_miss_message, unusable_line
from tests.fixtures.fleet import Entry, command, write_gateway_toml
from tests.fixtures.gateway_upstream import LoggingUpstream, read_log, tool_calls
from tests.fixtures.inprocess import InProcess, cli_gateway
from tests.fixtures.memory_upstream import Die, Exits, MemoryServers, logging_env

pytestmark = pytest.mark.asyncio(loop_scope="module")


def memory(servers: MemoryServers, key: str, log: Path, **env: str) -> Entry:
    """A `[servers.KEY]` entry: the logging upstream in memory, recording in `log`."""
    return command(servers.logging_upstream(key, **logging_env(log, **env)))


def with_write_file(servers: MemoryServers, key: str, tmp: Path, log: Path) -> Entry:
    """The test upstream, listing a `write_file` tool besides its own."""
    tools = tmp / f"{log.stem}-tools.json"
    tools.write_text(json.dumps([{"name": "write_file", "inputSchema": {"type": "object"}}]),
                     encoding="utf-8")
    return memory(servers, key, log, GATEWAY_UPSTREAM_TOOLS_FILE=str(tools))


@asynccontextmanager
async def gateway_of(tmp: Path, policy: str, servers: dict[str, Entry]) -> AsyncIterator[InProcess]:
    """`gateway --config` over HTTP in-process (its servers as `servers` installed them)."""
    path = tmp / "policy.toml"
    path.write_text(policy, encoding="utf-8")
    config = write_gateway_toml(tmp / "gateway.toml", path, servers)
    async with cli_gateway(["--config", str(config), "--listen", "http://127.0.0.1:0"]) as gateway:
        yield gateway


def all_listed(body: dict[str, Any]) -> bool:
    return all(s["tools_loaded"] for s in body["servers"].values())


async def call(client: Client, name: str) -> dict[str, Any]:
    result = await client.call_tool(name, {})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


async def test_a_one_server_policy_reused_in_a_fleet_refuses_the_tool_it_names_unprefixed(
        tmp_path: Path) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("fs", "other")}
    policy = '[tools.write_file]\nrequirements = ["auth:claim:role:admin"]\n'
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {"fs": with_write_file(memory_servers, "fs", tmp_path, logs["fs"]),
                   "other": memory(memory_servers, "other", logs["other"])}
        async with gateway_of(tmp_path, policy, servers) as gateway:
            body = await gateway.until_ready(all_listed)
            async with gateway.client("legacy") as client:
                refused = {name: await call(client, name) for name in ("fs__write_file", "fs__echo")}
                other = await call(client, "other__echo")
            output = gateway.output()
    assert body["status"] == "degraded"
    assert body["servers"]["fs"]["problem"] == (
        "the policy names a near miss of one of this server's tools: every call to it is refused "
        "(details in the gateway's log)")
    assert "problem" not in body["servers"]["other"]
    assert "write_file" not in json.dumps(body)  # the policy's names stay in the log
    for result in refused.values():
        assert result == {"content": [{"type": "text", "text": UNUSABLE}], "isError": True}
    assert tool_calls(logs["fs"]) == []
    assert other["isError"] is False and tool_calls(logs["other"]) == ["echo"]
    assert unusable_line("server fs", [near_miss_message("write_file", "fs__write_file")]) in output


async def test_a_policy_name_for_a_server_that_never_starts_condemns_no_other(tmp_path: Path) -> None:
    log = tmp_path / "fs.jsonl"
    policy = '[tools.fs2__write_file]\nrequirements = ["auth:claim:role:admin"]\n'
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {"fs": with_write_file(memory_servers, "fs", tmp_path, log),
                   "fs2": command(memory_servers.add("fs2", lambda _env, _die: Exits()))}
        async with gateway_of(tmp_path, policy, servers) as gateway:
            body = await gateway.until_ready(lambda b: b["servers"]["fs"]["tools_loaded"])
            async with gateway.client("legacy") as client:
                written = await call(client, "fs__write_file")
    assert body["servers"]["fs"] == {"connected": True, "tools_loaded": True}
    assert body["down"] == ["fs2"] and body["status"] == "degraded"
    assert written == {"content": [{"type": "text", "text": "write_file done"}], "isError": False}
    assert tool_calls(log) == ["write_file"]


async def test_one_server_with_a_prefix_gets_its_prompts_under_their_own_names(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {"up": memory(memory_servers, "up", log)}
        async with gateway_of(tmp_path, "", servers) as gateway, \
                gateway.client("legacy") as client:
            listed = [p.name for p in (await client.list_prompts()).prompts]
            greeting = await client.get_prompt("up__greet", {"name": "Ada"})
            with pytest.raises(Exception, match="Unknown prompt: 'greet'"):
                await client.get_prompt("greet", {"name": "Ada"})  # the bare name is not listed
            with pytest.raises(Exception, match="Method not found"):  # the server's own answer
                await client.complete(mcp_types.PromptReference(type="ref/prompt", name="up__greet"),
                                      {"name": "name", "value": "A"})
            with pytest.raises(Exception, match="Unknown prompt: 'greet'"):
                await client.complete(mcp_types.PromptReference(type="ref/prompt", name="greet"),
                                      {"name": "name", "value": "A"})
    assert listed == ["up__greet"]
    assert greeting.messages[0].content.text == "Hello, Ada!"  # type: ignore[union-attr]
    received = [(e["method"], e["params"]) for e in read_log(log)
                if e["method"] in ("prompts/get", "completion/complete")]
    assert received == [
        ("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
        ("completion/complete", {"ref": {"type": "ref/prompt", "name": "greet"},
                                 "argument": {"name": "name", "value": "A"}})]


class Late:
    """A server that starts only once `go` is set (as one does after a restart or a slow npx
    download): its messages wait in its input until then."""

    def __init__(self, log: Path) -> None:
        self.go = anyio.Event()
        self._log = log

    def __call__(self, env: Mapping[str, str], die: Die) -> Any:
        server = LoggingUpstream({**env, **logging_env(self._log)}, die).build()
        go = self.go

        class Waiting:
            def create_initialization_options(self, *args: Any) -> Any:
                return server.create_initialization_options(*args)

            async def run(self, read: Any, write: Any, options: Any) -> None:
                await go.wait()
                await server.run(read, write, options)
        return Waiting()


async def test_what_a_server_connecting_later_also_lists_is_refused_never_routed_to_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first requests give a server still starting a grace (fleet.LATE_SERVER_GRACE, 2 s) to
    # come: b comes only when told, so that grace is spent once whatever it is.
    monkeypatch.setattr("mcp_preconditions.gateway.fleet.LATE_SERVER_GRACE", 0.1)
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    late = Late(logs["b"])
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {"a": memory(memory_servers, "a", logs["a"]) | {"prefix": ""},
                   "b": command(memory_servers.add("b", late), prefix="")}
        async with gateway_of(tmp_path, "", servers) as gateway, \
                gateway.client("legacy") as client:
            # Only a is up: its listings are loaded, and the shared names are its alone.
            assert [r.uri for r in (await client.list_resources()).resources] == ["test://note"]
            assert [p.name for p in (await client.list_prompts()).prompts] == ["greet"]
            assert (await client.read_resource("test://note")).contents
            assert (await client.get_prompt("greet", {"name": "Ada"})).messages
            late.go.set()
            await gateway.until_ready(lambda b: b["servers"]["b"]["tools_loaded"])
            with pytest.raises(Exception, match=r"Resource 'test://note' is listed by more than one "
                                                r"server \(a, b\)"):
                await client.read_resource("test://note")
            with pytest.raises(Exception, match="Prompt 'greet' is listed by more than one server"):
                await client.get_prompt("greet", {"name": "Ada"})
    routed = ("resources/read", "prompts/get")
    assert [e["method"] for e in read_log(logs["a"]) if e["method"] in routed] == list(routed)
    assert [e["method"] for e in read_log(logs["b"]) if e["method"] in routed] == []


async def test_readyz_reports_the_tools_and_prompts_two_servers_share(tmp_path: Path) -> None:
    logs = {key: tmp_path / f"{key}.jsonl" for key in ("a", "b")}
    memory_servers = MemoryServers()
    with memory_servers.installed():
        servers = {key: memory(memory_servers, key, log) | {"prefix": ""}
                   for key, log in logs.items()}
        async with gateway_of(tmp_path, "", servers) as gateway:
            tools_shared = await gateway.until_ready(all_listed)
            async with gateway.client("legacy") as client:
                listed = [t.name for t in (await client.list_tools()).tools]
                prompts = [p.name for p in (await client.list_prompts()).prompts]
                echoed = await call(client, "echo")
            async with gateway.http() as http:
                both_shared = await http.get("/readyz")
    assert tools_shared["status"] == "degraded" and "prompt_collisions" not in tools_shared
    assert tools_shared["collisions"]["echo"] == ["a", "b"]
    assert {tuple(keys) for keys in tools_shared["collisions"].values()} == {("a", "b")}
    assert listed == [] and prompts == []  # neither server's copy is chosen
    assert echoed["structuredContent"] == {"error": "unlisted_tool", "tool": "echo", "unmet": [],
                                           "withheld": 0}
    assert tool_calls(logs["a"]) == tool_calls(logs["b"]) == []
    assert both_shared.status_code == 200
    assert both_shared.json()["prompt_collisions"] == {"greet": ["a", "b"]}
    assert both_shared.json()["collisions"] == tools_shared["collisions"]
