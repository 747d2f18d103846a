"""A desktop client's own config guarded with one command (SPEC §12): `gateway --policy P --servers
FILE` reads `{"mcpServers": {...}}` as the same servers a gateway.toml names, with the same listing;
and the issue's done-criterion: the shipped examples/desktop-config.json (its placeholder paths
replaced by temporary ones, its commands as shipped: what `make install` provides, run from the
clone) behind `mcp-preconditions gateway --policy policies/desktop.toml --servers ...`, driven by the
SDK's client and by the MCP Inspector CLI as a user types it, shows every server's prefixed tools
with their requirements, an allowed call and a denial.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic import TypeAdapter

from mcp_preconditions.integrations.client_mcp import denial_of
from tests.fixtures.fleet import (
    DESKTOP_POLICY,
    SHIPPED_DESKTOP,
    fleet_http,
    servers_http,
    shipped_desktop,
    write_desktop,
    write_gateway_toml,
)
from tests.fixtures.mcp_servers import CLI, ROOT, raw_tools, server_env
from tests.fixtures.upstreams import GATEWAY_SCRIPT, Listening
from tests.integration.test_fleet_thirdparty import POLICY, servers_of
from tests.integration.test_gateway_inspector import DENIED, OBSERVER, call, listing, shown_requirements
from tests.integration.test_gateway_thirdparty import snapshot

pytestmark = pytest.mark.integration


async def everything_listed(url: str) -> dict[str, Any]:
    """tools/list, prompts/list, resources/list and resources/templates/list as they came."""
    as_dict: Any = TypeAdapter(dict[str, Any])
    async with Client(url, mode="legacy") as client:
        out: dict[str, Any] = {"tools": await raw_tools(client.session)}
        for kind, listed in (("prompts", await client.list_prompts()),
                             ("resources", await client.list_resources()),
                             ("templates", await client.list_resource_templates())):
            out[kind] = as_dict.validate_python(listed.model_dump(by_alias=True, mode="json",
                                                                  exclude_none=True))
    return out


def test_servers_from_a_desktop_config_list_what_a_gateway_toml_lists(
        everything_http_server: Listening, tmp_path: Path) -> None:
    servers, _disk, _memory = servers_of(tmp_path, everything_http_server.url)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    desktop = write_desktop(tmp_path / "claude_desktop_config.json", servers)
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, servers)
    with fleet_http(config) as from_toml, servers_http(policy, desktop) as from_desktop:
        toml_listing = anyio.run(everything_listed, from_toml.url)
        desktop_listing = anyio.run(everything_listed, from_desktop.url)
    assert len(toml_listing["tools"]) > 30 and toml_listing["prompts"]["prompts"]
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


def test_the_shipped_desktop_config_starts_on_what_make_install_provides() -> None:
    """The issue's command refused the file while one of its commands (uvx) was not installed."""
    done = subprocess.run([*CLI, "config", "validate", "examples/desktop-config.json"], cwd=ROOT,
                          env=server_env(), capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == ("OK: examples/desktop-config.json (4 server(s): fs, memory, time, "
                                   "everything)")


@pytest.fixture
def shared_folder(tmp_path: Path) -> Path:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    (shared / "notes.txt").write_text("first line\n", encoding="utf-8")
    return shared


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


@pytest.mark.timeout(400)  # three Inspector runs, each starting the gateway and four servers
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
