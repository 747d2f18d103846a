"""docs/mcp.md's stdio server (issue 29, item 10), run as written: a FastMCP server whose
`credentials=` hook names the local caller from its environment over stdio (there is no HTTP
request there), and whose `log_decisions()` line makes its decision records appear on stderr.
Started by the MCP SDK's stdio client, as a desktop client starts it.

Interop: the example's promise is its process's (the caller read from the environment a desktop
client starts it with, the records on that process's stderr through `log_decisions()`): run in this
process, neither its environment nor its stderr would be its own.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_preconditions.integrations.client_mcp import denial_of
from tests.fixtures.mcp_servers import ROOT, server_env

pytestmark = [pytest.mark.integration, pytest.mark.interop]

DECISIONS = "mcp_preconditions.decisions: "


def example() -> str:
    """The ```python block of docs/mcp.md that starts with `# notes_server.py`."""
    text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    found = [b for b in blocks if b.startswith("# notes_server.py")]
    assert len(found) == 1
    return found[0]


async def run(script: Path, errlog: Path, **env: str) -> Any:
    params = StdioServerParameters(command=sys.executable, args=[str(script)],
                                   env=server_env(**env), cwd=ROOT)
    with errlog.open("w", encoding="utf-8") as errors:
        async with Client(stdio_client(params, errlog=errors)) as client:
            return await client.call_tool("write_note", {"text": "hi"})


def records(errlog: Path) -> list[dict[str, Any]]:
    return [json.loads(line.split(DECISIONS, 1)[1])
            for line in errlog.read_text(encoding="utf-8").splitlines() if DECISIONS in line]


async def test_the_stdio_example_names_its_caller_and_shows_its_decisions(tmp_path: Path) -> None:
    script = tmp_path / "notes_server.py"
    script.write_text(example(), encoding="utf-8")
    editor = await run(script, tmp_path / "editor.err",
                       NOTES_CALLER=json.dumps({"sub": "ada", "role": "editor"}))
    assert editor.is_error is False
    assert [c.text for c in editor.content] == ["saved: hi"]
    assert [(r["tool"], r["subject"], r["allowed"]) for r in records(tmp_path / "editor.err")] == [
        ("write_note", "ada", True)]
    nobody = await run(script, tmp_path / "nobody.err")
    assert denial_of(nobody) == {"error": "unmet_requirements", "tool": "write_note",
                                 "unmet": ["auth:claim:role:editor"], "withheld": 0}
    assert [(r["tool"], r["subject"], r["allowed"]) for r in records(tmp_path / "nobody.err")] == [
        ("write_note", None, False)]
