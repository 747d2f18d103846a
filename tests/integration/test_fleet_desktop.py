"""A desktop client's own config guarded with one command (SPEC §12): `gateway --policy P --servers
FILE` reads `{"mcpServers": {...}}` as the same servers a gateway.toml names, with the same listing;
and the issue's done-criterion: the shipped examples/desktop-config.json (its npx/uvx packages
replaced by the same packages installed here, its placeholder paths by temporary ones) behind
`mcp-preconditions gateway --policy policies/desktop.toml --servers ...`, driven by the MCP Inspector
CLI as a user types it, shows prefixed tools with requirements and a denial.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import TypeAdapter

from tests.fixtures.fleet import (
    DESKTOP_POLICY,
    SHIPPED_DESKTOP,
    fleet_http,
    local_desktop_servers,
    servers_http,
    write_desktop,
    write_gateway_toml,
)
from tests.fixtures.mcp_servers import raw_tools
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
    named = tomllib.loads(DESKTOP_POLICY.read_text(encoding="utf-8"))["tools"]
    assert {name.split("__", 1)[0] for name in named} <= set(servers)


@pytest.mark.timeout(400)  # three Inspector runs, each starting the gateway and three servers
def test_done_criterion_the_inspector_in_front_of_the_shipped_desktop_config(
        everything_http_server: Listening, tmp_path: Path) -> None:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    (shared / "notes.txt").write_text("first line\n", encoding="utf-8")
    memory_file = tmp_path / "memory.jsonl"
    desktop = write_desktop(tmp_path / "desktop-config.json",
                            local_desktop_servers(shared, memory_file, everything_http_server.url))
    target = ["--", str(GATEWAY_SCRIPT), "gateway", "--policy", str(DESKTOP_POLICY), "--servers",
              str(desktop), "--claims", str(OBSERVER)]
    named = {name: table["requirements"] for name, table in tomllib.loads(
        DESKTOP_POLICY.read_text(encoding="utf-8"))["tools"].items()}
    before = snapshot(shared)

    tools = listing(tmp_path, None, target)
    code, denied = call(tmp_path, None, target, "memory__create_entities",
                        entities='[{"name": "x", "entityType": "t", "observations": ["o"]}]')
    allowed_code, read = call(tmp_path, None, target, "fs__read_text_file", path=str(shared / "notes.txt"))

    assert {name.split("__", 1)[0] for name in tools} == {"fs", "memory", "time", "everything"}
    assert all("__" in name for name in tools)
    assert shown_requirements(tools) == named  # every name the policy guards is there, as it says
    assert code == DENIED and denied["isError"] is True
    assert denied["content"][0]["text"] == (
        "Tool 'memory__create_entities' was not run: unmet requirements: auth:scope:memory:write. "
        "Missing scopes: memory:write.")
    assert not memory_file.exists()
    assert allowed_code == 0 and read["content"] == [{"type": "text", "text": "first line\n"}]
    assert snapshot(shared) == before
