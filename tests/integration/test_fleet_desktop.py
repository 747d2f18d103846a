"""A desktop client's own config guarded with one command (SPEC §12): `gateway --policy P --servers
FILE` reads `{"mcpServers": {...}}` as the same servers a gateway.toml names, with the same listing;
and the issue's done-criterion: the shipped examples/desktop-config.json (its placeholder paths
replaced by temporary ones, its commands as shipped: what `make install` provides, run from the
clone) behind `mcp-preconditions gateway --policy policies/desktop.toml --servers ...`, driven by the
SDK's client and by the MCP Inspector CLI as a user types it, shows every server's prefixed tools
with their requirements, an allowed call and a denial.

The listing comparison and `config validate` run in-process (the default tier): the two gateways
wired from their command lines in the test's event loop, their servers the logging upstream in
memory (stdio entries) and on a socket of the loop (an HTTP entry), the command through `cli.main`.
The done-criterion stays interop, marked test by test: the shipped config's own commands
(npm server-filesystem, -memory, -everything through npx, mcp-server-time) behind a real gateway
process started as the issue types it, driven by the SDK's stdio client and by the Inspector CLI;
in-process it would run neither those servers nor that command line.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic import TypeAdapter

from mcp_preconditions.cli import main
from mcp_preconditions.integrations.client_mcp import denial_of
from tests.fixtures.fleet import (
    DESKTOP_POLICY,
    SHIPPED_DESKTOP,
    Entry,
    command,
    shipped_desktop,
    write_desktop,
    write_gateway_toml,
)
from tests.fixtures.gateway_upstream import LoggingUpstream
from tests.fixtures.inprocess import InProcess, asgi_served, cli_gateway
from tests.fixtures.mcp_servers import ROOT, raw_tools, server_env
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.upstreams import GATEWAY_SCRIPT
from tests.integration.test_gateway_inspector import DENIED, OBSERVER, call, listing, shown_requirements
from tests.integration.test_gateway_thirdparty import snapshot

# A policy naming one stdio server's tools and the HTTP server's (one unreadably: `bad` lists
# requirements of its own), as test_fleet_thirdparty's names the real servers'.
POLICY = """[tools.fs__echo]
requirements = ["auth:claim:role:observer"]

