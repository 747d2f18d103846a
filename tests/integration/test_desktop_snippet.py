"""The desktop snippet works from any directory (issue 22, item 13): the JSON the README and
docs/gateway.md give (the same one in both) is run literally, its placeholder paths substituted, as
a desktop client runs it: from `/`, with the SDK's default small environment, by the SDK's stdio
client. It lists the tools, makes one allowed call and one denied call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fixtures.mcp_servers import ROOT

pytestmark = pytest.mark.integration

CLAIMS = ROOT / "examples" / "claims" / "observer.json"
_BLOCK = re.compile(r"```json\n(\{\"mcpServers\".*?)\n```", re.DOTALL)


def snippet(doc: Path) -> str:
    """The doc's desktop snippet for one server (the command after `--`; the one-entry snippet of
    many servers, `--servers`, is tests/integration/test_fleet_desktop.py's)."""
    found = [b for b in _BLOCK.findall(doc.read_text(encoding="utf-8")) if '"--", ' in b]
    assert len(found) == 1, f"{doc}: expected one single-server desktop snippet"
    return str(found[0])


def test_the_readme_and_docs_give_the_same_snippet() -> None:
    assert snippet(ROOT / "README.md") == snippet(ROOT / "docs" / "gateway.md")


def configured(text: str) -> dict[str, Any]:
    """The snippet with the clone's path and a claims file put in, as a user would."""
    text = text.replace("/path/to/mcp-preconditions", str(ROOT)).replace("/path/to/me.json", str(CLAIMS))
    assert "/path/to" not in text
    server: dict[str, Any] = json.loads(text)["mcpServers"]["everything"]
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
