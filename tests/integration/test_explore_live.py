"""The explorer's live tool sources (issue 26): the tools of a running server (`-- COMMAND`, as
`mcp-preconditions tools` lists them) and of a gateway.toml's servers under their visible names,
through the page's own JSON endpoint, and one tool source exactly.

`explore` runs in this process (tests/fixtures/explore_inprocess.py), its app called through the
streaming bridge. The servers it lists are real processes (interop): npm server-filesystem and
mcp-server-time, the servers we did not write, which it starts with the MCP SDK's stdio client.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_preconditions.cli import main
from tests.fixtures.explore_inprocess import Explored, explored
from tests.fixtures.upstreams import filesystem_stdio, time_stdio

pytestmark = pytest.mark.integration
POLICY = '[tools.write_file]\nrequirements = ["auth:claim:role:editor"]\n'
EDITOR = '[tools.fs__write_file]\nrequirements = ["auth:claim:role:editor"]\n'


async def decisions(page: Explored, policy: str) -> dict[str, dict[str, object]]:
    async with page.http() as http:
        response = await http.post(page.url + "api/decisions", json={"policy": policy},
                                   headers=page.headers)
    assert response.status_code == 200, response.text
    return {t["name"]: t for t in response.json()["tools"]}


@pytest.mark.interop
async def test_a_live_server_is_explored_as_tools_lists_it(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    (tmp_path / "files").mkdir()
    async with explored("--policy", str(policy), "--", *filesystem_stdio(tmp_path / "files")) as page:
        tools = await decisions(page, POLICY)
    assert {"read_text_file", "write_file", "list_directory"} <= set(tools)
    assert tools["write_file"]["allowed"] is False
    assert tools["list_directory"]["allowed"] is True


@pytest.mark.interop
async def test_a_gateway_config_is_explored_under_visible_names(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(EDITOR, encoding="utf-8")
    config = tmp_path / "gateway.toml"
    fs, clock = filesystem_stdio(tmp_path / "files"), time_stdio()
    config.write_text(f'policy = "policy.toml"\n'
                      f'[servers.fs]\ncommand = {json.dumps(fs[0])}\nargs = {json.dumps(fs[1:])}\n'
                      f'[servers.clock]\ncommand = {json.dumps(clock[0])}\n'
                      f'args = {json.dumps(clock[1:])}\n', encoding="utf-8")
    async with explored("--policy", str(policy), "--config", str(config)) as page:
        tools = await decisions(page, EDITOR)
    assert "fs__write_file" in tools and "clock__get_current_time" in tools
    assert tools["fs__write_file"]["allowed"] is False
    assert tools["clock__get_current_time"]["allowed"] is True
    assert not [n for n in tools if not n.startswith(("fs__", "clock__"))]


@pytest.mark.parametrize("extra", [["--tools", "examples/mission-control-tools.json", "--", "ls"],
                                   []])
def test_one_tool_source_exactly(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--policy", "policies/mission-control.toml", *extra]) == 2
    assert capsys.readouterr().err == (
        "mcp-preconditions explore: error: give the tools one way: --tools T, --config gateway.toml, "
        "--servers FILE, --upstream-url URL, or a command after --\n")
