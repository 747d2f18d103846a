"""The desktop snippets work from any directory (issue 22, item 13): each JSON the README and
docs/gateway.md give (the same one in both), for one server and for many (`--servers`), is run
literally, its placeholder paths substituted, as a desktop client runs it: from `/`, with the SDK's
default small environment, by the SDK's stdio client. Each lists the tools, makes one allowed call
and one denied call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.integrations.client_mcp import denial_of
from tests.fixtures.fleet import DESKTOP_POLICY, clock, command, filesystem, memory, write_desktop
from tests.fixtures.mcp_servers import ROOT
from tests.fixtures.upstreams import everything_stdio

pytestmark = pytest.mark.integration

CLAIMS = ROOT / "examples" / "claims" / "observer.json"
_BLOCK = re.compile(r"```json\n(\{\"mcpServers\".*?)\n```", re.DOTALL)


def snippet(doc: Path, many: bool = False) -> str:
    """The doc's desktop snippet for one server (the command after `--`), or for many (`--servers`)."""
    mark = '"--servers", ' if many else '"--", '
    found = [b for b in _BLOCK.findall(doc.read_text(encoding="utf-8")) if mark in b]
    assert len(found) == 1, f"{doc}: expected one desktop snippet with {mark}"
    return str(found[0])


@pytest.mark.parametrize("many", [False, True], ids=["one server", "many servers"])
def test_the_readme_and_docs_give_the_same_snippet(many: bool) -> None:
    assert snippet(ROOT / "README.md", many) == snippet(ROOT / "docs" / "gateway.md", many)


def configured(text: str, key: str = "everything", **paths: Path) -> dict[str, Any]:
    """The snippet with the clone's path, a claims file and `paths` (placeholder name: path) put
    in, as a user would."""
    text = text.replace("/path/to/mcp-preconditions", str(ROOT)).replace("/path/to/me.json", str(CLAIMS))
    for name, path in paths.items():
        text = text.replace(f"/path/to/{name}", str(path))
    assert "/path/to" not in text
    server: dict[str, Any] = json.loads(text)["mcpServers"][key]
    return server


async def test_the_snippet_runs_from_the_root_directory() -> None:
    server = configured(snippet(ROOT / "README.md"))
    assert Path(server["command"]).is_absolute()
    # No `env`: the SDK's stdio client passes only its small default environment (HOME, PATH, ...),
    # like a desktop client; and `/` as the working directory, where nothing of the clone resolves.
    params = StdioServerParameters(command=server["command"], args=server["args"], cwd="/")
    async with Client(params, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        echoed = await client.call_tool("echo", {"message": "from /"})
        refused = await client.call_tool("get-env", {})
    assert {"echo", "get-env", "get-sum"} <= set(names)
    assert echoed.is_error is False
    assert "from /" in json.dumps(echoed.model_dump(mode="json"))
    assert refused.is_error is True
    assert refused.structured_content == {"error": "unmet_requirements", "tool": "get-env",
                                          "unmet": ["auth:claim:role:operator"], "withheld": 0}


async def test_the_many_server_snippet_runs_from_the_root_directory(tmp_path: Path) -> None:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    (shared / "notes.txt").write_text("first line\n", encoding="utf-8")
    memory_file = tmp_path / "memory.jsonl"
    # The user's own servers, each a command a desktop client can start from any directory.
    servers = write_desktop(tmp_path / "servers.json", {
        "fs": filesystem(shared), "memory": memory(memory_file), "time": clock(),
        "everything": command(everything_stdio())})
    server = configured(snippet(ROOT / "README.md", many=True), "guarded",
                        **{"policy.toml": DESKTOP_POLICY, "servers.json": servers})
    assert Path(server["command"]).is_absolute()
    params = StdioServerParameters(command=server["command"], args=server["args"], cwd="/")
    async with Client(params, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        read = await client.call_tool("fs__read_text_file", {"path": str(shared / "notes.txt")})
        refused = await client.call_tool("everything__get-env", {})
    assert {name.split("__", 1)[0] for name in names} == {"fs", "memory", "time", "everything"}
    assert {"fs__read_text_file", "memory__read_graph", "time__get_current_time",
            "everything__echo"} <= set(names)
    assert read.is_error is False and "first line" in json.dumps(read.model_dump(mode="json"))
    assert denial_of(refused) == {"error": "unmet_requirements", "tool": "everything__get-env",
                                  "unmet": ["auth:claim:role:operator"], "withheld": 0}
