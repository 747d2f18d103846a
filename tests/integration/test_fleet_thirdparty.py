"""Four third-party servers we did not write, behind ONE gateway (SPEC §12): npm server-filesystem,
npm server-memory and PyPI mcp-server-time over stdio, npm server-everything over streamable HTTP,
under one policy that names their tools as `KEY__NAME`. The MCP SDK's client at both protocol
versions sees every tool with its prefix and requirements; an allowed call reaches the right server
under its own name (its answer is that server's); a denied one reaches none (the disk and the
knowledge graph stay untouched); server-everything's prompts and resources are listed and read.

Interop: these servers ARE the real components (SPEC §9), behind one real gateway process (npm
server-memory's denied write checked on its own file); the MCP Inspector CLI reads the same fleet. The
routing rules themselves are the in-process tier's (test_fleet_routing, test_fleet_property).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic import TypeAdapter

from mcp_preconditions.wire import META_KEY
from tests.fixtures.fleet import Entry, clock, filesystem, fleet_http, memory, write_gateway_toml
from tests.fixtures.inspector import ERAS
from tests.fixtures.mcp_servers import MODES, ROOT, VERSIONS, raw_tools, server_env
from tests.fixtures.upstreams import Listening
from tests.integration.test_gateway_inspector import DENIED, attempt, call, listing, shown_requirements
from tests.integration.test_gateway_thirdparty import (
    LIKE_THE_GATEWAY,
    denial,
    payload,
    raw_call,
    seen_denial,
    snapshot,
)

pytestmark = [pytest.mark.integration, pytest.mark.interop]

POLICY = """environment = ["production"]
[tools.fs__write_file]
requirements = ["auth:oauth2", "auth:scope:files:write"]
[tools.memory__create_entities]
requirements = ["auth:oauth2", "auth:scope:memory:write"]
[tools.time__convert_time]
requirements = ["env:staging"]
[tools.everything__echo]
requirements = ["env:production"]
[tools.everything__get-sum]
requirements = ["env:staging"]
"""
REQUIREMENTS = {"fs__write_file": ["auth:oauth2", "auth:scope:files:write"],
                "memory__create_entities": ["auth:oauth2", "auth:scope:memory:write"],
                "time__convert_time": ["env:staging"], "everything__echo": ["env:production"],
                "everything__get-sum": ["env:staging"]}
ARCHITECTURE = "demo://resource/static/document/architecture.md"


@dataclass
class Fleet:
    gateway: Listening
    servers: dict[str, Entry]  # key -> entry, in the config's order
    disk: Path
    memory_file: Path


def servers_of(tmp: Path, everything_url: str) -> tuple[dict[str, Entry], Path, Path]:
    disk = (tmp / "disk").resolve()
    disk.mkdir()
    (disk / "notes.txt").write_text("first line\n", encoding="utf-8")
    memory_file = tmp / "memory.jsonl"
    return ({"fs": filesystem(disk), "memory": memory(memory_file), "time": clock(),
             "everything": {"url": everything_url}}, disk, memory_file)


@pytest.fixture(scope="module")
def fleet(everything_http_server: Listening, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet-thirdparty")
    servers, disk, memory_file = servers_of(tmp, everything_http_server.url)
    policy = tmp / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    with fleet_http(write_gateway_toml(tmp / "gateway.toml", policy, servers)) as gateway:
        yield Fleet(gateway, servers, disk, memory_file)


@asynccontextmanager
async def direct(entry: Entry, **options: Any) -> AsyncIterator[Client]:
    """The MCP SDK's client straight to one server (2025-11-25, which all four speak)."""
    if "url" in entry:
        transport: Any = entry["url"]
    else:
        transport = StdioServerParameters(command=entry["command"], args=entry["args"],
                                          env=server_env(**entry.get("env", {})), cwd=ROOT)
    async with Client(transport, mode="legacy", **options) as client:
        yield client


async def direct_tools(servers: dict[str, Entry]) -> list[tuple[str, dict[str, Any]]]:
    """Every server's own tools/list, in the config's order: (key, tool)."""
    out = []
    for key, entry in servers.items():
        async with direct(entry, **LIKE_THE_GATEWAY) as client:
            out += [(key, tool) for tool in await raw_tools(client.session)]
    return out