[tools.web__slow]
requirements = ["auth:scope:web:write"]
"""


async def everything_listed(gateway: InProcess) -> dict[str, Any]:
    """tools/list, prompts/list, resources/list and resources/templates/list as they came."""
    as_dict: Any = TypeAdapter(dict[str, Any])
    async with gateway.client("legacy") as client:
        out: dict[str, Any] = {"tools": await raw_tools(client.session)}
        for kind, listed in (("prompts", await client.list_prompts()),
                             ("resources", await client.list_resources()),
                             ("templates", await client.list_resource_templates())):
            out[kind] = as_dict.validate_python(listed.model_dump(by_alias=True, mode="json",
                                                                  exclude_none=True))
    return out


async def test_servers_from_a_desktop_config_list_what_a_gateway_toml_lists(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    memory = MemoryServers()
    web_app = LoggingUpstream(logging_env(tmp_path / "web.jsonl")).build().streamable_http_app(
        host="127.0.0.1")
    with memory.installed():
        async with asgi_served(web_app) as web:
            servers: dict[str, Entry] = {
                "fs": command(memory.logging_upstream("fs"), logging_env(tmp_path / "fs.jsonl")),
                "memory": command(memory.logging_upstream("memory"),
                                  logging_env(tmp_path / "memory.jsonl")),
                "web": {"url": f"{web}/mcp"}}
            desktop = write_desktop(tmp_path / "claude_desktop_config.json", servers)
            config = write_gateway_toml(tmp_path / "gateway.toml", policy, servers)
            listen = ["--listen", "http://127.0.0.1:0"]
            async with cli_gateway(["--config", str(config), *listen]) as from_toml, \
                    cli_gateway(["--policy", str(policy), "--servers", str(desktop), *listen]
                                ) as from_desktop:
                await from_toml.until_ready()
                await from_desktop.until_ready()
                toml_listing = await everything_listed(from_toml)
                desktop_listing = await everything_listed(from_desktop)
    tools = {t["name"]: t for t in toml_listing["tools"]}
    assert {name.split("__", 1)[0] for name in tools} == {"fs", "memory", "web"}
    assert tools["fs__echo"]["execution"]["requirements"] == ["auth:claim:role:observer"]
    assert toml_listing["prompts"]["prompts"]
    assert desktop_listing == toml_listing


def test_the_shipped_desktop_config_names_what_the_shipped_policy_guards() -> None:
    servers = json.loads(SHIPPED_DESKTOP.read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["fs", "memory", "time", "everything"]
    assert {entry["command"] for entry in servers.values()} == {"npx", ".venv/bin/mcp-server-time"}
    assert all(entry["args"][0] == "--no-install" for entry in servers.values()
               if entry["command"] == "npx")
    named = tomllib.loads(DESKTOP_POLICY.read_text(encoding="utf-8"))["tools"]
    assert {name.split("__", 1)[0] for name in named} <= set(servers)


SHIPPED_SERVERS = {"fs", "memory", "time", "everything"}
DESKTOP_REQUIREMENTS = {name: table["requirements"] for name, table in tomllib.loads(
    DESKTOP_POLICY.read_text(encoding="utf-8"))["tools"].items()}


def test_the_shipped_desktop_config_starts_on_what_make_install_provides(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's command refused the file while one of its commands (uvx) was not installed."""
    monkeypatch.chdir(ROOT)  # its commands as the clone has them (.venv/bin/mcp-server-time)
    code = main(["config", "validate", "examples/desktop-config.json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.strip() == ("OK: examples/desktop-config.json (4 server(s): fs, memory, time, "
                           "everything)")


@pytest.fixture
def shared_folder(tmp_path: Path) -> Path:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    (shared / "notes.txt").write_text("first line\n", encoding="utf-8")
    return shared


@pytest.mark.interop
# work bound, not an event wait: the whole test, four npx servers; its waits are 10 s
@pytest.mark.timeout(120)
async def test_done_criterion_the_sdk_client_in_front_of_the_shipped_desktop_config(
        shared_folder: Path, tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.jsonl"
    desktop = shipped_desktop(tmp_path / "desktop-config.json", shared_folder, memory_file)
    before = snapshot(shared_folder)
    # From the clone, as the command is typed; the environment names this tree's sources.
    params = StdioServerParameters(command=str(GATEWAY_SCRIPT), args=[
        "gateway", "--policy", str(DESKTOP_POLICY), "--servers", str(desktop), "--claims",
        str(OBSERVER)], env=server_env(), cwd=ROOT)
    async with Client(params, mode="legacy") as client:
        tools = {t["name"]: t for t in await raw_tools(client.session)}
        read = await client.call_tool("fs__read_text_file", {"path": str(shared_folder / "notes.txt")})
        now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
        denied = await client.call_tool("memory__create_entities", {"entities": [
            {"name": "x", "entityType": "t", "observations": ["o"]}]})
    assert {name.split("__", 1)[0] for name in tools} == SHIPPED_SERVERS
    assert all("__" in name for name in tools)
    assert {"fs__read_text_file", "memory__read_graph", "time__get_current_time",
            "everything__echo"} <= set(tools)
    assert shown_requirements(tools) == DESKTOP_REQUIREMENTS
    assert read.is_error is False and [c.model_dump(exclude_none=True) for c in read.content] == [
        {"type": "text", "text": "first line\n"}]
    assert now.is_error is False and now.structured_content is not None
    assert now.structured_content["timezone"] == "UTC"
    assert denial_of(denied) == {"error": "unmet_requirements", "tool": "memory__create_entities",
                                 "unmet": ["auth:scope:memory:write"], "withheld": 0}
    assert not memory_file.exists()
    assert snapshot(shared_folder) == before


@pytest.mark.interop
# work bound, not an event wait: three Inspector runs, each starting the gateway and four servers
@pytest.mark.timeout(400)
def test_done_criterion_the_inspector_in_front_of_the_shipped_desktop_config(
        shared_folder: Path, tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.jsonl"
    desktop = shipped_desktop(tmp_path / "desktop-config.json", shared_folder, memory_file)
    target = ["--", str(GATEWAY_SCRIPT), "gateway", "--policy", str(DESKTOP_POLICY), "--servers",
              str(desktop), "--claims", str(OBSERVER)]
    before = snapshot(shared_folder)

    tools = listing(tmp_path, None, target)
    code, denied = call(tmp_path, None, target, "memory__create_entities",
                        entities='[{"name": "x", "entityType": "t", "observations": ["o"]}]')
    allowed_code, read = call(tmp_path, None, target, "fs__read_text_file",
                              path=str(shared_folder / "notes.txt"))

    assert {name.split("__", 1)[0] for name in tools} == SHIPPED_SERVERS
    assert all("__" in name for name in tools)
    assert shown_requirements(tools) == DESKTOP_REQUIREMENTS  # every name the policy guards, as it says
    assert code == DENIED and denied["isError"] is True
    assert denied["content"][0]["text"] == (
        "Tool 'memory__create_entities' was not run: unmet requirements: auth:scope:memory:write. "
        "Missing scopes: memory:write.")
    assert not memory_file.exists()
    assert allowed_code == 0 and read["content"] == [{"type": "text", "text": "first line\n"}]
    assert snapshot(shared_folder) == before