def check_fleet_listing(wire: list[dict[str, Any]], own: list[tuple[str, dict[str, Any]]]) -> None:
    """Every server's every tool, in order, as KEY__NAME with its schema untouched, the policy's
    requirements on the wire and in the `_meta` mirror, nothing added to the other tools."""
    assert [t["name"] for t in wire] == [f"{key}__{tool['name']}" for key, tool in own]
    for tool, (_key, mine) in zip(wire, own, strict=True):
        assert tool["inputSchema"] == mine["inputSchema"], tool["name"]
        assert tool.get("description") == mine.get("description"), tool["name"]
        wanted = REQUIREMENTS.get(tool["name"])
        if wanted is None:
            assert "requirements" not in tool.get("execution", {}), tool
            assert META_KEY not in tool.get("_meta", {}), tool
        else:
            assert tool["execution"]["requirements"] == wanted
            assert tool["_meta"][META_KEY] == wanted


def decisions(gateway: Listening) -> list[dict[str, Any]]:
    return [json.loads(line.split(": ", 1)[1]) for line in gateway.output().splitlines()
            if line.startswith("mcp_preconditions.decisions: ")]


@pytest.mark.parametrize("version", VERSIONS)
async def test_every_tool_of_every_server_listed_with_its_prefix_and_requirements(
        fleet: Fleet, version: str) -> None:
    own = await direct_tools(fleet.servers)
    async with Client(fleet.gateway.url, mode=MODES[version]) as client:
        assert client.protocol_version == version
        wire = await raw_tools(client.session)
    assert {key for key, _ in own} == {"fs", "memory", "time", "everything"}
    check_fleet_listing(wire, own)


@pytest.mark.parametrize("version", VERSIONS)
async def test_allowed_calls_reach_their_server_denied_ones_reach_none(fleet: Fleet, version: str) -> None:
    notes = str(fleet.disk / "notes.txt")
    before = snapshot(fleet.disk)
    async with direct(fleet.servers["fs"]) as fs:
        read_direct = await raw_call(fs, "read_text_file", {"path": notes})
    async with direct(fleet.servers["everything"]) as everything:
        echo_direct = await raw_call(everything, "echo", {"message": "hi"})
    async with Client(fleet.gateway.url, mode=MODES[version]) as client:
        read = await raw_call(client, "fs__read_text_file", {"path": notes})
        write = await raw_call(client, "fs__write_file", {"path": notes, "content": "gone\n"})
        create = await raw_call(client, "fs__write_file", {"path": str(fleet.disk / "new"), "content": "x"})
        graph = await raw_call(client, "memory__read_graph", {})
        remember = await raw_call(client, "memory__create_entities", {"entities": [
            {"name": "x", "entityType": "t", "observations": ["o"]}]})
        now = await raw_call(client, "time__get_current_time", {"timezone": "UTC"})
        convert = await raw_call(client, "time__convert_time", {
            "source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"})
        echo = await raw_call(client, "everything__echo", {"message": "hi"})
        add = await raw_call(client, "everything__get-sum", {"a": 1, "b": 2})
        bare = await raw_call(client, "echo", {"message": "hi"})  # no server's name without a prefix
    assert payload(read) == payload(read_direct) and read["content"][0]["text"] == "first line\n"
    for result in (write, create):
        assert seen_denial(result) == denial("fs__write_file", ["auth:oauth2", "auth:scope:files:write"],
                                             scope="files:write")
    assert snapshot(fleet.disk) == before
    assert graph.get("isError") is not True and json.loads(graph["content"][0]["text"]) == {
        "entities": [], "relations": []}
    assert seen_denial(remember) == denial("memory__create_entities",
                                           ["auth:oauth2", "auth:scope:memory:write"], scope="memory:write")
    assert not fleet.memory_file.exists()
    assert now.get("isError") is not True and now["structuredContent"]["timezone"] == "UTC"
    assert seen_denial(convert) == denial("time__convert_time", ["env:staging"])
    assert payload(echo) == payload(echo_direct)
    assert echo["content"] == [{"type": "text", "text": "Echo: hi"}]
    assert seen_denial(add) == denial("everything__get-sum", ["env:staging"])
    assert bare["structuredContent"] == {"error": "unlisted_tool", "tool": "echo", "unmet": [],
                                         "withheld": 0}
    # Each decision names the tool as the client called it, and the server it belongs to.
    seen = {(d["tool"], d.get("server"), d["allowed"]) for d in decisions(fleet.gateway)}
    assert {("fs__read_text_file", "fs", True), ("fs__write_file", "fs", False),
            ("memory__read_graph", "memory", True), ("memory__create_entities", "memory", False),
            ("time__get_current_time", "time", True), ("time__convert_time", "time", False),
            ("everything__echo", "everything", True), ("everything__get-sum", "everything", False),
            ("echo", None, False)} <= seen


async def _raw(client: Client, request: Any) -> dict[str, Any]:
    as_dict: Any = TypeAdapter(dict[str, Any])
    result: dict[str, Any] = await client.session.send_request(request, as_dict)
    return {k: v for k, v in result.items() if k not in ("_meta", "resultType", "ttlMs", "cacheScope")}


async def everything_prompts_and_resources(client: Client, prefix: str) -> dict[str, Any]:
    """What a client reads of server-everything's prompts and resources (`prefix`: its prompts')."""
    prompts = await client.list_prompts()
    resources = await client.list_resources()
    templates = await client.list_resource_templates()
    args = await _raw(client, mcp_types.GetPromptRequest(params=mcp_types.GetPromptRequestParams(
        name=prefix + "args-prompt", arguments={"city": "Paris", "state": "France"})))
    read = await _raw(client, mcp_types.ReadResourceRequest(
        params=mcp_types.ReadResourceRequestParams(uri=ARCHITECTURE)))
    completion = await client.complete(
        mcp_types.PromptReference(type="ref/prompt", name=prefix + "completable-prompt"),
        {"name": "department", "value": "E"})
    return {"prompts": [p.name.removeprefix(prefix) for p in prompts.prompts if p.name.startswith(prefix)],
            "resources": sorted(r.uri for r in resources.resources),
            "templates": sorted(t.uri_template for t in templates.resource_templates),
            "args": args, "read": read, "completion": completion.completion.values}


@pytest.mark.parametrize("version", VERSIONS)
async def test_server_everythings_prompts_and_resources_through_the_fleet(
        fleet: Fleet, version: str) -> None:
    async with direct(fleet.servers["everything"]) as everything:
        alone = await everything_prompts_and_resources(everything, "")
    async with Client(fleet.gateway.url, mode=MODES[version]) as client:
        through = await everything_prompts_and_resources(client, "everything__")
        memory_graph = await client.read_resource("memory://knowledge-graph") \
            if "memory://knowledge-graph" in through["resources"] else None
    assert alone["prompts"] and alone["resources"] and alone["templates"]
    assert through["prompts"] == alone["prompts"]
    assert set(alone["resources"]) <= set(through["resources"])  # URIs unchanged; memory's beside
    assert set(alone["templates"]) <= set(through["templates"])
    assert through["args"] == alone["args"]
    assert "Paris" in json.dumps(through["args"])
    assert through["read"] == alone["read"]
    assert through["completion"] == alone["completion"] == ["Engineering"]
    assert memory_graph is None or memory_graph.contents


async def test_an_unknown_prompt_or_resource_is_refused(fleet: Fleet) -> None:
    async with Client(fleet.gateway.url, mode="legacy") as client:
        with pytest.raises(Exception, match="Unknown prompt: 'simple-prompt'"):
            await client.get_prompt("simple-prompt")  # server-everything's, without its prefix
        with pytest.raises(Exception, match="No server lists the resource 'demo://nowhere'"):
            await client.read_resource("demo://nowhere")
        simple = await client.get_prompt("everything__simple-prompt")  # the session goes on
    assert simple.messages


# --- the MCP Inspector CLI, in both eras ----------------------------------------------------------
@pytest.mark.parametrize("era", list(ERAS))
def test_the_inspector_sees_every_prefixed_tool_with_its_requirements(fleet: Fleet, tmp_path: Path,
                                                                      era: str) -> None:
    own = anyio.run(direct_tools, fleet.servers)
    tools = listing(tmp_path, era, [fleet.gateway.url])
    assert list(tools) == [f"{key}__{tool['name']}" for key, tool in own]
    assert shown_requirements(tools) == REQUIREMENTS
    code, now = call(tmp_path, era, [fleet.gateway.url], "time__get_current_time", timezone="UTC")
    assert code == 0 and now["structuredContent"]["timezone"] == "UTC"
    code, denied = call(tmp_path, era, [fleet.gateway.url], "everything__get-sum", a="1", b="2")
    assert code == DENIED
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "everything__get-sum",
                                           "unmet": ["env:staging"], "withheld": 0}
    before = snapshot(fleet.disk)
    assert attempt(tmp_path, era, [fleet.gateway.url], "fs__write_file",
                   path=str(fleet.disk / "notes.txt"), content="gone") != 0
    assert snapshot(fleet.disk) == before
